"""JSON bytes of anything the simulator parsed, however deep: orjson reads 1024 levels but writes only 255, so a
deep but valid body (a tool schema nested 300 levels) is written by the standard library's encoder instead, never a
500 (the Responses profile echoes ``tools``; token estimates and binding digests encode what the client sent)."""

from __future__ import annotations

import json
import sys

import orjson

_READ_DEPTH = 1024  # orjson's parse limit: nothing the simulator holds is deeper


def dumps(obj: object, *, sort_keys: bool = False) -> bytes:
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except orjson.JSONEncodeError:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 4 * _READ_DEPTH))  # the standard encoder recurses once a level
        try:
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys).encode(
                "utf-8", "surrogatepass")
        finally:
            sys.setrecursionlimit(limit)


def estimate_tokens(obj: object) -> int:
    """About 4 bytes a token."""
    return max(1, len(dumps(obj)) // 4)

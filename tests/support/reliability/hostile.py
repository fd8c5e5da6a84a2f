"""Hostile request bodies and a keyspace fingerprint, shared by the hostile-input and fuzz tests.

``Keyspace.snapshot()`` is (number of keys, SHA-256 over every key and its ``DUMP``): equal snapshots mean
nothing stored was added, removed or changed (a TTL refresh is not a change: DUMP carries no TTL).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

MODEL = "claude-opus-4-5"
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 1024}}
ENDPOINTS = {  # name -> (path, dialect of its error envelope, a valid body)
    "messages": ("/v1/messages", "anthropic",
                 {"model": MODEL, "max_tokens": 1024, "thinking": {"type": "enabled", "budget_tokens": 1024},
                  "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    "count_tokens": ("/v1/messages/count_tokens", "anthropic",
                     {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    "chat_completions": ("/v1/chat/completions", "openai",
                         {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]}),
    "chat_stream": ("/gateway/chat-stream", "anthropic",
                    {"model": MODEL, "message": "hi", "chat_history": [
                        {"request_message": "a", "response_text": "b", "response_nodes": []}],
                     "max_tokens": 1024}),
    "responses": ("/v1/responses", "openai",
                  {"model": MODEL, "max_output_tokens": 1024, "reasoning": {"effort": "low"},
                   "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
    "generate_content": ("/v1beta/models/gemini-3-pro-preview:generateContent", "gemini", GEMINI_BODY),
    "stream_generate_content": ("/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse", "gemini",
                                GEMINI_BODY),
}
MARKER = re.compile(rb"^tg:\{([^:{}]+)\}:seen$")
WRONG: list[Any] = [None, True, -1, 2**63, 1e308, "x", [None], {"a": None}]


@dataclass(frozen=True)
class Snap:
    """Every key's DUMP, and every conversation's stored turns (``tg:*:turns`` lists)."""

    dumps: dict[bytes, bytes]
    turns: dict[bytes, list[bytes]]

    def digest(self, prefix: bytes = b"") -> tuple[int, str]:
        """(number of keys, SHA-256 of keys and DUMPs), for the keys starting with ``prefix``."""
        h = hashlib.sha256()
        keys = sorted(k for k in self.dumps if k.startswith(prefix))
        for k in keys:
            h.update(k + b"\x00" + self.dumps[k] + b"\x01")
        return len(keys), h.hexdigest()

    def owned(self, prefixes: tuple[bytes, ...]) -> set[bytes]:
        """The keys of the tenants with these key prefixes, with the tenant-less SCID markers
        (``tg:{<scid>}:seen``, see ``state.keys``) of their conversations."""
        own = {k for k in self.dumps if k.startswith(prefixes)}
        scids = {k.split(b":")[2].rstrip(b"}") for k in own if k.endswith(b"}:meta")}
        return own | {k for k in self.dumps if (m := MARKER.match(k)) and m.group(1) in scids}

    def turns_kept(self, later: Snap) -> bool:
        """Every turn stored here is still stored, in place, in ``later`` (appending is fine)."""
        return all(later.turns.get(k, [])[:len(v)] == v for k, v in self.turns.items())


class Keyspace:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def snapshot(self) -> Snap:
        """Each key's value: DUMP, except hashes, whose DUMP follows the dict's iteration order, which an
        incremental rehash changes on a mere read (seen: a refused write left a conversation's meta
        logically equal, its DUMP not); a hash is compared by its sorted fields instead."""
        keys = sorted(self.client.scan_iter(count=1000))
        lists = [k for k in keys if k.endswith(b":turns")]
        pipe = self.client.pipeline(transaction=False)
        for k in keys:
            pipe.type(k)
        types = pipe.execute()
        for k, t in zip(keys, types, strict=True):
            pipe.hgetall(k) if t == b"hash" else pipe.dump(k)
        for k in lists:
            pipe.lrange(k, 0, -1)
        out = pipe.execute()
        values = [repr(sorted(v.items())).encode() if isinstance(v, dict) else v or b"" for v in out[:len(keys)]]
        return Snap(dict(zip(keys, values, strict=True)), dict(zip(lists, out[len(keys):], strict=True)))


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path (dict keys / list indexes) into a JSON value, the root excluded."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for k, v in items:
        yield (*prefix, k)
        yield from paths(v, (*prefix, k))


def replaced(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node: Any = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def wrong_type_bodies(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in paths(body):
        for value in WRONG:
            yield f"{'.'.join(map(str, path))}={value!r}"[:80], replaced(body, path, value)


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = {"a": [value]}
    return value


def raw_bodies(valid: bytes) -> list[tuple[str, bytes]]:
    """Bodies that are not a JSON object (or not JSON at all)."""
    cases = [
        ("empty", b""),
        ("whitespace", b"   \n"),
        ("malformed", b'{"model": '),
        ("truncated", valid[: len(valid) // 2]),
        ("trailing garbage", valid + b"}}"),
        ("array", b"[1, 2, 3]"),
        ("string", b'"hello"'),
        ("number", b"42"),
        ("null", b"null"),
        ("invalid utf-8", valid.replace(b'"hi"', b'"\xff\xfe\xfd"', 1)),
        ("lone surrogate", valid.replace(b'"hi"', b'"\\ud800"', 1)),
        ("lone low surrogate", valid.replace(b'"hi"', b'"\\udc00 x"', 1)),
        ("nul bytes", valid.replace(b'"hi"', b'"\x00"', 1)),
        ("nested 100k", b"[" * 100_000 + b"]" * 100_000),
        ("huge number", valid.replace(b"1024", b"1" + b"0" * 400, 1)),
        ("infinity", valid.replace(b"1024", b"1e999", 1)),
        ("NaN", valid.replace(b"1024", b"NaN", 1)),
        ("utf-16", valid.decode().encode("utf-16")),
        ("bom", b"\xef\xbb\xbf" + valid),
    ]
    return [(name, raw) for name, raw in cases if raw != valid]

"""Every hash and normalisation the store indexes by; the gateway calls the same functions to look up.

One module on purpose: a lookup only hits if the writer and the reader computed the key the same way.

- ``exact_hash(text)``: SHA-256 (hex) of the exact UTF-8 bytes of a thinking text (Layer 2, strict).
  Lone surrogates (possible in JSON-decoded text) are encoded with ``surrogatepass`` so nothing is lost.
- ``normalize_text(text)`` / ``norm_hash(text)``: whitespace-insensitive matching. All runs of Unicode
  whitespace (spaces, tabs, CR, LF, CRLF, NBSP...) collapse to one space, then both ends are stripped;
  ``norm_hash`` is SHA-256 (hex) of the normalised text. The gateway compares a replayed message's text
  with a recorded turn's by it; it is no index (text never names a turn or a conversation).
- ``compute_turn_id(content, prefix_fingerprint)``: SHA-256 (hex) over the canonical msgpack (map keys
  sorted recursively) of the assistant content plus the prefix fingerprint the turn answered. Same
  content answering the same prefix = same id, so recording is idempotent; an identical short reply
  ("Done.") answering a different prefix is a different turn.
- ``replay_digest(content)``: BLAKE2b-128 over the JSON of an assistant message's content with keys
  sorted (key order and whitespace insensitive, every value exact). A replay whose digest equals a
  turn's recorded one is that turn, verbatim: repair accepts it without decoding the record.
- ``index_entries(content)``: the lookup entries a turn contributes (tool ids, exact-text hashes with
  their signatures).
  Empty thinking texts (``display: omitted``) get no exact-hash entry: every such block has the same
  hash, so it would map to an arbitrary other turn's signature (a signature-only fallback).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import orjson

TURN_ID_SCHEME = "tg-turn/1"


def text_bytes(text: str) -> bytes:
    """The exact bytes a text hashes as (UTF-8, lone surrogates kept)."""
    return text.encode("utf-8", "surrogatepass")


def exact_hash(text: str) -> str:
    """SHA-256 hex of the exact thinking text bytes (no normalisation at all)."""
    return hashlib.sha256(text_bytes(text)).hexdigest()


# ASCII whitespace as ``str.split`` sees it (``str.isspace``), each byte to a space
_ASCII_SPACES = bytes.maketrans(b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f", b" " * 9)


def normalize_text(text: str) -> str:
    """Collapse every run of whitespace to a single space and strip both ends."""
    if text.isascii():
        return normalized_bytes(text).decode("ascii")
    return " ".join(text.split())


def normalized_bytes(text: str) -> bytes:
    """``text_bytes(normalize_text(text))``, in time linear in the text and within a few copies of it: an ASCII
    text is normalized as bytes (whitespace translated, runs of spaces halved until none is left), never split
    into a list of its words (24 MB of short words would be five million strings)."""
    if not text.isascii():
        return text_bytes(" ".join(text.split()))
    raw = text.encode("ascii").translate(_ASCII_SPACES)
    while b"  " in raw:
        raw = raw.replace(b"  ", b" ")
    return raw.strip(b" ")


def norm_hash(text: str) -> str:
    """SHA-256 hex of ``normalize_text(text)``; insensitive to whitespace, CRLF/LF and trimming."""
    return hashlib.sha256(normalized_bytes(text)).hexdigest()


_NESTED = (Mapping, list, tuple)


def _canonical(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        keys = list(obj)
        if all(type(k) is str for k in keys):  # (every stored dict: the sort below, without a key function)
            keys.sort()
            return {k: _canonical(v) if isinstance(v := obj[k], _NESTED) else v for k in keys}
        items = [(k, _canonical(v)) for k, v in obj.items()]
        items.sort(key=lambda kv: (type(kv[0]).__name__, kv[0]))
        return dict(items)
    if isinstance(obj, list | tuple):
        return [_canonical(v) if isinstance(v, _NESTED) else v for v in obj]
    return obj


def canonical_packb(obj: Any) -> bytes:
    """Deterministic msgpack: map keys sorted recursively, tuples as arrays, strings surrogate-safe."""
    packed: bytes = msgpack.packb(_canonical(obj), use_bin_type=True, unicode_errors="surrogatepass")
    return packed


def compute_turn_id(content: Sequence[Mapping[str, Any]], prefix_fingerprint: str | None = None) -> str:
    """The idempotency id of a turn (64 hex chars). Provider-opaque fields are not part of it."""
    return hashlib.sha256(canonical_packb([TURN_ID_SCHEME, content, prefix_fingerprint])).hexdigest()


REPLAY_DIGEST_BYTES = 16


def replay_digest(content: Any) -> bytes | None:
    """The digest of an assistant message's content as JSON (keys sorted); None if it is not a list
    or not representable as JSON (lone surrogates, non-string keys). SHA-256, truncated: computed for
    every replayed assistant message of every request, and with the CPU's SHA extensions it hashes
    about twice as fast as BLAKE2b here (a digest of the earlier BLAKE2b scheme simply never matches:
    such a turn is matched and compared block by block instead)."""
    if not isinstance(content, list):
        return None
    try:
        data = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return None
    return hashlib.sha256(data).digest()[:REPLAY_DIGEST_BYTES]


def thinking_pairs(content: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """``(thinking, signature)`` of every thinking block that has both (signature non-empty)."""
    for block in content:
        if block.get("type") != "thinking":
            continue
        text, sig = block.get("thinking"), block.get("signature")
        if isinstance(text, str) and isinstance(sig, str) and sig:
            yield text, sig


def last_thinking_pair(content: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """The last verified ``(thinking, signature)`` pair of a turn, or ``None``."""
    last = None
    for pair in thinking_pairs(content):
        last = pair
    return last


@dataclass(frozen=True, slots=True)
class IndexEntries:
    """What one turn contributes to the indexes (duplicates removed, first occurrence order)."""

    tool_ids: tuple[str, ...]
    exact: tuple[tuple[str, str], ...]  # (exact_hash of a thinking text, its signature)


def tool_use_ids(content: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The tool_use ids of one turn's content, in order, duplicates and empty ids left out."""
    ids: dict[str, None] = {}
    for block in content:
        if block.get("type") == "tool_use":
            tid = block.get("id")
            if isinstance(tid, str) and tid:
                ids[tid] = None
    return tuple(ids)


def index_entries(content: Sequence[Mapping[str, Any]]) -> IndexEntries:
    """Tool-use ids and exact thinking-text hashes with their signatures of one turn."""
    exact: dict[str, tuple[str, str]] = {}
    for text, sig in thinking_pairs(content):
        if text:
            h = exact_hash(text)
            exact[h] = (h, sig)
    return IndexEntries(tool_use_ids(content), tuple(exact.values()))

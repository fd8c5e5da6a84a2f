"""A same-dialect request's body as the client's own JSON: what thinkgate changes is spliced in, the rest passes byte
for byte.

When a client and its upstream speak one wire dialect (chat completions to an OpenAI-compatible upstream, Responses
to a Responses upstream), the dialect's ``same_dialect`` decides each top-level field: thinkgate's value (the repaired
messages or input, the model, the stream options it needs, a reasoning parameter consistent with repair) or the
client's own, the very object the client's JSON parsed to. ``splice`` writes that decision as bytes: a value that is
the client's object is the client's bytes of it, as they came (their number forms, escapes, spacing, duplicate keys
inside them), and only what thinkgate decided is encoded.

Finding the client's bytes of each top-level value without parsing the body a second time: the big value (the
history, ``gap``) is always thinkgate's, so it is never read. The fields after it are read from the end of the body
and the fields before it from the start, each by its canonical JSON (what orjson writes of the parsed value) when
the client wrote it that way, else by the standard library's scanner over that one value; a field found from the
end is checked to end where the next one begins. What lies between is the gap. A body read otherwise (a key written
with escapes, a field the client sent twice) is encoded whole, as before.

The scanner's reads are bounded, so a hostile body cannot make the search cost more than the body: at most
``SCANS`` values of one body, each within ``WINDOW`` bytes; past that the body is encoded whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.scanner import make_scanner
from typing import Any

import orjson

_WS = b" \t\n\r"
# the standard library's C scanner: (value, end) of the JSON value at an index of a str
_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]

Spans = dict[str, tuple[int, int]]
SCANS = 8          # values of one body the scanner may read
WINDOW = 1 << 20   # bytes a scanned value may span


class _Scanner:
    """The standard library's scanner over windows of one body, ``SCANS`` reads at most."""

    def __init__(self) -> None:
        self.left = SCANS

    def read(self, raw: bytes, start: int, stop: int) -> tuple[Any, int] | None:
        """The value at ``start`` (within ``raw[start:stop]``) and the byte offset it ends at; None when there is
        none, or no reads are left."""
        if self.left <= 0:
            return None
        self.left -= 1
        while stop < len(raw) and raw[stop] & 0xC0 == 0x80:  # (a window ends on a character's first byte)
            stop -= 1
        try:
            text = raw[start:stop].decode()
            parsed, end = _scan(text, 0)
        except (ValueError, StopIteration):
            return None
        return parsed, start + (end if text.isascii() else len(text[:end].encode()))


def splice(raw: bytes, client: Mapping[str, Any], out: Mapping[str, Any], gap: str) -> bytes:
    """``out`` (the body thinkgate decided for a request whose top-level fields, parsed from ``raw`` in its order,
    are ``client``; ``client[gap]`` not read) as bytes: each of its values that is the client's own object is the
    client's bytes of it."""
    passed = [k for k, v in out.items() if k != gap and k in client and client[k] is v]
    spans = value_spans(raw, client, gap) if passed else None
    if not spans:
        return orjson.dumps(out)
    kept = set(passed)
    return orjson.dumps({k: orjson.Fragment(raw[spans[k][0]:spans[k][1]]) if k in kept else v for k, v in out.items()})


def value_spans(raw: bytes, client: Mapping[str, Any], gap: str) -> Spans | None:
    """Where each top-level value of ``raw`` is (``client``: its fields, parsed, in order), the ``gap``'s
    included; None when the body is not read that way."""
    keys = list(client)
    if gap not in client:
        return None
    g = keys.index(gap)
    start = _skip(raw, 0)
    end = _rskip(raw, len(raw))
    if raw[start:start + 1] != b"{" or raw[end - 1:end] != b"}":
        return None
    spans: Spans = {}
    reads = _Scanner()
    p = _rskip(raw, end - 1)  # the end of the last value
    for key in reversed(keys[g + 1:]):
        found = _from_end(raw, p, key, client[key], reads)
        if found is None:
            return None
        spans[key] = (found[0], p)
        p = found[1]
    pos = start + 1
    for key in keys[:g + 1]:
        pos = _key(raw, pos, key)
        if pos < 0:
            return None
        if key == gap:
            spans[key] = (pos, p)
            return spans if p > pos else None
        value_end = _value_end(raw, pos, client[key], reads)
        if value_end < 0:
            return None
        spans[key] = (pos, value_end)
        pos = _skip(raw, value_end)
        if raw[pos:pos + 1] != b",":
            return None
        pos += 1
    return None


def _key(raw: bytes, pos: int, key: str) -> int:
    """Past ``"key":`` and the spaces after it at ``pos`` (spaces first), or -1."""
    pos = _skip(raw, pos)
    name = orjson.dumps(key)
    if not raw.startswith(name, pos):
        return -1
    pos = _skip(raw, pos + len(name))
    return _skip(raw, pos + 1) if raw[pos:pos + 1] == b":" else -1


def _value_end(raw: bytes, pos: int, value: Any, reads: _Scanner) -> int:
    """The end of the value at ``pos``, which parses to ``value``, or -1."""
    canonical = orjson.dumps(value)
    end = pos + len(canonical)
    if raw.startswith(canonical, pos) and raw[_skip(raw, end):_skip(raw, end) + 1] in (b",", b"}"):  # not 0.7 of 0.70
        return end
    got = reads.read(raw, pos, pos + WINDOW)
    return got[1] if got is not None and _same(got[0], value) else -1


def _from_end(raw: bytes, p: int, key: str, value: Any, reads: _Scanner) -> tuple[int, int] | None:
    """``,"key": value`` ending at ``p``: where the value starts, and where the value before it ends; None when the
    body does not end that way."""
    canonical = orjson.dumps(value)
    if raw.endswith(canonical, 0, p) and (found := _member(raw, p - len(canonical), key)) is not None:
        return p - len(canonical), found
    name = orjson.dumps(key)
    at, lowest = p, max(0, p - WINDOW)
    while reads.left > 0 and (at := raw.rfind(name, lowest, at)) > 0:  # the key's text, nearest first: is the rest
        q = _skip(raw, at + len(name))                                   # up to p its value?
        if raw[q:q + 1] != b":":
            continue
        q = _skip(raw, q + 1)
        got = reads.read(raw, q, p)
        if got is not None and got[1] == p and _same(got[0], value) and (found := _member(raw, q, key)) is not None:
            return q, found
    return None


def _member(raw: bytes, value_start: int, key: str) -> int | None:
    """Before ``value_start``: ``, "key" :`` (spaces allowed); the end of the value before the comma, or None."""
    q = _rskip(raw, value_start)
    if raw[q - 1:q] != b":":
        return None
    q = _rskip(raw, q - 1)
    name = orjson.dumps(key)
    if not raw.endswith(name, 0, q):
        return None
    q = _rskip(raw, q - len(name))
    return _rskip(raw, q - 1) if raw[q - 1:q] == b"," else None


def _same(a: Any, b: Any) -> bool:
    """The same JSON value (``1`` is not ``1.0`` nor ``true``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _skip(raw: bytes, pos: int) -> int:
    while pos < len(raw) and raw[pos] in _WS:
        pos += 1
    return pos


def _rskip(raw: bytes, end: int) -> int:
    while end > 0 and raw[end - 1] in _WS:
        end -= 1
    return end

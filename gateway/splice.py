"""Encoding a changed request without encoding its unchanged messages again.

When repair or sanitize changed a request, its Anthropic body is encoded from the canonical messages
(``pipeline.encode``). In an agent's tool loop most of those messages are the ones the previous request
carried: the replay memo hands them over as the same objects (``replay_memo``), and a turn restored from
its record is that record's JSON, the same list on every request. Encoding all of them again (a mangled
replay of a few hundred turns is megabytes of JSON) was a tenth of such a request's work. Here each
message's JSON is kept with what it was encoded from and spliced into the body as it is
(``orjson.Fragment``): a message's on the message object (``Message.encoded``), a recorded turn's JSON per
worker by the list it was encoded from (the record's, which nobody changes), bounded like the other
per-record caches (``GATEWAY_DECODED_TURN_CACHE``).

What a message encodes from: its blocks (or the undecoded JSON), ``extra``, ``content_was_string`` and
its role; kept JSON is used only while all of them are the objects (or values) it was made from. A block
changed in place would not be noticed, so ``pipeline.encode`` splices only requests whose stages changed
nothing in place (every such change is an action: the rule the replay memo keeps requests by). The bytes
are exactly what encoding the whole body gives (orjson's compact form has no context).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.protocols import anthropic
from gateway.protocols.canonical import Message, Request
from state.lru import ObjectLru

# a recorded turn's JSON (a message restored from its record, undecoded, extra empty) by the record's list
# it was encoded from (which the decoded-turn cache holds too), with the role it was encoded with: a worker's
# (``deps.WorkerCaches.recorded_json``)
RecordedJson = ObjectLru[list[Any], tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A message's upstream JSON with what it was encoded from (``Message.encoded``): used while the message
    still is exactly that."""

    source: list[Any]          # ``Message.source`` then: its undecoded JSON or its content list (by identity)
    extra: dict[str, Any]
    content_was_string: bool
    role: str
    data: bytes

    def holds_for(self, m: Message) -> bool:
        return self.source is m.source and self.extra == m.extra and \
            self.content_was_string is m.content_was_string and self.role == m.role


def message_json(m: Message, recorded: RecordedJson | None = None) -> bytes:
    """``m`` as Anthropic JSON: kept bytes while ``m`` is what they were made from, else encoded (and kept);
    a recorded turn's from ``recorded`` when another request encoded it already."""
    raw = m.raw_blocks
    kept = m.encoded
    if isinstance(kept, EncodedJson) and kept.holds_for(m):
        return kept.data
    shared = recorded is not None and raw is not None and m.raw_recorded and not m.extra
    if shared and recorded is not None and raw is not None:
        hit = recorded.get(raw)
        if hit is not None and hit[0] == m.role:
            return hit[1]
    # kept past the request (on the message, in ``recorded``): a right-sized copy, since orjson (3.12+) returns
    # its whole output buffer, 4 KiB at least and about 10x a long string's length (tracemalloc: 4,097 B
    # for a 29-byte dumps, 32 KiB for 3 KB)
    data = bytes(memoryview(orjson.dumps(anthropic.encode_message(m))))
    m.encoded = EncodedJson(m.source, m.extra, m.content_was_string, m.role, data)
    if shared and recorded is not None and raw is not None:
        recorded.put(raw, (m.role, data))
    return data


@dataclass(frozen=True, slots=True)
class Spliced:
    """A request's messages as its body carried them: the message objects, and their JSON in order as chunks
    (each the comma-joined JSON of some messages) for the conversation's next request, which starts with the
    same messages (``encode_request``)."""

    messages: list[Message]
    chunks: list[bytes]


_MARK = b"\x00"  # orjson escapes control characters in strings: a raw NUL is only ever this fragment's
_MAX_CHUNKS = 16  # a long conversation's chunks are joined into one now and then


def encode_request(req: Request, prefix: Spliced | None = None,
                   recorded: RecordedJson | None = None) -> tuple[bytes, Spliced]:
    """The request's Anthropic body, its messages spliced from ``message_json``; with what it carried for the
    next request. ``prefix``: the previous request's, when the caller vouches that its messages, where they
    are the first of ``req``'s as the same objects, are unchanged since it encoded them: their JSON is taken
    as it is, with no look at each message (a long replay's hundreds). The bytes are what encoding the whole
    request gives."""
    msgs = req.messages
    k = len(prefix.messages) if prefix is not None else 0
    if prefix is not None and 0 < k <= len(msgs) and all(map(operator.is_, msgs[:k], prefix.messages)):
        chunks = list(prefix.chunks)
        if len(msgs) > k:
            chunks.append(b",".join(message_json(m, recorded) for m in msgs[k:]))
        if len(chunks) > _MAX_CHUNKS:
            chunks = [b",".join(chunks)]
    else:
        chunks = [b",".join(message_json(m, recorded) for m in msgs)] if msgs else []
    skeleton = orjson.dumps(anthropic.request_fields(req, orjson.Fragment(b"[" + _MARK + b"]")))
    at = skeleton.find(_MARK)
    if at < 0:  # (a parameter named like the messages replaced them: encoded as the whole request is)
        return orjson.dumps(anthropic.encode_request(req, lambda m: orjson.Fragment(message_json(m, recorded)))), \
            Spliced([], [])
    parts = [skeleton[:at]]
    for c in chunks:
        parts += (c, b",")
    if chunks:
        parts.pop()
    parts.append(skeleton[at + 1:])
    return b"".join(parts), Spliced(list(msgs), chunks)

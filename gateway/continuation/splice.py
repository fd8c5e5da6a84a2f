"""Encoding a changed request without encoding its unchanged messages again.

When repair or sanitize changed a request, its Anthropic body is encoded from the canonical messages
(``pipeline.encode``). In an agent's tool loop most of those messages are the ones the previous request
carried: the replay memo hands them over as the same objects (``replay_memo``), and a turn restored from
its record is that record's JSON, the same list on every request. Encoding all of them again (a mangled
replay of a few hundred turns is megabytes of JSON) was a tenth of such a request's work. Here each
message's JSON is kept with what it was encoded from and spliced into the body as it is
(``orjson.Fragment``): a message's in the stage's table by message object (``SplicePrior.json``, handed from
request to request with the messages: ``gateway.continuation.replay_memo``), a recorded turn's JSON per worker by
the list it was encoded from (the record's, which nobody changes), bounded like the other per-record caches
(``GATEWAY_DECODED_TURN_CACHE``).

The stage is ``run(request, prior) -> (body, next_prior)``.

What a message encodes from: its blocks (or the undecoded JSON), ``extra``, ``content_was_string`` and
its role; kept JSON is used only while all of them are the objects (or values) it was made from. A block
changed in place would not be noticed, so ``pipeline.encode`` splices only requests whose stages changed
nothing in place (every such change is an action: the rule the replay memo keeps requests by). The bytes
are exactly what encoding the whole body gives (orjson's compact form has no context).
"""

from __future__ import annotations

import operator
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, Request
from state.coherence import ObjectLru

# a recorded turn's JSON (a message restored from its record, undecoded, extra empty) by the record's list
# it was encoded from (which the decoded-turn cache holds too), with the role it was encoded with: a worker's
# (``deps.WorkerCaches.recorded_json``)
RecordedJson = ObjectLru[list[Any], tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A message's upstream JSON with what it was encoded from (``SplicePrior.json``): used while the message
    still is exactly that."""

    message: Message           # the message object (the table is keyed by its ``id``)
    source: list[Any]          # ``Message.source`` then: its undecoded JSON or its content list (by identity)
    extra: dict[str, Any]
    content_was_string: bool
    role: str
    data: bytes

    def holds_for(self, m: Message) -> bool:
        return self.message is m and self.source is m.source and self.extra == m.extra and \
            self.content_was_string is m.content_was_string and self.role == m.role


JsonTable = dict[int, EncodedJson]  # each message's JSON as last encoded, by ``id`` of the message


def message_json(m: Message, table: JsonTable, recorded: RecordedJson | None = None,
                 from_records: Container[int] = (), kept: JsonTable | None = None) -> bytes:
    """``m`` as Anthropic JSON: kept bytes (in ``kept``, else ``table``) while ``m`` is what they were made from,
    else encoded; either way kept in ``table``. A recorded turn's (``from_records``: the ids of the messages repair
    restored as their record's JSON) from ``recorded`` when another request encoded it already."""
    raw = m.raw_blocks
    was = (kept if kept is not None else table).get(id(m))
    if was is not None and was.holds_for(m):
        table[id(m)] = was
        return was.data
    shared = recorded is not None and raw is not None and not m.extra and id(m) in from_records
    if shared and recorded is not None and raw is not None:
        hit = recorded.get(raw)
        if hit is not None and hit[0] == m.role:
            return hit[1]
    # kept past the request (in the prior's table, in ``recorded``): a right-sized copy, since orjson (3.12+)
    # returns its whole output buffer, 4 KiB at least and about 10x a long string's length (tracemalloc: 4,097 B
    # for a 29-byte dumps, 32 KiB for 3 KB)
    data = bytes(memoryview(orjson.dumps(anthropic.encode_message(m))))
    table[id(m)] = EncodedJson(m, m.source, m.extra, m.content_was_string, m.role, data)
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


@dataclass(frozen=True, slots=True)
class SplicePrior:
    """What ``run`` carries from a conversation's request to its next, which starts with the same messages."""

    json: JsonTable = field(default_factory=dict)  # each message's JSON (checked per message: ``holds_for``)
    prefix: Spliced | None = None  # the previous body's messages, when the caller vouches they are unchanged


_MARK = b"\x00"  # orjson escapes control characters in strings: a raw NUL is only ever this fragment's
_MAX_CHUNKS = 16  # a long conversation's chunks are joined into one now and then


def run(req: Request, prior: SplicePrior | None, recorded: RecordedJson | None = None,
        from_records: Container[int] = ()) -> tuple[bytes, SplicePrior]:
    """The request's Anthropic body, its messages spliced from ``message_json`` (``from_records``: there); with
    what the next request may start from. ``prior.prefix``: the previous request's, when the caller vouches that
    its messages, where they are the first of ``req``'s as the same objects (checked here), are unchanged since
    it encoded them: their JSON is taken as it is, with no look at each message (a long replay's hundreds). The
    bytes are what encoding the whole request gives."""
    msgs = req.messages
    table: JsonTable
    prefix = prior.prefix if prior is not None else None
    k = len(prefix.messages) if prefix is not None else 0
    if prefix is not None and prior is not None and 0 < k <= len(msgs) and \
            all(map(operator.is_, msgs[:k], prefix.messages)):
        # taken over (the request that carried it is done, and the replay memo hands it to one request): the previous
        # request's messages are this one's first
        table = prior.json
        chunks = list(prefix.chunks)
        if len(msgs) > k:
            chunks.append(b",".join(message_json(m, table, recorded, from_records) for m in msgs[k:]))
        if len(chunks) > _MAX_CHUNKS:
            chunks = [b",".join(chunks)]
    else:
        kept = prior.json if prior is not None else None
        table = {}  # (only this request's messages: one no longer among them is forgotten)
        chunks = [b",".join(message_json(m, table, recorded, from_records, kept) for m in msgs)] if msgs else []
    skeleton = orjson.dumps(anthropic.request_fields(req, orjson.Fragment(b"[" + _MARK + b"]")))
    at = skeleton.find(_MARK)
    if at < 0:  # (a parameter named like the messages replaced them: encoded as the whole request is)
        body = orjson.dumps(anthropic.encode_request(
            req, lambda m: orjson.Fragment(message_json(m, table, recorded, from_records))))
        return body, SplicePrior(table, Spliced([], []))
    parts = [skeleton[:at]]
    for c in chunks:
        parts += (c, b",")
    if chunks:
        parts.pop()
    parts.append(skeleton[at + 1:])
    return b"".join(parts), SplicePrior(table, Spliced(list(msgs), chunks))

"""A worker's memory of the last request it answered untouched in each conversation, so that the next
request of that conversation does not decode the same history again.

An agent's tool loop replays its whole history on every request: request N+1 is request N's messages,
then N's answer and the tool results. Decoding a 500-turn history into the canonical model costs a few
milliseconds per request, all of it spent on messages the previous request already decoded. When request
N went upstream untouched (repair and sanitize changed nothing) and its turn was recorded, this worker
keeps N's decoded messages with the client's JSON values they came from (``keep``); request N+1 reuses
them for its first n messages when those equal N's (``take``), and decodes only the messages after them.

Equal means equal as parsed JSON values, compared in C (a 2 MB history in about half a millisecond; an
orjson serialization to compare bytes would allocate the whole history again on every request). That is
JSON equality but for two things no stage depends on: key order, and a number the client retyped between
``1``, ``1.0`` and ``true`` (Python's ``==``). Thinking text and signatures are strings: equal exactly.

Nothing here is an authority, and nothing is skipped but decoding: the store load, repair and sanitize
run over the whole request as always, on messages identical to a fresh decode. A message that was
decoded further on the way (an assistant message whose blocks a stage built) is decoded again from the
client's JSON, and the ``verbatim`` mark repair sets is cleared. Messages are only kept when request N
changed none of them (every stage that edits a message in place also reports an action, and any action
but ``kept_verified`` marks the request changed), and an entry is taken by the one request that uses it,
so no two requests in flight share a message object.

Keys are per tenant, by the digest of the first message's JSON (a conversation's first message does not
change); another conversation with the same first message only takes the slot over. Bounded by the
request bytes the entries were decoded from (LRU); their decoded form takes a few times that in memory.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.protocols.canonical import Message

DecodeOne = Callable[[Any, int], Message]


@dataclass(slots=True)
class _Entry:
    raw: list[Any]            # the client's messages (parsed JSON)
    messages: list[Message]   # ... as decoded
    size: int                 # bytes of the request body they came from


@dataclass(slots=True)
class Ticket:
    """What one request's decode leaves for ``ReplayMemo.keep``: its messages as decoded."""

    key: tuple[str, bytes]
    raw: list[Any]
    messages: list[Message] = field(default_factory=list)
    reused: int = 0         # messages taken from the memo


def _pristine(m: Message) -> bool:
    """As a fresh decode leaves it: user messages are built at once; an assistant message's blocks are
    built on first use, after which it is decoded again rather than reused."""
    return m.role != "assistant" or m.raw_blocks is not None or m.content_was_string


class ReplayMemo:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def take(self, tenant: str, raw: list[Any], decode_one: DecodeOne) -> tuple[list[Message], Ticket | None]:
        """The decoded messages of ``raw`` (the client's message list, not yet validated: ``decode_one``
        validates and decodes one), reusing the entry whose JSON is the prefix of ``raw``'s. The ticket
        goes to ``keep`` once the request is known to be untouched and recorded; None: nothing to key by."""
        key = self._key(tenant, raw)
        if key is None:
            return [decode_one(m, i) for i, m in enumerate(raw)], None
        ticket = Ticket(key, raw)
        out: list[Message] = []
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size
            n = len(entry.raw)
            if n <= len(raw) and _equal(raw[:n], entry.raw):
                raw[:n] = entry.raw  # one copy of the history stays alive, the one the messages hold
                out = [m if _pristine(m) else decode_one(raw[i], i) for i, m in enumerate(entry.messages)]
                for m in out:
                    m.verbatim = False
                ticket.reused = n
        if ticket.reused:
            self.hits += 1
        else:
            self.misses += 1
        out += [decode_one(raw[i], i) for i in range(len(out), len(raw))]
        ticket.messages = list(out)
        return out, ticket

    def keep(self, ticket: Ticket, size: int) -> None:
        """Remember the ticket's messages for the next request of the conversation (``size``: the bytes of
        the request body). Call only when the request went upstream untouched and its turn was recorded."""
        if size > self.max_bytes:
            return
        old = self._entries.pop(ticket.key, None)
        if old is not None:
            self._bytes -= old.size
        self._entries[ticket.key] = _Entry(ticket.raw, ticket.messages, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    @staticmethod
    def _key(tenant: str, raw: list[Any]) -> tuple[str, bytes] | None:
        first = _json(raw[0]) if raw else None
        return (tenant, hashlib.sha256(first).digest()) if first is not None else None


def _equal(a: list[Any], b: list[Any]) -> bool:
    try:
        return a == b
    except RecursionError:  # nested deeper than Python compares: not reused (decoding judges the depth)
        return False


def _json(value: Any) -> bytes | None:
    """orjson's JSON of ``value``; None when it has none (nested past orjson's 255 levels: the decoder or
    the encoder reports that to the client)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return None

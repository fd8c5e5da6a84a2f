"""The continuation: what a conversation's previous request found, handed to the stages of its next one.

An agent's tool loop replays its whole history on every request. The replay memo (``ReplayMemo``, below) gives the
next request the previous one's messages back as the same objects; each stage may then start from what it
found of them last time, its prior, instead of looking at every message again:

    repair    ``repair_state.RepairPrior``  (``repair_prior``: ``repair_state.Repaired``, and the restorations it made)
    sanitize  ``sanitize.Sanitized``        (``sanitize_prior``)
    encode    ``splice.SplicePrior``        (``carry``: the messages' JSON as the previous body carried them, and each
                                             message's as last encoded)

Each stage is ``run(input, prior) -> (output, next_prior)`` and checks its own prior: that it covers the very
message objects that start its input, and whatever else it rests on (the conversation's turns for repair, the
rules' inputs for sanitize). What a stage finds of a message for one request lives in those priors and
outcomes, never on the message (``canonical.Message`` is data): repair's verbatim set goes to sanitize as an
argument, a restoration and a message's encoded JSON sit in tables by message object, with the object to check.

This module owns the rest: a request's part in it (``Continuation``, the one field on ``Exchange``); whether
the replay memo handed the messages a prior covers back as they were (none decoded again: a fact of the memo,
not of any stage), so the pipeline may hand the prior in; and what of the stages' next priors goes on the ticket
for the next request (``carry``). The pipeline only hands priors in and out. Correctness also rests on one rule
the stages keep: every change to a message in place is an action (``changes_in_place``).

What measured savings keep these continuations: ``BENCHMARKS.md`` (``bench/continuations.py``). Each can be
switched off for a benchmark with ``GATEWAY_CONTINUATIONS_OFF`` (``Settings.continuations_off``).

The replay memo: a worker's memory of the last request it relayed in each conversation, so that the next request of
that conversation neither parses nor decodes the same history again.

An agent's tool loop replays its whole history on every request: request N+1 is request N's messages, then
N's answer and the tool results, sent the same way. Parsing and decoding a 500-turn history (2 MB) costs
several milliseconds per request, all of it spent on bytes the previous request already carried. When
request N's messages went upstream as decoded, or with turns restored from their records (an IDE's mangled
replay), and its turn was recorded, this worker keeps N's body, its parsed values and decoded messages, and
where in the body N's last message ends (``keep``). Request N+1 is a replay of N when its body is N's body
with bytes inserted at exactly that point: the same bytes up to the end of N's last message, the same bytes
after it (the close of the ``messages`` array and every other field), and between them ``,`` and one or more
complete JSON values (the new messages). Those new values are all that is parsed and decoded; the rest is
N's (``take``).

Each client dialect decodes its own way, so an entry is continued only by a request of the same ``kind``
(the surface that decoded it), and that surface's ``Resume`` joins N's messages and the new values. Where
raw and decoded messages correspond one to one (Anthropic: ``one_to_one``), the new values are decoded on
their own. Where the decoder merges raw messages (OpenAI chat: consecutive ``tool`` messages make one user
message, system messages make the system value), the surface's resume first checks that the new values
decode on their own to exactly what decoding them after N's messages gives, and declines (None) otherwise:
the request then goes the full way.

Byte equality makes the reuse exact: the same bytes parse to the same values (types, key order and
escapes included), and the inserted values are parsed on their own, so a body that would not parse is
never taken for a replay (it goes the full way and gets its 400). Where N's last message ends is known
from the replay that produced N, or, for a body the worker has not seen continued, found once from the
end of the body and checked by parsing what follows it (``_find_split``).

Nothing here is an authority: the store load, repair and sanitize judge the whole request as always, on
messages identical to a fresh decode. Each may continue from what it found of request N's messages (``Carried``,
on the ticket): the load query from its reading of their bytes, repair while the conversation still holds the
turns it matched verbatim (``repair_state.Repaired``), sanitize while repair left them exactly as it did then
(``sanitize.Sanitized``). Messages are only
kept when request N changed none of them in place (every stage that edits a message also reports an action,
and any action but ``kept_verified``, ``params_fixed`` or ``restored`` may be an edit in place:
``continuation.changes_in_place``). A restored turn takes the client's message's place as a new message
(``repair``; the same one again on the next request, while the client's JSON and the record are the ones it
was restored from: ``repair_state.RepairPrior.restorations``), and stages before repair look at an undecoded
message's blocks without decoding it (``Message.peek_content``), so an IDE's mangled message stays as decoded and
the next request, which replays the same bytes, gets it as it is, to be restored again. A message no longer as
decoded is decoded again (or, for a surface that cannot decode one message alone, the request goes the full way): an
assistant message whose blocks a stage built in place, or any message whose content list a stage replaced
(without an action: dropping a client's per-part signature, a tool chain rebuilt unchanged); the list
decoding made is remembered with the ticket (a message no stage of the kept request looked at is not checked
again: ``keep``). An entry is
taken by the one request that uses it, so no two requests in flight share a message object.

Entries are per tenant and surface (a request is only ever compared with its own tenant's, decoded the
same way), bounded by the memory they hold (LRU; ``entry_cost``: measured, not the request's bytes); an entry
over half the bound is not kept, so a body of 100,000 tiny messages never is.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from gateway.actions import ActionKind
from gateway.continuation.splice import SplicePrior
from gateway.dialects.canonical import Message
from gateway.pipeline.identify import Known, PathHash
from gateway.pipeline.repair.core import RepairPrior, RepairResult, put_restored
from gateway.pipeline.sanitize.core import Sanitized, SanitizeResult
from state.coherence import Head, held, serves
from state.store import LoadResult

if TYPE_CHECKING:
    from gateway.continuation.splice import SplicePrior
    from gateway.pipeline.repair.core import Repaired, Restoration
    from gateway.pipeline.sanitize.core import Sanitized


# Actions after which the replay memo may keep the request and ``encode`` may splice the messages' kept JSON:
# each leaves every message as decoded, or gives it a new content list or puts a new message in its place,
# which both notice by identity. A thinking block kept as it is; a parameter fixed (the request's own params
# and thinking dicts, built by its decoder, never the parsed body's values); a turn restored from its record
# (repair puts a new message, the record's, in the client's message's place, and touches no other message); another
# model's thinking passed back as it is (``model_switch``: counted, nothing changed).
MESSAGES_KEPT = frozenset({ActionKind.KEPT_VERIFIED, ActionKind.PARAMS_FIXED, ActionKind.RESTORED,
                           ActionKind.MODEL_BINDING_MISMATCH})


@dataclass(slots=True)
class Continuation:
    """One request's part in the continuation (``Exchange.continuation``)."""

    ticket: Ticket | None = None       # the replay memo's: this request's messages, kept for the next request
    changed: bool = False              # repair/sanitize changed the request
    in_place: bool = True              # ... and may have changed a message in place (nothing kept, no splice)
    splice: SplicePrior | None = None  # what ``encode`` starts from (``carry``)
    restored: Mapping[int, Message] = field(default_factory=dict)  # repair's restorations as the record's JSON
    match: Match | None = None         # the memo's match of the body, when the memory estimate asked for it

    @property
    def from_records(self) -> RestoredIds:
        """The ids of the messages repair restored as their record's JSON (``splice.run``)."""
        return RestoredIds(self.restored)


class RestoredIds(Collection[int]):
    """The ids of some messages, gathered on first use (a long replay restores hundreds; ``splice`` asks of the
    few messages it encodes)."""

    __slots__ = ("_ids", "_restored")

    def __init__(self, restored: Mapping[int, Message]) -> None:
        self._restored = restored
        self._ids: frozenset[int] | None = None

    def _all(self) -> frozenset[int]:
        if self._ids is None:
            self._ids = frozenset(map(id, self._restored.values()))
        return self._ids

    def __contains__(self, x: object) -> bool:
        return bool(self._restored) and x in self._all()

    def __iter__(self) -> Iterator[int]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._restored)


def changes_in_place(kinds: Collection[ActionKind]) -> bool:
    """Whether a request with these actions may have had a message changed in place (every change is an
    action): then nothing of it is kept for the next request."""
    return not MESSAGES_KEPT.issuperset(kinds)


def admit(ticket: Ticket | None, result: LoadResult | None) -> None:
    """The coherence rule (``state.coherence``) for what the previous request carried: it serves this request
    only when this request's load read the conversation at the head the previous request's record left, else
    every stage starts afresh (``Carried.at``). Call before any prior is handed in."""
    if ticket is None:
        return
    held = ticket.carried.head
    conv = result.conversations.get(held.scid) if held is not None and result is not None else None
    ticket.carried = ticket.carried.at(conv.head if conv is not None else None)


def stamp(ticket: Ticket, head: Head | None) -> None:
    """The head the conversation has once this worker recorded the ticket's answer: what the ticket carries
    serves the next request only at that head (``admit``)."""
    ticket.carried = replace(ticket.carried, head=head)


def repair_prior(ticket: Ticket | None, off: Collection[str] = ()) -> RepairPrior | None:
    """What repair may start from: the previous request's restorations, and its ``Repaired`` when the memo gave
    back every message it covers as it was."""
    if ticket is None:
        return None
    carried = ticket.carried
    repaired = carried.repaired
    if repaired is not None and ("carried_repair" in off or not _taken_whole(ticket, repaired.count)):
        repaired = None
    return RepairPrior(repaired, carried.restorations)


def sanitize_prior(ticket: Ticket | None, off: Collection[str] = ()) -> Sanitized | None:
    """The previous request's ``Sanitized`` when the memo gave back every message it covers as it was."""
    if ticket is None or "carried_sanitize" in off:
        return None
    prior = ticket.carried.sanitized
    return prior if prior is not None and _taken_whole(ticket, prior.count) else None


def carry(ticket: Ticket, msgs: list[Message], fixed: RepairResult, repaired: RepairPrior, cleaned: SanitizeResult,
          sanitized: Sanitized | None) -> SplicePrior | None:
    """After repair and sanitize changed nothing in place: what the next request may start from goes on the
    ticket (``Ticket.carried``: ``repaired`` and ``sanitized`` are the stages' next priors); returns what
    ``encode`` starts from: the previous body's encoded messages when they go upstream as they are (``splice.run``
    checks they are still the first messages), and each message's JSON."""
    ticket.resumed, ticket.continued = fixed.resumed, cleaned.continued
    # repair looked at the ticket's messages (no rebuilt history), and sanitize at them with repair's
    # restorations in their places (the messages a resumed repair puts there again)
    same = _same_objects(msgs, _restored_in(ticket.messages, fixed.restored))
    previous = ticket.carried.encoded
    json_only = replace(previous, prefix=None) if previous is not None else None
    ticket.carried = Carried(None, repaired.repaired if same else None,
                             sanitized if same else None, json_only, repaired.restorations)
    if sanitized is not None and previous is not None and previous.prefix is not None and \
            cleaned.continued == len(previous.prefix.messages):
        # sanitize continued over exactly the messages the previous request's body carried, and no stage
        # changed anything
        return previous
    return json_only


def _taken_whole(ticket: Ticket, count: int) -> bool:
    """Whether the replay memo gave back the ``count`` messages a prior covers, every one as it was (none decoded
    again); the stage checks they are still the first of its input."""
    return ticket.reused == count and not ticket.redecoded


def _same_objects(a: list[Message], b: list[Message]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _restored_in(msgs: list[Message], restored: dict[int, Message]) -> list[Message]:
    """``msgs`` with each restored message in its place."""
    if not restored:
        return msgs
    if next(reversed(restored)) >= len(msgs):  # (in index order) a rebuilt history's: not these messages
        return []
    out = list(msgs)
    put_restored(out, restored)
    return out


DecodeOne = Callable[[Any, int], Message]
# (the kept request's parsed body, its messages: None where one is no longer as decoded, the new raw
# messages) -> all the messages as decoding the whole body gives them, the kept ones first and as they are
# (``take`` reuses what it knows of them), or None: decode it the full way
Resume = Callable[[dict[str, Any], list[Message | None], list[Any]], list[Message] | None]
_WS = b" \t\r\n"
_CANDIDATES = 8          # occurrences of the next field's name tried when finding the end of the messages
_MAX_NESTING = 200       # inserted bytes with more brackets than this go the full way (parser depth limits)
Scope = tuple[str, str]  # (tenant, kind): a request is only ever compared with its own tenant's and surface's
REFUSE_FRACTION = 2      # an entry holding more than half the memo's bound is not kept
# What an entry holds: the body, its messages' JSON kept on them and the chunks spliced from it (3x its
# bytes), and the parsed values (``held``, measured) with the decoded messages and blocks built on them (2x:
# an allowance of one object per parsed one; the factors are not yet fitted against tracemalloc).
BODY_FACTOR = 3
PARSED_FACTOR = 2


def entry_cost(body: bytes, parsed_held: int) -> int:
    return BODY_FACTOR * len(body) + PARSED_FACTOR * parsed_held


@dataclass(frozen=True, slots=True)
class Carried:
    """What the stages found of a request's messages, for the conversation's next request, which starts with
    them; each covers the messages it counts. Repair's and sanitize's findings are of the message objects as
    those stages left them, so only a request that takes every one of them back as it was (none decoded again)
    may start from them, and only where each stage checks the rest holds (``repair_state.Repaired``,
    ``sanitize.Sanitized``). All of it rests on the conversation as it was: it serves only while the
    conversation's head in Redis is ``head``, the one this worker's record of the request's answer left
    (``state.coherence``; ``at``)."""

    head: Head | None = None  # the conversation's head once the request's answer was recorded
    repaired: Repaired | None = None
    sanitized: Sanitized | None = None
    # the messages' JSON as the request's body carried them, and each message's (``gateway.continuation.splice``)
    encoded: SplicePrior | None = None
    # the client messages repair restored, by id (``repair_state.RepairPrior.restorations``)
    restorations: Mapping[int, Restoration] = field(default_factory=dict)

    def taken(self, redecoded: int) -> Carried:
        """What a replay that decoded ``redecoded`` of the messages again may start from: what is checked per
        message object (a restoration, a message's JSON) stays."""
        if not redecoded:
            return self
        encoded = replace(self.encoded, prefix=None) if self.encoded is not None else None
        return Carried(self.head, encoded=encoded, restorations=self.restorations)

    def at(self, now: Head | None) -> Carried:
        """What may serve a request whose load read the conversation at ``now`` (``state.coherence.serves``):
        all of it at the head it was stamped with, else only each message's own JSON (a function of the message
        object, which ``splice`` checks): another replica recorded in between, or the store was not read."""
        if serves(self.head, now):
            return self
        encoded = replace(self.encoded, prefix=None) if self.encoded is not None else None
        return Carried(encoded=encoded)


@dataclass(slots=True)
class Ticket:
    """One request's body, its parsed values and its messages as decoded, for ``ReplayMemo.keep``."""

    tenant: str
    kind: str                  # the surface that decoded the messages
    body: bytes
    parsed: dict[str, Any]
    messages: list[Message]
    as_decoded: list[list[Any]]  # each message's content list as decoding left it (lazy: the client JSON)
    split: int | None = None   # where the last message ends in ``body`` (None: not known yet)
    reused: int = 0            # messages taken from the memo
    base: PathHash | None = None  # the path hash after the reused messages
    path: PathHash | None = None  # ... after all of them, once ``path_hash`` computed it
    redecoded: int = 0         # of the messages taken, those decoded again (no longer as decoded)
    # what the stages found of the messages: for this request, of the kept ones (``take``); for the next, of
    # all of them (the pipeline sets it)
    carried: Carried = field(default_factory=lambda: Carried())
    resumed: int = 0           # messages repair did not look at again (``repair_state.Repaired``)
    continued: int = 0         # messages sanitize did not look at again (its seed's, when the pipeline used it)
    unchecked: int = 0         # of the messages taken, those no stage had looked at (``keep``): taken unchecked
    held: int | None = None    # what the parsed messages hold (``state.coherence.held``), when ``take`` knew it
    objects: int | None = None  # the body's count of ``{``, when the memory estimate counted it (``objects``)

    @property
    def known(self) -> Known | None:
        """For ``paths.path_fingerprint``: the hash of the reused prefix."""
        return (self.reused, self.base) if self.base is not None else None

    def path_hash(self) -> PathHash:
        """The path hash of the messages as decoded (only the new ones are hashed after a replay)."""
        if self.path is None:
            start = self.base.copy() if self.base is not None else PathHash()
            self.path = start.update(self.messages[self.reused if self.base is not None else 0:])
        return self.path


@dataclass(slots=True)
class _Entry:
    body: bytes
    parsed: dict[str, Any]
    messages: list[Message]
    as_decoded: list[list[Any]]
    split: int
    path: PathHash | None
    carried: Carried
    untouched: int             # its first messages, which no stage changed (see ``keep``)
    held: int                  # what its parsed messages hold (``state.coherence.held``)
    cost: int                  # what it holds (``entry_cost``)
    objects: int | None        # its body's count of ``{``, when known
    id: int = field(default_factory=itertools.count().__next__)


@dataclass(frozen=True, slots=True)
class Match:
    """A body's match in the memo (``ReplayMemo.match``): the kept entry it replays (None: none)."""

    scope: Scope
    entry: _Entry | None

    def kept(self, entries: Mapping[int, _Entry]) -> bool:
        """Whether the answer still holds: no entry, or the entry still kept (``entries``: the scope's)."""
        return self.entry is None or entries.get(self.entry.id) is self.entry

    def objects(self, body: bytes) -> int:
        """``body``'s count of ``{`` (the memory estimate's, ``gateway.surfaces.common``): when it replays a body
        kept with its count, that count and a count of only what the replay inserted (the kept body's bytes are
        ``body``'s start and end)."""
        entry = self.entry
        if entry is None or entry.objects is None:
            return body.count(b"{")
        return entry.objects + body.count(b"{", entry.split, len(body) - (len(entry.body) - entry.split))


def _as_decoded(messages: list[Message]) -> list[list[Any]]:
    """What ``_pristine`` compares with later: each message's content list, or a lazy one's client JSON."""
    return [m.source for m in messages]


def one_to_one(decode_one: DecodeOne) -> Resume:
    """The resume of a dialect whose raw messages decode one each (Anthropic): a message no longer as
    decoded, and each new one, decoded on its own (``decode_one(raw, index)``)."""
    def resume(parsed: dict[str, Any], kept: list[Message | None], tail: list[Any]) -> list[Message]:
        raw: list[Any] = parsed["messages"]
        n = len(raw)
        new = [decode_one(v, n + j) for j, v in enumerate(tail)]
        if all(map(operator.is_not, kept, itertools.repeat(None))):  # all as they were (the common case)
            return kept + new  # type: ignore[return-value]
        return [m if m is not None else decode_one(raw[i], i) for i, m in enumerate(kept)] + new
    return resume


class ReplayMemo:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru: OrderedDict[int, tuple[Scope, _Entry]] = OrderedDict()
        self._by_scope: dict[Scope, dict[int, _Entry]] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        # the maps change under it: a big request's decode runs in a thread (``pipeline.off_loop``)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def take(self, tenant: str, kind: str, body: bytes, resume: Resume,
             found: Match | None = None) -> tuple[dict[str, Any], list[Message], Ticket] | None:
        """``body`` as a replay of a request of ``tenant`` kept by surface ``kind``: its parsed values, its
        messages (the kept ones and the new ones, as ``resume`` joined them) and the ticket for ``keep``;
        None when it is not one (the caller parses and decodes it, and makes the ticket with ``ticket``).
        ``found``: ``match``'s answer for this body, if it was asked."""
        scope = (tenant, kind)
        with self._lock:
            if found is not None and found.scope == scope and found.kept(self._by_scope.get(scope, {})):
                entry = found.entry  # (the bytes were compared by ``match``; the entry is still kept)
            else:
                entry = self._match(scope, body)
            if entry is not None:
                self._drop(scope, entry)  # taken: this request's alone
        if entry is None:
            self.misses += 1
            return None
        rest = len(entry.body) - entry.split
        inserted = body[entry.split:len(body) - rest].strip(_WS)
        tail = _values_after_comma(inserted) if inserted else []
        if tail is None:
            self.misses += 1
            return None
        # the messages no stage of the kept request looked at are as it took them; the others may have changed
        trusted = entry.untouched
        kept: list[Message | None] = list(entry.messages[:trusted])
        redecoded = 0
        for m, c in zip(entry.messages[trusted:], entry.as_decoded[trusted:], strict=True):
            if m.holds(c):
                kept.append(m)
            else:
                kept.append(None)
                redecoded += 1
        messages = resume(entry.parsed, kept, tail)
        if messages is None:
            self.misses += 1
            return None
        parsed = {**entry.parsed, "messages": entry.parsed["messages"] + tail}
        self.hits += 1
        # a kept message holds the list it was decoded with: only the others' are read again
        as_decoded = entry.as_decoded + _as_decoded(messages[len(kept):])
        if redecoded:
            as_decoded[:len(kept)] = _as_decoded(messages[:len(kept)])
        return parsed, messages, Ticket(tenant, kind, body, parsed, list(messages), as_decoded,
                                        len(body) - rest, len(kept), entry.path, redecoded=redecoded,
                                        carried=entry.carried.taken(redecoded), unchecked=trusted,
                                        held=entry.held + held(tail))

    def ticket(self, tenant: str, kind: str, body: bytes, parsed: dict[str, Any],
               messages: list[Message]) -> Ticket:
        """The ticket of a request parsed and decoded the full way (``messages``: as decoded)."""
        return Ticket(tenant, kind, body, parsed, list(messages), _as_decoded(messages))

    def keep(self, ticket: Ticket) -> None:
        """Remember the ticket's request for the next request of its conversation. Call only when the
        request's messages are as ``continuation.changes_in_place`` allows and its turn was recorded."""
        limit = self.max_bytes // REFUSE_FRACTION
        if BODY_FACTOR * len(ticket.body) > limit or not ticket.messages:
            return
        room = (limit - BODY_FACTOR * len(ticket.body)) // PARSED_FACTOR  # what the parsed messages may hold
        parsed_held = ticket.held if ticket.held is not None else held(ticket.parsed.get("messages"), over=room)
        cost = entry_cost(ticket.body, parsed_held)
        if cost > limit:
            return
        split = ticket.split if ticket.split is not None else _find_split(ticket.body, ticket.parsed)
        if split is None:
            return
        # When sanitize continued from its seed and its outcome may be continued (``carried``), its per-message
        # rules, the only stage that may change a message without an action, left the seed's messages alone,
        # and the other stages only read them (repair matched each verbatim, which it only marks): as ``take``
        # checked them, or took them unchecked the same way.
        untouched = ticket.continued if ticket.carried.sanitized is not None else 0
        entry = _Entry(ticket.body, ticket.parsed, ticket.messages, ticket.as_decoded, split, ticket.path,
                       ticket.carried, untouched, parsed_held, cost, ticket.objects)
        scope = (ticket.tenant, ticket.kind)
        with self._lock:
            self._lru[entry.id] = (scope, entry)
            self._by_scope.setdefault(scope, {})[entry.id] = entry
            self._bytes += entry.cost
            while self._bytes > self.max_bytes:
                old_scope, old = next(iter(self._lru.values()))
                self._drop(old_scope, old)

    def match(self, tenant: str, kind: str, body: bytes) -> Match:
        """The kept body ``body`` replays, if any (``take``'s match), for the memory estimate's count and then
        ``take``."""
        scope = (tenant, kind)
        with self._lock:
            return Match(scope, self._match(scope, body))

    def _match(self, scope: Scope, body: bytes) -> _Entry | None:
        """The scope's entry whose body, cut where its last message ends, is ``body``'s start and end
        (the longest, when a conversation's earlier request is still kept)."""
        best: _Entry | None = None
        for entry in self._by_scope.get(scope, {}).values():
            if len(body) < len(entry.body) or (best is not None and entry.split <= best.split):
                continue
            view = memoryview(entry.body)
            if body.startswith(view[:entry.split]) and body.endswith(view[entry.split:]):
                best = entry
        return best

    def _drop(self, scope: Scope, entry: _Entry) -> None:
        del self._lru[entry.id]
        own = self._by_scope[scope]
        del own[entry.id]
        if not own:
            del self._by_scope[scope]
        self._bytes -= entry.cost


def _values_after_comma(inserted: bytes) -> list[Any] | None:
    """``, v1, ..., vk`` (k >= 1, any whitespace) -> ``[v1, ..., vk]``; None for anything else."""
    if inserted[:1] != b"," or inserted.count(b"[") + inserted.count(b"{") > _MAX_NESTING:
        return None
    try:
        values = orjson.loads(b"[" + inserted[1:] + b"]")
    except orjson.JSONDecodeError:
        return None
    return values if values else None  # nothing after the comma: not JSON


def _find_split(body: bytes, parsed: dict[str, Any]) -> int | None:
    """Where the last message ends in ``body`` (the index just past it), which parsed to ``parsed``.

    The ``]`` that closes ``messages`` is followed by the fields after it in the document (dict order is
    document order) and nothing else: when ``messages`` is the last field, it is the last ``]`` before the
    final ``}``; otherwise it is a ``]`` followed by ``,`` and the next field's name, where what follows
    the comma parses, as the rest of an object, to exactly those fields and their values. That also rules
    out a ``]`` inside a message or inside a later field's value (what follows would not parse so)."""
    keys = list(parsed)
    after = keys[keys.index("messages") + 1:]
    if not after:
        end = _last_non_ws(body, len(body))
        close = _last_non_ws(body, end) if end >= 0 and body[end] == ord("}") else -1
        return _last_non_ws(body, close) + 1 if close > 0 and body[close] == ord("]") else None
    name = orjson.dumps(after[0])
    pos = len(body)
    for _ in range(_CANDIDATES):
        pos = body.rfind(name, 0, pos)
        if pos < 0:
            return None
        comma = _last_non_ws(body, pos)
        close = _last_non_ws(body, comma)
        if comma < 0 or body[comma] != ord(",") or close < 0 or body[close] != ord("]"):
            continue
        try:
            rest = orjson.loads(b'{"":0' + body[comma:])
        except orjson.JSONDecodeError:
            continue
        try:
            same = isinstance(rest, dict) and list(rest)[1:] == after and all(rest[k] == parsed[k] for k in after)
        except RecursionError:  # a field nested deeper than Python compares: this body is not kept
            return None
        if same:
            return _last_non_ws(body, close) + 1
    return None


def _last_non_ws(body: bytes, end: int) -> int:
    """The index of the last byte before ``end`` that is not JSON whitespace (-1: none)."""
    i = end - 1
    while i >= 0 and body[i] in _WS:
        i -= 1
    return i

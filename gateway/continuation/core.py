"""The continuation: what a conversation's previous request found, handed to the stages of its next one.

An agent's tool loop replays its whole history on every request. The replay memo (``replay_memo``) gives the
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
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace

from gateway.actions import ActionKind
from gateway.continuation.replay_memo import Carried, Ticket
from gateway.continuation.splice import SplicePrior
from gateway.dialects.canonical import Message
from gateway.pipeline.repair.core import RepairPrior, RepairResult, put_restored
from gateway.pipeline.sanitize.core import Sanitized, SanitizeResult
from state.coherence import Head
from state.store import LoadResult

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

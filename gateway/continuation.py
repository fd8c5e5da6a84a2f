"""The continuation: what a conversation's previous request found, handed to the stages of its next one.

An agent's tool loop replays its whole history on every request. The replay memo (``replay_memo``) gives the
next request the previous one's messages back as the same objects; each stage may then start from what it
found of them last time, its prior, instead of looking at every message again:

    repair    ``repair.Repaired``     (``repair_prior``)
    sanitize  ``sanitize.Sanitized``  (``sanitize_prior``)
    encode    ``splice.Spliced``      (``carry``: the messages' JSON as the previous body carried them)

This module is the only place that decides whether a prior holds for a request: the pipeline asks it for each
stage's prior, hands it to the stage (a stage given None looks at everything, as it does without a memo), and
hands the stages' outcomes back (``carry``), which become the next request's priors. Every prior is judged on
identity: a prior covers the very message objects it looked at, and holds only while the memo gave each of
them back as it was (none decoded again) and they are still the first messages. Correctness also rests on one
rule the stages keep: every change to a message in place is an action (``changes_in_place``).

What measured savings keep these continuations: ``BENCHMARKS.md`` (``bench/continuations.py``). Each can be
switched off for a benchmark with ``GATEWAY_CONTINUATIONS_OFF`` (``Settings.continuations_off``).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Collection

from gateway.actions import ActionKind
from gateway.protocols.canonical import Message
from gateway.repair import Repaired, RepairResult, put_restored
from gateway.replay_memo import Carried, Ticket
from gateway.sanitize import Sanitized, SanitizeResult
from gateway.splice import Spliced

# Actions after which the replay memo may keep the request and ``encode`` may splice the messages' kept JSON:
# each leaves every message as decoded, or gives it a new content list or puts a new message in its place,
# which both notice by identity. A thinking block kept as it is; a parameter fixed (the request's own params
# and thinking dicts, built by its decoder, never the parsed body's values); a turn restored from its record
# (repair puts a new message, the record's, in the client's message's place, and touches no other message).
MESSAGES_KEPT = frozenset({ActionKind.KEPT_VERIFIED, ActionKind.PARAMS_FIXED, ActionKind.RESTORED})


def changes_in_place(kinds: Collection[ActionKind]) -> bool:
    """Whether a request with these actions may have had a message changed in place (every change is an
    action): then nothing of it is kept for the next request."""
    return not MESSAGES_KEPT.issuperset(kinds)


def repair_prior(ticket: Ticket | None, msgs: list[Message], off: Collection[str] = ()) -> Repaired | None:
    """The previous request's ``Repaired`` when ``msgs`` start with the very messages it covers."""
    if ticket is None or "carried_repair" in off:
        return None
    prior = ticket.carried.repaired
    return prior if prior is not None and _holds(ticket, msgs, prior.count, ticket.messages) else None


def sanitize_prior(ticket: Ticket | None, msgs: list[Message], fixed: RepairResult,
                   off: Collection[str] = ()) -> Sanitized | None:
    """The previous request's ``Sanitized`` when it holds for ``msgs`` as repair left them (the messages it
    looked at, each in its place: the client's as the memo gave them back, a restored turn's as repair put it
    there again; not a rebuilt history) and repair found each assistant message among them a recorded turn as
    relayed again, as it did then."""
    if ticket is None or "carried_sanitize" in off:
        return None
    prior = ticket.carried.sanitized
    if prior is None or not _holds(ticket, msgs, prior.count, prior.messages) or \
            bisect.bisect_left(fixed.verbatim, prior.count) != prior.assistants:
        return None
    return prior


def carry(ticket: Ticket, msgs: list[Message], fixed: RepairResult, cleaned: SanitizeResult) -> Spliced | None:
    """After repair and sanitize changed nothing in place: what the next request may start from goes on the
    ticket (``Ticket.carried``); returns the previous body's encoded messages when they go upstream as they are
    (``splice.encode_request`` checks they are still the first messages)."""
    ticket.resumed, ticket.continued = fixed.resumed, cleaned.continued
    # repair looked at the ticket's messages (no rebuilt history), and sanitize at them with repair's
    # restorations in their places (the messages a resumed repair puts there again)
    same = _same_objects(msgs, _restored_in(ticket.messages, fixed.restored))
    previous = ticket.carried
    ticket.carried = Carried(previous.replayed, fixed.repaired if same else None, cleaned.sanitized if same else None)
    if cleaned.sanitized is not None and previous.encoded is not None and \
            cleaned.continued == len(previous.encoded.messages):
        # sanitize continued over exactly the messages the previous request's body carried, and no stage
        # changed anything
        return previous.encoded
    return None


def _holds(ticket: Ticket, msgs: list[Message], count: int, seen: list[Message]) -> bool:
    """Whether ``msgs`` start with the ``count`` messages a prior covers, ``seen`` (the objects that stage
    looked at): the replay memo gave back every one of them as it was, and the first of ``msgs`` are still
    those objects (a history rebuilt from the records is not)."""
    if ticket.reused != count or ticket.redecoded:
        return False
    return len(msgs) >= count and len(seen) >= count and _same_objects(msgs[:count], seen[:count])


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

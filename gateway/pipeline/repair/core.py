"""Repair: restore replayed assistant history to its recorded, authoritative form.

Pure: ``run(messages, records, pinned, prior) -> (RepairResult, RepairPrior)`` (``repair``: without a prior).
The records are what the load stage fetched in one store round trip (``gateway.pipeline.repair.recorded``:
``Records``). Each
replayed assistant message is matched to a turn of the identified conversation only (never to another
conversation's): by its replay digest, else at its place on that conversation's path, on evidence nothing
contradicts (``gateway.pipeline.repair.matching`` states the rules); where the evidence singles out no turn the
message stays the
client's and its thinking is unverified (sanitize degrades it): never a guess.

A matched message is re-emitted as recorded: thinking and redacted_thinking blocks
with their exact bytes, signatures and order first, then text and tool_use blocks
with the original ids and inputs (and any provider data: per-part signatures, thought
blocks, message-level reasoning fields); tool ids the client regenerated are mapped back
in the tool_results that follow. Unmatched thinking blocks are checked against the
strict exact-text index (Layer 2): a signature is attached only to the exact text it
was issued for, never to other text (a signature is bound to its thinking's exact bytes:
https://platform.claude.com/docs/en/build-with-claude/extended-thinking, docs/upstream-rules.md).

The client's user messages define the path: repair never removes turns. Where the client changed a recorded turn's
message boundaries (dropped it but kept its tool results, merged consecutive turns, split one) and the tool ids name
the turns in the identified conversation, with their calls nowhere else in the request, each goes back whole, as
recorded (``gateway.pipeline.repair.reshape``: ``turn_reinstated``, ``turns_separated``, ``turn_joined``); any other
orphan result
is sanitize's to degrade.

What a request found is carried to the conversation's next request (``gateway.pipeline.repair.repair_state``), which
starts from it
where it still holds.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Mapping

from gateway.actions import Action, ActionKind
from gateway.dialects.canonical import THINKING_TYPES, Block, Message, ThinkingBlock, ToolResultBlock, ToolUseBlock
from gateway.pipeline.repair.matching import Taken, place
from gateway.pipeline.repair.recorded import RecordedTurn, Records
from gateway.pipeline.repair.repair_state import (
    Repaired,
    RepairPrior,
    RepairResult,
    Restoration,
    covers,
    restoration,
    resume,
    resume_cut,
)
from gateway.pipeline.repair.reshape import reshape
from state.hashing import exact_hash


def rebuild_history(recs: Records, msgs: list[Message],
                    upto: int | None = None) -> tuple[list[Message], dict[int, RecordedTurn]] | None:
    """Server-side thread state: the client named a known conversation and replayed no history (``upto``: the
    position of the turn it continues from, a ``previous_response_id``'s; the turns after it are left out, so the
    answer branches there).

    Returns the recorded conversation (each turn's prompt messages, then the turn) followed by the
    client's messages, plus which message index holds which turn; None when there is nothing to
    rebuild, and when the client's first message is the conversation's first one: it replays the
    conversation from its start (a retry of the first request), and the path is the client's; and None when a turn
    was stored without its prompt.
    """
    turns = {p: t for p, t in recs.conversation.items() if upto is None or p <= upto}
    if not turns or any(m.role == "assistant" for m in msgs):
        return None
    if any(not turn.prompt for turn in turns.values()):
        return None  # a turn stored without its prompt (too large: ``StorageLimits``) cannot be replayed whole
    first = turns[min(turns)].prompt
    if msgs and first and (first[0].role, first[0].content) == (msgs[0].role, msgs[0].content):
        return None
    out: list[Message] = []
    pinned: dict[int, RecordedTurn] = {}
    for pos in sorted(turns):
        turn = turns[pos]
        out += [Message(m.role, list(m.content), m.content_was_string, dict(m.extra)) for m in turn.prompt]
        pinned[len(out)] = turn
        out.append(Message("assistant", list(turn.content), provider=turn.provider))
    return out + msgs, pinned


def repair(msgs: list[Message], recs: Records, pinned: Mapping[int, RecordedTurn] | None = None,
           resumed: Repaired | None = None) -> RepairResult:
    """``run`` with no restorations carried over: ``pinned`` fixes the turn of some message indexes (a history
    rebuilt from the records); ``resumed``: the previous request's ``Repaired``."""
    return run(msgs, recs, pinned, RepairPrior(resumed))[0]


def run(msgs: list[Message], recs: Records, pinned: Mapping[int, RecordedTurn] | None,
        prior: RepairPrior | None) -> tuple[RepairResult, RepairPrior]:
    """Repair ``msgs`` in place (``pinned``: see ``repair``), from ``prior`` where it holds: its ``Repaired`` while
    ``msgs`` start with the very messages it covers (``resume_cut`` checks the rest), and a client message
    restored on that request restored again by the same message while it is still what it was. Returns the
    outcome and what the next request may start from."""
    walk = _Walk(msgs, recs, pinned, prior)
    for i in range(walk.start, len(msgs)):
        walk.step(i)
    return walk.finish()


class _Walk:
    """One repair pass over a request's messages, in order: what it found so far (``res``) and what the next
    message's rules read of the messages before it (the previous turn, the tool ids it mapped)."""

    def __init__(self, msgs: list[Message], recs: Records, pinned: Mapping[int, RecordedTurn] | None,
                 prior: RepairPrior | None) -> None:
        resumed = prior.repaired if prior is not None else None
        if resumed is not None and not covers(resumed, msgs):
            resumed = None
        self.msgs, self.recs, self.resumed = msgs, recs, resumed
        # recorded turns the client dropped, put back before their results (pinned in their places)
        self.reshaped = reshape(msgs, recs.conversation, resumed.count if resumed is not None else 0) \
            if not pinned else {}
        self.reinstated = {i: turn for i, (turn, _) in self.reshaped.items()}
        self.pinned = self.reinstated if self.reinstated else pinned
        self.restorations = prior.restorations if prior is not None else {}
        self.made: dict[int, Restoration] = {}  # this request's new restorations
        self.client_msgs = list(msgs)  # (``Repaired.messages``: as the client's, before any restoration)
        self.res = res = RepairResult()
        self.id_map: dict[str, str] = {}  # the previous assistant message's client tool ids -> its turn's
        self.mapped = False  # some tool id was mapped
        self.keys: dict[str, int] = {}  # the lookup keys of the messages matched by them (``Repaired.keys``)
        self.uncarried = False  # a turn matched by its lookups that the next request must match afresh
        self.prev: RecordedTurn | None = None  # the previous assistant message's turn (None: it had none)
        self.prev_i = -1  # ... and that message's index
        self.taken = Taken(res)
        self.start = self.assistants = 0
        cut = resume_cut(resumed, msgs, recs, self.pinned) if resumed is not None else 0
        if resumed is not None and cut:
            self.prev = resume(resumed, cut, msgs, res)
            self.prev_i = res.verbatim[-1] if res.verbatim else -1
            # (a key of a message from ``cut`` on stays: it is that message's again if it is matched so again, and
            # an earlier cut on a later request otherwise, which only makes repair look at more)
            self.keys.update(resumed.keys)
            self.start = res.resumed = cut
            self.assistants = len(res.matched)
        if self.reinstated:
            self.taken.reserve(self.reinstated.values())  # no earlier message takes a turn put back after it

    def step(self, i: int) -> None:
        """Message ``i``: a user message's tool results take the ids mapped before it; an assistant message is
        matched to its recorded turn (replay digest, pinned place, or ``place``) and restored."""
        m, res = self.msgs[i], self.res
        if m.role == "user":
            _map_tool_results(m, i, self.id_map, res)
            return
        if m.role != "assistant":
            return
        self.assistants += 1
        self.id_map = {}  # tool results answer the assistant message right before them
        turn = self.pinned.get(i) if self.pinned else None
        if turn is None and m.replay_digest and (turn := self.recs.conversation.find_digest(m.replay_digest)):
            # replayed verbatim: its blocks are the recorded ones, nothing to decode or restore; all of
            # its thinking is verified (sanitize is given ``verbatim``, whether or not it decodes it)
            self.prev, self.prev_i = turn, i
            res.matched[i] = turn
            self.taken.add(turn)
            res.verbatim.append(i)
            return
        if turn is None:
            turn = place(m, self.msgs, i, self.recs.conversation, self.prev, self.prev_i, self.taken,
                         self.restorations)
        self.prev, self.prev_i = turn, i
        if turn is None:
            self.taken.kept(m)
            _verify_by_exact_text(m, i, self.recs, res)
            return
        res.matched[i] = turn
        self.taken.add(turn)
        self._restore(i, m, turn)

    def _restore(self, i: int, client: Message, turn: RecordedTurn) -> None:
        """Message ``i`` (``client``) matched ``turn``: put back as recorded where it differs; its thinking is
        verified."""
        res, m = self.res, client
        again = restoration(client, turn, self.restorations)
        if again is not None:
            # the same client JSON restored from the same record on this conversation's previous request (as
            # the record's JSON: the recorded turn as relayed)
            _learn_id_map(client, turn.content, self.id_map)
            m = self.msgs[i] = again.message
            verbatim = True
            res.changed = True
            res.actions.append(Action(ActionKind.RESTORED, i))
        else:
            restored = list(turn.content)
            _learn_id_map(client, restored, self.id_map)
            if not _same(client.peek_content(), restored) or client.provider != turn.provider:
                m = self.msgs[i] = _restored(client, turn, restored)
                verbatim = m.raw_blocks is not None  # restored as the record's JSON
                if verbatim and i not in self.reinstated:
                    self.made[id(client)] = Restoration(client, turn, client.source, m)
                res.changed = True
                res.actions.append(Action(ActionKind.RESTORED, i))
                if i in self.reshaped:
                    res.actions.append(Action(self.reshaped[i][1], i))
            else:  # exactly the recorded turn already (a surface whose messages carry no replay digest)
                verbatim = True
        self.mapped = self.mapped or bool(self.id_map)
        if not verbatim:
            res.verified.update(id(b) for b in m.content if b.type in THINKING_TYPES)
            return
        # the recorded turn as relayed: all of its thinking is verified (sanitize is given it)
        res.verbatim.append(i)
        if m is not client:
            res.restored[i] = m
        # a next request matches afresh what a turn recorded without a replay digest (the conversation cannot say
        # whether it still holds it)
        self.uncarried = self.uncarried or turn.scid != self.recs.scid or not turn.replay_digest
        for key in client.tool_use_ids():
            self.keys.setdefault(key, i)

    def finish(self) -> tuple[RepairResult, RepairPrior]:
        """The outcome, and what the next request may start from: when every assistant message was the recorded
        turn as relayed and no id was mapped (repair's only actions the restorations), the ``Repaired`` it may
        resume; the restorations it may make again (the carried ones, of messages it may still hold, and new)."""
        res, resumed, msgs = self.res, self.resumed, self.msgs
        if self.assistants == len(res.verbatim) and not self.mapped and not self.uncarried \
                and len(res.actions) == len(res.restored) and not self.reinstated:
            j = bisect.bisect_left(res.verbatim, self.start) if res.resumed and resumed is not None else 0
            digests = resumed.digests[:j] if resumed is not None else []
            new = [msgs[i].replay_digest or res.matched[i].replay_digest for i in res.verbatim[j:]]
            held = (resumed.held[:j] if resumed is not None else []) + self.recs.conversation.held(new)
            res.repaired = Repaired(len(msgs), self.client_msgs, self.recs.scid, dict(res.matched), digests + new,
                                    held, dict(res.restored), tuple(res.actions), self.keys)
        made, restorations = self.made, self.restorations
        return res, RepairPrior(res.repaired, {**restorations, **made} if made else restorations)


def _restored(m: Message, turn: RecordedTurn, blocks: list[Block]) -> Message:
    """The message that takes ``m``'s place: ``turn`` as recorded. A new object, so the client's message
    stays as it was decoded (undecoded, if it was): the replay memo hands it to the next request, which
    replays the same bytes, without decoding it again."""
    r = Message(m.role, extra=dict(m.extra), provider=turn.provider, replay_digest=m.replay_digest)
    wire = turn.wire
    if wire is not None:
        # exactly the recorded turn, as a verbatim replay is: its recorded JSON goes upstream (encoders
        # splice it), its blocks are built only if a later stage needs them
        r.restore_raw(wire, functools.partial(_blocks, turn), turn.replay_digest)
    else:
        r.content = blocks
    return r


def _blocks(turn: RecordedTurn) -> list[Block]:
    return list(turn.content)


def _verify_by_exact_text(m: Message, i: int, recs: Records, res: RepairResult) -> None:
    for b in m.content:
        if not isinstance(b, ThinkingBlock) or b.thinking is None:
            continue
        sig = recs.signatures.get(exact_hash(b.thinking))
        if sig is None:
            continue
        if b.signature != sig:
            b.signature = sig
            res.changed = True
            res.actions.append(Action(ActionKind.SIGNATURE_RESTORED, i))
        res.verified.add(id(b))


def _learn_id_map(m: Message, restored: Iterable[Block], id_map: dict[str, str]) -> None:
    """Client tool ids that differ from the recorded ones map back by order (in the results that follow)."""
    recorded = [b.id for b in restored if isinstance(b, ToolUseBlock)]
    client = m.tool_use_ids()
    if len(recorded) == len(client):
        for c, r in zip(client, recorded, strict=True):
            if c != r:
                id_map[c] = r


def _map_tool_results(m: Message, i: int, id_map: dict[str, str], res: RepairResult) -> None:
    if not id_map:
        return
    mapped = False
    for b in m.content:
        if isinstance(b, ToolResultBlock) and b.tool_use_id in id_map:
            b.tool_use_id = id_map[b.tool_use_id]
            mapped = True
            res.changed = True
            res.actions.append(Action(ActionKind.TOOL_ID_MAPPED, i))
    if mapped:
        m.content = list(m.content)  # blocks changed in place: a new list, as ``Message.result_shape`` asks


def _same(a: list[Block], b: list[Block]) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b, strict=True))

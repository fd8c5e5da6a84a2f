"""Repair: restore replayed assistant history to its recorded, authoritative form. The repair rules are here;
the records they read are ``gateway.pipeline.repair.records``, turns whose message boundaries the client changed
``gateway.pipeline.repair.edits``.

Pure: ``run(messages, records, pinned, prior) -> (RepairResult, RepairPrior)`` (``repair``: without a prior).
The records are what the load stage fetched in one store round trip (``Records``).

**Matching** (``place``): which turn of the identified conversation a replayed assistant message is. Only a turn of
the identified conversation (never another conversation's), at the message's place on that conversation's path:

1. its replay digest (the turn replayed byte for byte: ``run`` looks it up first),
2. its tool_use ids and the exact text of its signed thinking, when they name exactly one turn (Layer 1),
3. the user-side path before it: the one turn that answered that path,
4. else the turn right after the previous assistant message's, when that message was matched
   and the results between answer exactly that turn's calls.

A turn found by 2-4 is taken only when nothing contradicts it (``_agrees``): as many calls with the
same names, the same inputs where the client kept them, and, for a turn found by its place, the client's
text among the turn's (normalized-text hashes, thinking turned into text or ``<think>``-tagged included):
text only ever confirms. A turn already matched earlier in the request, or whose tool ids a kept client
message already carries, is never taken again (``Taken``). Where the evidence singles out no turn the message stays
the client's and its thinking is unverified (sanitize degrades it): never a guess.

**Restoring**: a matched message is re-emitted as recorded: thinking and redacted_thinking blocks
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
recorded (``reshape``: ``turn_reinstated``, ``turns_separated``, ``turn_joined``); any other orphan result is
sanitize's to degrade.

**Carried to the next request**: what repair found of a request (``RepairResult``) and what it carries to the
conversation's next request (``RepairPrior``: the ``Repaired`` findings and the client messages it restored,
``Restoration``), and how the next request takes them over: only while it starts with the very messages they cover
(``covers``), up to where this request's index hits or the conversation's turns could say otherwise (``resume_cut``,
``resume``), and a restoration again only for the same client message, still as it was (``restoration``).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.actions import Action, ActionKind
from gateway.dialects.canonical import (
    JSON,
    THINKING_TYPES,
    Block,
    Message,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.pipeline.identify import block_hashes, lookup_hashes
from gateway.pipeline.repair.edits import reshape
from gateway.pipeline.repair.records import ConversationView, RecordedTurn, Records, tool_ids
from state.keys import exact_hash


@dataclass(frozen=True, slots=True)
# --- what a request found, carried to the next ---


class Repaired:
    """What repair found of a request's messages when every assistant message among them was a recorded turn
    as relayed: replayed verbatim (its replay digest), restored from its record's JSON in the client's
    message's place (a mangled replay), or found by its lookups to be exactly that turn already (a surface
    whose messages carry no digest). The next request of the conversation, which starts with the same
    messages as the same objects (``replay_memo``; the caller vouches for that), starts from it while the
    conversation still holds exactly those turns (``ConversationView.held``), up to the first message matched
    by its lookups that this request's index hits answer (``resume_cut``): from there it matches afresh. A
    restored one's place gets the message restored then (``restored``)."""

    count: int                          # the messages it covers, ``messages[:count]``
    messages: list[Message]             # the messages it looked at, as the client's (before any restoration)
    scid: str | None                    # the conversation they were matched in
    matched: dict[int, RecordedTurn]    # every assistant message's turn, by index, in index order
    digests: list[bytes]                # their replay digests (a restored one's: its turn's), in order
    held: list[object]                  # what the conversation held for each (``ConversationView.held``)
    restored: dict[int, Message]        # the messages restored in the client's messages' places, in index order
    actions: tuple[Action, ...]         # repair's actions: one ``restored`` for each of them, in the same order
    keys: dict[str, int]                # tool ids of the messages matched by their lookups -> index

    def before(self, cut: int) -> tuple[int, int]:
        """How many of its matched turns, and of its restorations, come before message ``cut`` (index order)."""
        if cut == self.count:
            return len(self.matched), len(self.restored)
        return bisect.bisect_left(list(self.matched), cut), bisect.bisect_left(list(self.restored), cut)


@dataclass(slots=True)
class RepairResult:
    verified: set[int] = field(default_factory=set)  # id() of thinking blocks proven authentic
    actions: list[Action] = field(default_factory=list)
    matched: dict[int, RecordedTurn] = field(default_factory=dict)  # message index -> turn
    changed: bool = False
    # indexes of the assistant messages that are a recorded turn as relayed: matched by replay digest, or restored
    # from the record's JSON (``restored``), in order; all of their thinking is verified (sanitize is given them)
    verbatim: list[int] = field(default_factory=list)
    restored: dict[int, Message] = field(default_factory=dict)  # the verbatim restorations, by index, in order
    repaired: Repaired | None = None  # for the next request, when every assistant message was its turn as relayed
    resumed: int = 0  # the messages it continued from the previous request's ``Repaired`` (0: it looked at all)

    def is_verified(self, block: Block) -> bool:
        return id(block) in self.verified

    @property
    def scids(self) -> Counter[str]:
        return Counter(t.scid for t in self.matched.values())


@dataclass(frozen=True, slots=True)
class RepairPrior:
    """What repair found of a conversation's previous request, for its next one (``repair.run``)."""

    repaired: Repaired | None = None  # to resume from (``Repaired``), when the caller vouches for the memo's part
    # the client messages it restored, by ``id`` of the client's message (``Restoration.client``: the same object)
    restorations: Mapping[int, Restoration] = field(default_factory=dict)


def covers(resumed: Repaired, msgs: list[Message]) -> bool:
    """Whether ``msgs`` start with the very messages ``resumed`` looked at (not a history rebuilt, nor one the
    replay memo decoded again)."""
    n = resumed.count
    return len(msgs) >= n and len(resumed.messages) == n and all(map(operator.is_, msgs[:n], resumed.messages))


def resume_cut(resumed: Repaired, msgs: list[Message], recs: Records,
               pinned: Mapping[int, RecordedTurn] | None) -> int:
    """How many of ``msgs`` repair takes as ``resumed`` found them (0: none). Not in another conversation, nor
    with pinned turns. A message matched by its replay digest was matched in the conversation alone; one matched
    by its lookups (restored, or exactly its turn already) was matched by the index hits too, which this
    request's (the recent turns' lookups: a handful) may answer differently now: the cut comes before the first
    such message one of them concerns, and only while the conversation still holds exactly the turns before it
    (one C-level pass)."""
    if pinned or resumed.scid != recs.scid or resumed.count > len(msgs):
        return 0
    cut = resumed.count
    if resumed.keys:
        for key in recs.by_tool_id:
            i = resumed.keys.get(key)
            if i is not None and i < cut:
                cut = i
    j = resumed.before(cut)[0]
    now = recs.conversation.held(resumed.digests[:j])
    return cut if all(map(operator.is_, now, resumed.held[:j])) else 0


def resume(resumed: Repaired, cut: int, msgs: list[Message], res: RepairResult) -> RecordedTurn | None:
    """Take ``resumed``'s findings for ``msgs[:cut]``: their turns, marks and restorations (each a ``restored``
    action, as matching it again gives). Returns the last matched turn."""
    whole = cut == resumed.count
    j, r = resumed.before(cut)
    res.matched.update(resumed.matched if whole else itertools.islice(resumed.matched.items(), j))
    res.verbatim += itertools.islice(resumed.matched, j)
    if r:
        restored = resumed.restored if whole else dict(itertools.islice(resumed.restored.items(), r))
        put_restored(msgs, restored)
        res.restored.update(restored)
        res.actions += resumed.actions[:r]
        res.changed = True
    return res.matched[res.verbatim[-1]] if res.verbatim else None


def put_restored(msgs: list[Message], restored: Mapping[int, Message]) -> None:
    """Each restored message in its place (``RepairResult.restored``)."""
    for i, m in restored.items():
        msgs[i] = m


@dataclass(frozen=True, slots=True)
class Restoration:
    """How repair restored a client's message ``client`` (``RepairPrior.restorations``): from ``turn``, while the
    message was ``source`` (its ``Message.source``), by putting ``message`` (the record's JSON) in its place."""

    client: Message
    turn: RecordedTurn
    source: list[JSON]
    message: Message


def restoration(m: Message, turn: RecordedTurn, restorations: Mapping[int, Restoration]) -> Restoration | None:
    """``m``'s restoration from ``turn`` on an earlier request, while ``m`` is still what it was then."""
    again = restorations.get(id(m)) if restorations else None
    if again is not None and again.client is m and again.turn is turn and m.holds(again.source):
        return again
    return None


# --- matching ---


class Taken:
    """What of the conversation a request's history has taken so far, for ``place``: the turns matched (by
    position, read from ``RepairResult.matched`` when first asked: a verbatim replay never asks) and the tool
    ids of the client messages kept as they are (they go upstream with those ids)."""

    __slots__ = ("_matched", "_positions", "ids")

    def __init__(self, res: RepairResult) -> None:
        self._matched = res.matched
        self._positions: set[int] | None = None
        self.ids: set[str] = set()

    def kept(self, m: Message) -> None:
        self.ids.update(m.tool_use_ids())

    def reserve(self, turns: Iterable[RecordedTurn]) -> None:
        """``turns`` are taken by messages further on (turns put back in their shape,
        ``gateway.pipeline.repair.edits``)."""
        if self._positions is None:
            self._positions = {t.position for t in self._matched.values()}
        self._positions.update(t.position for t in turns)

    def add(self, turn: RecordedTurn) -> None:
        """``turn`` was just matched (``RepairResult.matched`` has it)."""
        if self._positions is not None:
            self._positions.add(turn.position)

    def holds(self, turn: RecordedTurn) -> bool:
        """Whether ``turn`` is taken already: matched to an earlier message, or its tool ids in a kept one."""
        if self._positions is None:
            self._positions = {t.position for t in self._matched.values()}
        return turn.position in self._positions or bool(self.ids and self.ids.intersection(tool_ids(turn.content)))


def place(m: Message, msgs: list[Message], i: int, conv: ConversationView, prev: RecordedTurn | None,
          prev_i: int, taken: Taken, restorations: Mapping[int, Restoration]) -> RecordedTurn | None:
    """The identified conversation's turn at message ``i``'s place, when the evidence singles out one and nothing
    contradicts it (see the module docstring); None otherwise."""
    if not conv:
        return None
    named = {t.position: t for t in map(conv.find_tool, m.tool_use_ids()) if t is not None}
    named.update((t.position, t) for t in map(conv.find_thinking, lookup_hashes(m)[1]) if t is not None)
    by_place = not named
    if len(named) > 1:
        return None  # its tool ids (or thinking) name several turns
    if named:
        turn: RecordedTurn | None = next(iter(named.values()))
    else:
        turn = conv.find_path(msgs, i)
        if turn is None and prev is not None and prev_i >= 0:
            turn = conv.get(prev.position + 1)
            if turn is not None and _results_between(msgs, prev_i, i) != len(tool_ids(prev.content)):
                turn = None  # the messages between do not answer the previous turn alone (one was dropped)
    if turn is None or taken.holds(turn):
        return None
    # the same client JSON restored from this record before: it agreed then
    if restoration(m, turn, restorations) is None and not _agrees(m, turn, by_place):
        return None
    return turn


def _agrees(m: Message, turn: RecordedTurn, by_place: bool) -> bool:
    """Whether the record agrees with what the client kept of it: as many tool calls, with the same names, and
    the same inputs where the client kept them; for a turn found by its place, also the client's text (when it
    kept any) among the turn's."""
    calls = [b for b in m.peek_content() if isinstance(b, ToolUseBlock)]
    recorded = [b for b in turn.content if isinstance(b, ToolUseBlock)]
    if len(calls) != len(recorded):
        return False
    for c, r in zip(calls, recorded, strict=True):
        if c.name != r.name or (c.input and c.input != r.input):
            return False
    if by_place:
        hashes = lookup_hashes(m)[0]
        if hashes and set(hashes).isdisjoint(block_hashes(turn.content)):
            return False
    return True


def _results_between(msgs: list[Message], a: int, b: int) -> int:
    return sum(len(m.result_shape().result_ids) for m in msgs[a + 1:b] if m.role == "user")


# --- repair ---


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

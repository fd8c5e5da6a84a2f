"""What repair found of a request (``RepairResult``) and what it carries to the conversation's next request
(``RepairPrior``: the ``Repaired`` findings and the client messages it restored, ``Restoration``), and how the next
request takes them over: only while it starts with the very messages they cover (``covers``), up to where this
request's index hits or the conversation's turns could say otherwise (``resume_cut``, ``resume``), and a restoration
again only for the same client message, still as it was (``restoration``). Pure.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.actions import Action
from gateway.dialects.canonical import JSON, Block, Message
from gateway.pipeline.repair.recorded import RecordedTurn, Records


@dataclass(frozen=True, slots=True)
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

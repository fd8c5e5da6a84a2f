"""Matching: which turn of the identified conversation a replayed assistant message is (``place``, for
``gateway.pipeline.repair.core``). Only a turn of the identified conversation (never another conversation's), at the
message's
place on that conversation's path:

1. its replay digest (the turn replayed byte for byte: ``repair.run`` looks it up first),
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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.dialects.canonical import Message, ToolUseBlock
from gateway.pipeline.identify import block_hashes, lookup_hashes
from gateway.pipeline.repair.recorded import ConversationView, RecordedTurn, tool_ids
from gateway.pipeline.repair.repair_state import RepairResult, Restoration, restoration


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
        ``gateway.pipeline.repair.reshape``)."""
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

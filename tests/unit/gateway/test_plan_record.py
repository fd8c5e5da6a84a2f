"""Where a request's answer is recorded when some of its assistant messages are no recorded turn yet
(``pipeline._plan_record``, issue 32 item 4): after them, in the identified conversation, only when each sits at a
place the store has not received (turns served while it was away); an unmatched message where the store holds a turn
stays as before (a new conversation)."""

from __future__ import annotations

import dataclasses

from gateway.dialects.canonical import Message, Request, TextBlock
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import ClientRequest, Exchange
from gateway.pipeline.repair.records import RecordedTurn
from state.records import ConversationState
from state.store import LoadResult
from tests.support.state.factories import turn

SCID = "s" * 22


def _exchange(msgs: list[Message]) -> Exchange:
    ex = Exchange(ClientRequest(endpoint="messages", dialect="anthropic", request_id="r", headers={}, query="",
                                raw_body=b""))
    ex.request = Request("claude-opus-4-5", msgs, None, params={})
    ex.identity.stateful, ex.identity.scid = True, SCID
    return ex


def _held(*positions: int) -> LoadResult:
    """A load that read the conversation holding turns at ``positions``."""
    turns = tuple(dataclasses.replace(turn(p), position=p) for p in positions)
    conv = ConversationState(SCID, 0.0, 0.0, len(turns), turns, None, 0, max(positions) + 1)
    return LoadResult(conversations={SCID: conv})


def _loop(n: int) -> list[Message]:
    msgs = [Message("user", [TextBlock("hi")])]
    for k in range(n):
        msgs += [Message("assistant", [TextBlock(f"a{k}")]), Message("user", [TextBlock(f"r{k}")])]
    return msgs


def test_a_tail_not_recorded_yet_is_recorded_after() -> None:
    msgs = _loop(4)  # assistants at 1, 3, 5, 7: the first two recorded, the last two not yet
    ex = _exchange(msgs)
    pipeline._plan_record(ex, {1: RecordedTurn(SCID, 0), 3: RecordedTurn(SCID, 1)}, _held(0, 1))
    assert (ex.identity.scid, ex.identity.expected_position) == (SCID, 4)
    ex = _exchange(msgs)  # turn 2 not received yet, turn 3 recorded first (by another replica's record retry)
    pipeline._plan_record(ex, {1: RecordedTurn(SCID, 0), 7: RecordedTurn(SCID, 3)}, _held(0, 1, 3))
    assert (ex.identity.scid, ex.identity.expected_position) == (SCID, 4)


def test_an_unmatched_message_where_the_store_holds_a_turn_is_the_clients_own_path() -> None:
    msgs = _loop(4)
    ex = _exchange(msgs)  # message 3 is not the turn the store holds at place 1
    pipeline._plan_record(ex, {1: RecordedTurn(SCID, 0), 5: RecordedTurn(SCID, 2)}, _held(0, 1, 2))
    assert ex.identity.scid != SCID and ex.identity.expected_position == 0  # a new conversation, as before
    ex = _exchange(msgs)  # matched turns not at their places
    pipeline._plan_record(ex, {1: RecordedTurn(SCID, 1), 3: RecordedTurn(SCID, 2)}, _held(1, 2))
    assert ex.identity.scid != SCID and ex.identity.expected_position == 0

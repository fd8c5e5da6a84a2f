"""Repair continued from the previous request's findings (``repair_state.Repaired``) over a mangled replay: turns
restored from their records' JSON in the client's messages' places are put there again, with the same actions,
as matching them afresh gives; never past a restored message whose lookups this request's index hits answer
(they may name another turn now), nor over turns the conversation no longer holds.

(The pipeline-level equivalence, with and without the memo, over every mangling on the real simulator and
Redis, is ``tests/support/gateway/replay_memo_tests.py``.)"""

from __future__ import annotations

from typing import Any

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message
from gateway.pipeline.repair.core import RepairPrior, repair
from gateway.pipeline.repair.core import run as repair_run
from gateway.pipeline.repair.records import Records, records_from
from state.keys import replay_digest
from state.records import ConversationState, TurnRecord
from state.store import LoadResult

SCID = "scid-continued-0000001"
FORK = "scid-continued-fork001"


def _turn(n: int) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": f"Plan {n}: call the tool.", "signature": f"sig-{n}"},
            {"type": "text", "text": f"Step {n}."},
            {"type": "tool_use", "id": f"toolu_cont_{n}", "name": "f", "input": {"n": n}}]


def _records(scid: str, turns: int, first: int = 0, *, digests: bool = True) -> tuple[Records, list[TurnRecord]]:
    recs = [TurnRecord(content=_turn(n), replay_digest=(replay_digest(_turn(n)) or b"") if digests else b"",
                       position=n) for n in range(first, turns)]
    conv = ConversationState(scid=scid, created_at=0, updated_at=0, version=1, turns=tuple(recs),
                             last_verified=None, first_position=first, next_position=turns)
    return records_from(LoadResult(conversation=conv, conversations={scid: conv}), scid), recs


def _mangled(turns: int) -> list[Message]:
    """A tool loop of ``turns`` answered turns, each replayed with its signature dropped (a mangled IDE)."""
    raw: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(turns):
        raw.append({"role": "assistant", "content": [{k: v for k, v in b.items() if k != "signature"}
                                                     for b in _turn(n)]})
        raw.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_cont_{n}",
                                                  "content": "ok"}]})
    return anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": raw}).messages


def _plan(msgs: list[Message], res: Any) -> tuple[Any, ...]:
    return ([anthropic.encode_message(m) for m in msgs], res.actions, {i: (t.scid, t.position) for i, t in
                                                                       res.matched.items()}, res.verbatim)


def test_a_mangled_replay_continues_with_the_messages_restored_before() -> None:
    client = _mangled(4)  # assistant messages at 1, 3, 5, 7
    recs, _ = _records(SCID, 5)
    first_msgs = client[:7]  # the previous request: three turns answered
    first = repair(list(first_msgs), recs)
    assert first.repaired is not None and list(first.repaired.restored) == [1, 3, 5]
    assert first.verbatim == [1, 3, 5] and [a.kind for a in first.actions] == [ActionKind.RESTORED] * 3

    went_on_msgs = list(client)
    went_on = repair(went_on_msgs, recs, resumed=first.repaired)
    fresh_msgs = list(client)
    fresh = repair(fresh_msgs, recs)
    assert went_on.resumed == 7 and fresh.resumed == 0
    assert _plan(went_on_msgs, went_on) == _plan(fresh_msgs, fresh)
    # the same messages take the client's places as on the previous request (their JSON, shape already read)
    assert all(went_on_msgs[i] is first.repaired.restored[i] for i in (1, 3, 5))
    assert went_on.repaired is not None and list(went_on.repaired.restored) == [1, 3, 5, 7]


def test_a_restored_message_whose_lookup_an_index_hit_answers_is_matched_afresh() -> None:
    """The index now names another conversation's turn (a fork recorded the same tool call) for a tool id of
    a restored message: the continuation stops before that message and matches it afresh, in the identified
    conversation only (an index hit never puts another conversation's turn in its place). Without the cut the
    previous match would stand; here both give the same plan."""
    client = _mangled(4)
    recs, _ = _records(SCID, 5)
    first = repair(list(client[:7]), recs)
    assert first.repaired is not None
    fork, _ = _records(FORK, 5)
    hit = fork.conversation.find_tool("toolu_cont_1")
    assert hit is not None and hit.scid == FORK
    now = Records(by_tool_id={"toolu_cont_1": hit}, conversation=recs.conversation, scid=SCID)

    went_on_msgs = list(client)
    went_on = repair(went_on_msgs, now, resumed=first.repaired)
    fresh_msgs = list(client)
    fresh = repair(fresh_msgs, now)
    assert went_on.resumed == 3  # cut before the message the hit concerns (turn 1, the second assistant message)
    assert fresh.matched[3].scid == SCID and _plan(went_on_msgs, went_on) == _plan(fresh_msgs, fresh)
    assert {t.scid for t in fresh.matched.values()} == {SCID}


def test_no_continuation_over_turns_the_conversation_no_longer_holds() -> None:
    client = _mangled(4)
    recs, _ = _records(SCID, 5)
    first = repair(list(client[:7]), recs)
    assert first.repaired is not None
    trimmed, _ = _records(SCID, 5, first=1)  # the oldest turn trimmed away
    went_on_msgs = list(client)
    went_on = repair(went_on_msgs, trimmed, resumed=first.repaired)
    fresh_msgs = list(client)
    fresh = repair(fresh_msgs, trimmed)
    assert went_on.resumed == 0 and _plan(went_on_msgs, went_on) == _plan(fresh_msgs, fresh)
    assert 1 not in fresh.matched  # the trimmed turn cannot be matched: its thinking is judged again


def test_a_regenerated_tool_id_is_not_continued() -> None:
    """A client that rewrote a tool id: the id map repair learns would have to travel with the continuation,
    so a request that needed one is not continued from (its results are mapped in place anyway). The message
    with the rewritten id is matched by its place: right after the previous message's turn, whose one call
    the results between answer."""
    client = _mangled(3)
    blocks = [b for b in client[3].peek_content()]
    raw = [anthropic.encode_block(b) for b in blocks]
    raw[2] = {**raw[2], "id": "toolu_rewritten"}
    client[3] = anthropic.decode_message({"role": "assistant", "content": raw}, 3)
    recs, _ = _records(SCID, 3)
    res = repair(client, recs)
    assert res.matched[3].position == 1 and res.repaired is None


def test_an_eager_mangled_message_is_restored_by_the_message_that_took_its_place_before() -> None:
    """A surface that decodes its messages (OpenAI chat) gives repair eager messages: one restored on the
    previous request gets the same message in its place again while it holds the same content list; a new
    list (a stage replaced it) is restored afresh."""
    client = _mangled(2)
    for m in client:
        m.content  # noqa: B018  # decoded, as the chat surface's are
    recs, _ = _records(SCID, 2)
    first_msgs = list(client)
    _, carried = repair_run(first_msgs, recs, None, None)
    prior = RepairPrior(restorations=carried.restorations)
    again = list(client)
    repair_run(again, recs, None, prior)
    assert again[1] is first_msgs[1] and again[3] is first_msgs[3] and again[1] is not client[1]
    client[1].content = list(client[1].content)
    fresh = list(client)
    repair_run(fresh, recs, None, prior)
    assert fresh[1] is not first_msgs[1] and fresh[3] is first_msgs[3]
    assert anthropic.encode_message(fresh[1]) == anthropic.encode_message(first_msgs[1])


def test_a_message_already_exactly_its_turn_without_a_replay_digest_is_continued() -> None:
    """A surface whose messages carry no replay digest (OpenAI chat) replays a turn exactly: matched by its
    lookups, it is the recorded turn as relayed (marked verbatim, nothing restored), so repair continues over it
    as over a restored one; a turn recorded without a digest is not continued over (the conversation cannot
    say it still holds it)."""
    raw = [{"role": "user", "content": "go"}]
    for n in range(3):
        raw += [{"role": "assistant", "content": _turn(n)},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_cont_{n}",
                                              "content": "ok"}]}]
    client = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": raw}).messages
    for m in client:
        m.replay_digest = None
    recs, _ = _records(SCID, 3)
    first = repair(list(client[:5]), recs)
    assert first.actions == [] and first.verbatim == [1, 3]
    assert first.repaired is not None and not first.repaired.restored
    went_on_msgs, fresh_msgs = list(client), list(client)
    went_on = repair(went_on_msgs, recs, resumed=first.repaired)
    assert went_on.resumed == 5 and _plan(went_on_msgs, went_on) == _plan(fresh_msgs, repair(fresh_msgs, recs))

    no_digest, _ = _records(SCID, 3, digests=False)
    undigested = repair(list(client[:5]), no_digest)
    assert undigested.verbatim == [1, 3] and undigested.repaired is None


def test_a_turn_is_restored_once_per_request() -> None:
    """A client that replays one turn twice (its tool ids twice, a duplicated message): the record is restored in
    the first place only; the second copy stays the client's (its thinking unverified), never a second restore
    of the same record (the toolchain then gives its repeated ids new ones). Without the guard both places
    would get the record."""
    client = _mangled(2)
    twice = [*client[:3], anthropic.decode_message(anthropic.encode_message(client[1]), 3), client[2], *client[3:]]
    recs, _ = _records(SCID, 2)
    res = repair(twice, recs)
    assert res.matched[1].position == 0 and 3 not in res.matched
    assert res.matched[5].position == 1 and [a.kind for a in res.actions].count(ActionKind.RESTORED) == 2
    assert twice[3].peek_content()[0].signature is None  # the copy kept as the client sent it (no signature)

"""Repair puts back a recorded turn the client dropped but whose tool results it kept (issue 23, item 3), and only
where the evidence singles it out: every tool_result id of the orphan results names the same turn of the identified
conversation, and the request carries none of that turn's calls otherwise. Anything else is left to sanitize."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, Request
from gateway.dialects.routing import caps_for
from gateway.dialects.toolchain import dropped_result_ids
from gateway.pipeline.identify import build_query, identify_conversation
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import Records, records_from
from gateway.pipeline.sanitize.core import Policy, sanitize
from state.keys import new_scid, replay_digest
from state.memory_store import MemoryStore
from state.records import ConversationState, TurnRecord
from state.store import LoadResult
from tests.unit.gateway.test_repair_identity_property import TENANT, _record

SCID = "scid-reinstate-0001"
MODEL = "claude-opus-4-5"


def turn(n: int, *calls: str) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": f"  Plan {n}:\r\n  look it up.  \n", "signature": f"sig-{n}"},
            {"type": "text", "text": f"Step {n}."},
            *({"type": "tool_use", "id": c, "name": "get_weather", "input": {"city": c}} for c in calls)]


TURNS = [turn(0, "toolu_a1"), turn(1, "toolu_b1", "toolu_b2"), turn(2)]


def records(*contents: list[dict[str, Any]], prompts: dict[int, list[dict[str, Any]]] | None = None) -> Records:
    """The conversation of these turns (``prompts``: the request-side messages a turn answered, by position)."""
    recs = tuple(TurnRecord(content=c, replay_digest=replay_digest(c) or b"", position=i,
                            prompt=(prompts or {}).get(i, []))
                 for i, c in enumerate(contents))
    conv = ConversationState(scid=SCID, created_at=0, updated_at=0, version=1, turns=recs, last_verified=None,
                             first_position=0, next_position=len(recs))
    return records_from(LoadResult(conversation=conv, conversations={SCID: conv}), SCID)


def results(*ids: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": t, "content": "sunny"} for t in ids]}


def request(*messages: dict[str, Any]) -> Request:
    return anthropic.decode_request({"model": MODEL, "max_tokens": 4096, "messages": list(messages),
                                     "thinking": {"type": "enabled", "budget_tokens": 2048}})


def wire(msgs: list[Message]) -> list[dict[str, Any]]:
    return [anthropic.encode_message(m) for m in msgs]


def run(req: Request, recs: Records) -> tuple[list[ActionKind], list[ActionKind]]:
    res = repair(req.messages, recs)
    cleaned = sanitize(req, res.is_verified, caps_for(MODEL), Policy(), verbatim=res.verbatim)
    return [a.kind for a in res.actions], [a.kind for a in cleaned]


ASK = {"role": "user", "content": "weather?"}


def test_a_dropped_turn_goes_back_before_its_results_as_recorded() -> None:
    req = request(ASK, results("toolu_a1"))
    repaired, cleaned = run(req, records(*TURNS))
    assert wire(req.messages) == [ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1")]
    assert repaired == [ActionKind.RESTORED, ActionKind.TURN_REINSTATED]
    assert cleaned == [ActionKind.KEPT_VERIFIED] and req.thinking_enabled()


def test_a_dropped_turn_in_the_middle_with_its_results_in_any_order() -> None:
    """The second turn dropped; its two results kept (the client swapped them): the turn goes back and sanitize
    puts the results in call order."""
    req = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"),
                  results("toolu_b2", "toolu_b1"), {"role": "assistant", "content": TURNS[2]})
    recs = records(*TURNS)
    res = repair(req.messages, recs)
    assert [m.role for m in req.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert sorted(res.matched) == [1, 3, 5] and [res.matched[i].position for i in (1, 3, 5)] == [0, 1, 2]
    assert wire(req.messages)[3]["content"] == TURNS[1]
    cleaned = [a.kind for a in sanitize(req, res.is_verified, caps_for(MODEL), Policy(), verbatim=res.verbatim)]
    assert ActionKind.TOOL_RESULTS_REORDERED in cleaned and ActionKind.TOOL_RESULT_TEXTUALIZED not in cleaned
    assert wire(req.messages)[4] == results("toolu_b1", "toolu_b2")


def test_a_dropped_turn_whose_results_are_split_over_two_messages_goes_back_once() -> None:
    req = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"), results("toolu_b1"),
                  results("toolu_b2"))
    repaired, cleaned = run(req, records(*TURNS))
    assert repaired.count(ActionKind.TURN_REINSTATED) == 1
    assert wire(req.messages)[3:5] == [{"role": "assistant", "content": TURNS[1]}, results("toolu_b1", "toolu_b2")]
    assert ActionKind.TOOL_RESULT_TEXTUALIZED not in cleaned  # (the message it left holds a placeholder text)


def test_a_dropped_turns_results_moved_behind_the_next_question_go_back_first() -> None:
    """The second turn dropped and its results moved into the next user message, after its text: the turn goes
    back before that message, whose tool_results then lead it (the upstream's order)."""
    req = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"),
                  {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"},
                                               *results("toolu_b1", "toolu_b2")["content"]]})
    repaired, cleaned = run(req, records(*TURNS))
    assert ActionKind.TURN_REINSTATED in repaired and ActionKind.TOOL_RESULT_TEXTUALIZED not in cleaned
    sent = wire(req.messages)
    assert sent[3] == {"role": "assistant", "content": TURNS[1]}
    question = {"type": "text", "text": "and tomorrow?"}
    assert sent[4]["content"] == [*results("toolu_b1", "toolu_b2")["content"], question]


def test_a_partly_known_set_of_results_is_no_evidence() -> None:
    """One id names the turn, the other names none (or another turn): no turn is singled out."""
    for other in ("toolu_unknown", "toolu_a1"):
        req = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"),
                      results("toolu_b1", other))
        repaired, cleaned = run(req, records(*TURNS))
        assert ActionKind.TURN_REINSTATED not in repaired
        assert [m.role for m in req.messages].count("assistant") == 1
        assert ActionKind.TOOL_RESULT_TEXTUALIZED in cleaned


def test_no_turn_goes_back_whose_calls_the_request_carries() -> None:
    """The client kept the turn's call (moved it after its results, say): not a dropped turn, never a duplicate."""
    req = request(ASK, results("toolu_a1"), {"role": "assistant", "content": TURNS[0]})
    repaired, _ = run(req, records(*TURNS))
    assert ActionKind.TURN_REINSTATED not in repaired
    ids = [b["id"] for m in wire(req.messages) if m["role"] == "assistant" for b in m["content"]
           if b["type"] == "tool_use"]
    assert ids == ["toolu_a1"]


def test_nothing_goes_back_without_a_conversation_or_after_an_assistant_message() -> None:
    req = request(ASK, results("toolu_a1"))
    assert ActionKind.TURN_REINSTATED not in run(req, Records())[0]
    assert [m.role for m in req.messages] == ["user", "user"]
    # results right after an assistant message are the tool chain's (answered, moved or textualized there)
    req = request(ASK, {"role": "assistant", "content": TURNS[2]}, results("toolu_a1"))
    assert ActionKind.TURN_REINSTATED not in run(req, records(*TURNS))[0]


def test_results_that_open_the_request_bring_back_their_turn_after_the_question_it_answered() -> None:
    """The trimmer cut the question and the turn, and kept the turn's results as the first message: the turn goes
    back before them, after the question it answered (its record's prompt), so the history opens with the user."""
    prompts = {0: [ASK], 1: [results("toolu_a1")]}
    req = request(results("toolu_a1"))
    repaired, cleaned = run(req, records(*TURNS, prompts=prompts))
    assert wire(req.messages) == [ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1")]
    assert repaired == [ActionKind.RESTORED, ActionKind.TURN_REINSTATED]
    assert cleaned == [ActionKind.KEPT_VERIFIED] and req.thinking_enabled()
    # more follows (the next round replayed as it is): the same, and the next round stays as it was
    later = [{"role": "assistant", "content": TURNS[1]}, results("toolu_b1", "toolu_b2")]
    req = request(results("toolu_a1"), *later)
    repaired, _ = run(req, records(*TURNS, prompts=prompts))
    assert wire(req.messages) == [ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"), *later]
    assert repaired.count(ActionKind.TURN_REINSTATED) == 1


def test_results_that_open_the_request_stay_the_tool_chains_without_a_plain_question_before_their_turn() -> None:
    """A turn further into its loop answered tool results (it would open the history itself), a record with no
    prompt kept, a turn whose calls the request carries, ids naming no turn: nothing goes back at index 0."""
    for prompts, msgs in (({1: [results("toolu_a1")]}, [results("toolu_b1", "toolu_b2")]),
                          ({}, [results("toolu_a1")]),
                          ({0: [ASK]}, [results("toolu_a1"), {"role": "assistant", "content": TURNS[0]},
                                        results("toolu_a1")]),
                          ({0: [ASK]}, [results("toolu_zz")])):
        req = request(*msgs)
        repaired, _ = run(req, records(*TURNS, prompts=prompts))
        assert ActionKind.TURN_REINSTATED not in repaired and len(req.messages) == len(msgs), (prompts, msgs)


def test_a_rebuilt_history_is_left_as_it_was_pinned() -> None:
    req = request(ASK, results("toolu_a1"))
    res = repair(req.messages, records(*TURNS), pinned={})
    assert ActionKind.TURN_REINSTATED in [a.kind for a in res.actions]  # an empty pin map pins nothing
    req = request(ASK, {"role": "assistant", "content": TURNS[2]}, ASK, results("toolu_a1"))
    recs = records(*TURNS)
    res = repair(req.messages, recs, pinned={1: recs.conversation[2]})
    assert ActionKind.TURN_REINSTATED not in [a.kind for a in res.actions] and len(req.messages) == 4


def test_the_load_query_looks_up_a_dropped_turns_result_ids() -> None:
    """With no assistant message left, the results' ids are the only ones that can name the conversation."""
    msgs = request(ASK, results("toolu_a1")).messages
    assert dropped_result_ids(msgs) == ["toolu_a1"] and build_query(msgs, None).tool_ids == ["toolu_a1"]
    # answered results (right after their assistant message) are not looked up again
    msgs = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"), results("toolu_b1")).messages
    assert dropped_result_ids(msgs) == ["toolu_b1"]
    assert build_query(msgs, None).tool_ids == ["toolu_a1", "toolu_b1"]
    msgs = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1")).messages
    assert dropped_result_ids(msgs) == []
    # results that open the request (the trimmer cut everything before them)
    msgs = request(results("toolu_a1")).messages
    assert dropped_result_ids(msgs) == ["toolu_a1"] and build_query(msgs, None).tool_ids == ["toolu_a1"]


def test_consecutive_turns_merged_into_one_message_are_separated_again() -> None:
    """The client merged the first two turns (and their results): each goes back as recorded, its results after it."""
    req = request(ASK, {"role": "assistant", "content": TURNS[0] + TURNS[1]},
                  results("toolu_a1", "toolu_b1", "toolu_b2"))
    repaired, cleaned = run(req, records(*TURNS))
    assert wire(req.messages) == [ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"),
                                  {"role": "assistant", "content": TURNS[1]}, results("toolu_b1", "toolu_b2")]
    assert repaired == [ActionKind.RESTORED, ActionKind.TURNS_SEPARATED] * 2
    assert ActionKind.KEPT_VERIFIED in cleaned and req.thinking_enabled()
    assert ActionKind.TOOL_RESULT_TEXTUALIZED not in cleaned and ActionKind.TOOL_RESULT_SYNTHESIZED not in cleaned


def test_a_merged_message_the_records_do_not_agree_with_is_left_as_it_is() -> None:
    """Calls in another order, an input the client changed, a call the turns do not have, one turn's calls only:
    no split (the tool chain and sanitize deal with the message as before)."""
    three = turn(3, "toolu_c1")
    swapped = [*TURNS[1][:2], TURNS[1][3], TURNS[1][2]]
    edited = [*TURNS[1][:3], {**TURNS[1][3], "input": {"city": "Paris"}}]
    extra = [*TURNS[1], {"type": "tool_use", "id": "toolu_x9", "name": "get_weather", "input": {}}]
    for content in (TURNS[0] + swapped, TURNS[0] + edited, TURNS[0] + extra, TURNS[1], TURNS[0] + three):
        req = request(ASK, {"role": "assistant", "content": content}, results("toolu_a1"))
        repaired, _ = run(req, records(*TURNS[:2], TURNS[2][:2], three))  # (three: not next to turn 0)
        assert ActionKind.TURNS_SEPARATED not in repaired, content


def test_a_turn_split_into_messages_is_one_message_again() -> None:
    """The client sent the turn's thinking and text apart from its call (in one or two messages before it): the
    turn goes upstream as recorded, in one message, its thinking kept."""
    t = TURNS[0]
    for parts in ([t[:2], t[2:]], [t[:1], t[1:]], [t[:1], t[1:2], t[2:]], [[{**t[0], "signature": "x"}], t[1:]]):
        req = request(ASK, *({"role": "assistant", "content": p} for p in parts), results("toolu_a1"))
        repaired, cleaned = run(req, records(*TURNS))
        assert wire(req.messages) == [ASK, {"role": "assistant", "content": t}, results("toolu_a1")], parts
        assert repaired == [ActionKind.RESTORED, ActionKind.TURN_JOINED]
        assert cleaned == [ActionKind.KEPT_VERIFIED] and req.thinking_enabled()


def test_a_turn_split_with_trailing_fragments_is_one_message_again() -> None:
    """The client sent the turn's text or thinking after its call (a client that shows the calls first), or parts on
    both sides: the fragments after the call go back into the turn too, as recorded, in one message."""
    t = TURNS[0]
    for parts in ([t[2:], t[:2]], [t[:1] + t[2:], t[1:2]], [t[2:], t[:1], t[1:2]], [t[:1], t[2:], t[1:2]],
                  [t[1:], t[:1]]):
        req = request(ASK, *({"role": "assistant", "content": p} for p in parts), results("toolu_a1"))
        repaired, cleaned = run(req, records(*TURNS))
        assert wire(req.messages) == [ASK, {"role": "assistant", "content": t}, results("toolu_a1")], parts
        assert repaired == [ActionKind.RESTORED, ActionKind.TURN_JOINED]
        assert cleaned == [ActionKind.KEPT_VERIFIED] and req.thinking_enabled()
    # a later round: the fragment after round 1's calls, before its results; round 0 replayed as it is
    t = TURNS[1]
    req = request(ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"),
                  {"role": "assistant", "content": t[2:]}, {"role": "assistant", "content": t[:2]},
                  results("toolu_b1", "toolu_b2"))
    repaired, _ = run(req, records(*TURNS))
    assert wire(req.messages) == [ASK, {"role": "assistant", "content": TURNS[0]}, results("toolu_a1"),
                                  {"role": "assistant", "content": t}, results("toolu_b1", "toolu_b2")]
    assert repaired.count(ActionKind.TURN_JOINED) == 1


def test_an_assistant_message_that_is_not_part_of_the_turn_is_never_joined_to_it() -> None:
    """Text the turn does not hold, thinking of another turn, or a recorded turn replayed as it is (its digest)
    before the message with the calls: nothing is joined."""
    other = turn(7)
    for before in ([{"type": "text", "text": "Something else."}], other[:1], TURNS[2]):
        req = request(ASK, {"role": "assistant", "content": before}, {"role": "assistant", "content": TURNS[0]},
                      results("toolu_a1"))
        res = repair(req.messages, records(*TURNS))
        assert ActionKind.TURN_JOINED not in [a.kind for a in res.actions] and len(req.messages) == 4, before
    # nor after it (the next turn replayed as it is, text the turn does not hold, another turn's thinking)
    for after in ([{"type": "text", "text": "Something else."}], other[:1], TURNS[2]):
        req = request(ASK, {"role": "assistant", "content": TURNS[0]}, {"role": "assistant", "content": after},
                      results("toolu_a1"))
        res = repair(req.messages, records(*TURNS))
        assert ActionKind.TURN_JOINED not in [a.kind for a in res.actions] and len(req.messages) == 4, after


# ------------------------------------------------------------------ as a property over the real load path


RESHAPED = {ActionKind.TURN_REINSTATED, ActionKind.TURNS_SEPARATED, ActionKind.TURN_JOINED}


def _reshaped(history: list[dict[str, Any]], rounds: int, k: int, shape: str) -> list[dict[str, Any]]:
    """``history`` (the first user message, then an assistant message and its results per round) with round ``k``'s
    boundaries changed: its assistant message dropped, merged with the next round's (their results too), or split
    (thinking and text apart from the calls, before them or after them)."""
    out = copy.deepcopy(history)
    a = 1 + 2 * k
    if shape == "drop":
        del out[a]
    elif shape == "merge" and k + 1 < rounds:
        out[a:a + 4] = [{"role": "assistant", "content": out[a]["content"] + out[a + 2]["content"]},
                        {"role": "user", "content": out[a + 1]["content"] + out[a + 3]["content"]}]
    elif shape in ("split", "split_after"):
        blocks = out[a]["content"]
        parts = [{"role": "assistant", "content": [b for b in blocks if b["type"] != "tool_use"]},
                 {"role": "assistant", "content": [b for b in blocks if b["type"] == "tool_use"]}]
        out[a:a + 1] = parts if shape == "split" else parts[::-1]
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=st.lists(st.sampled_from(["fix the bug", "add a test"]), min_size=2, max_size=4),
       turns=st.integers(1, 3), files=st.lists(st.sampled_from(["a.py", "b.py"]), min_size=12, max_size=12),
       source=st.integers(0, 3), upto=st.integers(1, 3), changed=st.integers(0, 2),
       shape=st.sampled_from(["drop", "merge", "split", "split_after"]), ids=st.sampled_from(["kept", "renumbered"]),
       header=st.sampled_from(["none", "own", "fresh", "other"]))
def test_a_reshaped_turn_is_always_the_identified_conversations_own(
        prompts: list[str], turns: int, files: list[str], source: int, upto: int, changed: int, shape: str,
        ids: str, header: str) -> None:
    """One tenant, several conversations with the same visible text and calls. A replay of one of them changes the
    boundaries of round ``changed`` (dropped, merged with the next, split), its results' tool ids kept or
    renumbered by the client, under its own SCID, none, a fresh one or another conversation's. Every turn repair
    matches is then the identified conversation's, which is the client's, each once; where the ids name the
    conversation, every round's turn is matched (the reshaped one included); under another conversation's SCID,
    nothing is reshaped."""
    async def run() -> None:
        store = MemoryStore()
        convs = [await _record(store, c, p, files[3 * c:3 * c + turns]) for c, p in enumerate(prompts)]
        src = convs[source % len(convs)]
        rounds = min(upto, turns)
        history = _reshaped(src.history[:1 + 2 * rounds], rounds, changed % rounds, shape)
        if ids == "renumbered":
            for m in history:
                for b in m["content"] if isinstance(m["content"], list) else ():
                    if b["type"] == "tool_result":
                        b["tool_use_id"] = "call_" + b["tool_use_id"][-4:]
        msgs = anthropic.decode_request({"model": MODEL, "max_tokens": 1, "messages": history}).messages
        other = convs[(source + 1) % len(convs)].scid
        scid = {"none": None, "own": src.scid, "fresh": new_scid(), "other": other}[header]
        query = build_query(msgs, scid)
        result = await store.load(TENANT, query)
        found = identify_conversation(result, query)
        res = repair(msgs, records_from(result, found.scid))
        kinds = {a.kind for a in res.actions}
        positions = [t.position for t in res.matched.values()]
        assert all(t.scid == found.scid for t in res.matched.values()), (shape, header, ids)
        assert len(positions) == len(set(positions)) and positions == sorted(positions), (shape, header, ids)
        assert all(msgs[i].role == "assistant" for i in res.matched)
        if header == "other":
            assert not kinds & RESHAPED
        elif ids == "kept" or shape != "drop":
            assert found.scid == src.scid and positions == list(range(rounds)), (shape, header, ids, positions)
        else:  # the dropped turn's results renumbered: no evidence names it
            assert ActionKind.TURN_REINSTATED not in kinds
    asyncio.run(run())

"""Verbatim replays are matched by their replay digest: no stored record is decoded for them.

Turns are recorded through the gateway's own ``turn_record`` into the embedded store, loaded back
(``records_from``) and the replayed history is decoded from JSON, as the Anthropic surface does.
"""

from __future__ import annotations

import copy
from typing import Any

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import ProviderFields, Turn
from gateway.dialects.routing import caps_for
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import records_from, turn_record
from gateway.pipeline.sanitize.core import Policy, sanitize
from state.keys import new_scid, replay_digest
from state.memory_store import MemoryStore
from state.store import LoadQuery, TurnWrite
from tests.support.state.factories import TENANT_A


def answer(i: int) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": f"  step {i}:\r\n weigh it  ", "signature": f"sig-{i}-" + "A" * 40},
            {"type": "text", "text": f"Reading file {i}."},
            {"type": "tool_use", "id": f"toolu_d_{i}", "name": "read_file", "input": {"path": f"f{i}.py"}}]


async def recorded_history(n: int) -> tuple[MemoryStore, str, list[dict[str, Any]]]:
    store = MemoryStore()
    await store.start()
    scid = new_scid()
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
    for i in range(n):
        msgs = anthropic.decode_request({"model": "m", "messages": history}).messages
        turn = Turn(f"msg_{i}", "m", [anthropic.decode_block(b, "x") for b in answer(i)])
        rec = turn_record(turn, msgs, upstream="anthropic", dialect="anthropic")
        await store.record(TENANT_A, TurnWrite(rec, scid=scid, expected_position=i))
        history.append({"role": "assistant", "content": answer(i)})
        history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_d_{i}",
                                                     "content": "x" * 100}]})
    return store, scid, history


async def test_verbatim_turns_match_by_digest_without_decoding_records() -> None:
    store, scid, history = await recorded_history(6)
    result = await store.load(TENANT_A, LoadQuery(scid=scid))
    recs = records_from(result, scid)
    msgs = anthropic.decode_request({"model": "m", "messages": history}).messages

    res = repair(msgs, recs)

    assistants = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    assert sorted(res.matched) == assistants
    assert [res.matched[i].position for i in assistants] == list(range(6))
    assert not res.changed and not res.actions
    assert all(res.matched[i]._content is None for i in assistants)  # no record decoded
    assert res.verbatim == assistants and all(msgs[i].raw_blocks is not None for i in assistants)  # nor the replay

    req = anthropic.decode_request({"model": "claude-opus-4-5", "messages": history,
                                    "thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096})
    res = repair(req.messages, recs)
    actions = sanitize(req, res.is_verified, caps_for(req.model), Policy(), verbatim=res.verbatim)
    assert [a.kind for a in actions] == [ActionKind.KEPT_VERIFIED] * 6  # thinking kept on every turn
    # none is built: the open tool loop's first turn is seen to start with thinking from its JSON
    assert [m.raw_blocks is None for m in req.messages if m.role == "assistant"] == [False] * 6
    out = anthropic.encode_request(req)
    assert out["messages"] == history  # spliced through unchanged


async def test_key_order_does_not_matter_but_any_byte_does() -> None:
    store, scid, history = await recorded_history(3)
    reordered = copy.deepcopy(history)
    reordered[1]["content"] = [dict(reversed(list(b.items()))) for b in reordered[1]["content"]]
    assert replay_digest(reordered[1]["content"]) == replay_digest(history[1]["content"])
    trimmed = copy.deepcopy(history)
    trimmed[3]["content"][0]["thinking"] = trimmed[3]["content"][0]["thinking"].strip()  # a client trimmed it
    recs = records_from(await store.load(TENANT_A, LoadQuery(scid=scid)), scid)
    msgs = anthropic.decode_request({"model": "m", "messages": trimmed}).messages

    res = repair(msgs, recs)

    # the trimmed turn is not the recorded bytes: matched the slow way and restored exactly
    assert res.matched[3]._content is not None and res.changed
    assert msgs[3].content[0].thinking == answer(1)[0]["thinking"]
    assert res.matched[1]._content is None and res.matched[5]._content is None


async def test_turns_with_provider_data_record_no_digest() -> None:
    turn = Turn("r", "m", [anthropic.decode_block(b, "x") for b in answer(0)])
    plain = turn_record(turn, [], upstream="anthropic", dialect="anthropic")
    assert plain.replay_digest == replay_digest(answer(0))
    turn.provider = ProviderFields("openrouter", {"reasoning_details": [{"type": "reasoning.encrypted"}]})
    assert turn_record(turn, [], upstream="openai", dialect="openai").replay_digest == b""


async def test_a_restored_turn_goes_upstream_as_its_recorded_json_undecoded() -> None:
    """A mangled replay (thinking trimmed) restored from a plain record is then exactly that record, as a
    verbatim replay is: its recorded JSON is spliced upstream and its blocks are never built."""
    store, scid, history = await recorded_history(4)
    trimmed = copy.deepcopy(history)
    for m in trimmed:
        if m["role"] == "assistant":
            m["content"][0]["thinking"] = m["content"][0]["thinking"].strip()
    result = await store.load(TENANT_A, LoadQuery(scid=scid))
    recs = records_from(result, scid)
    req = anthropic.decode_request({"model": "claude-opus-4-5", "messages": trimmed, "max_tokens": 4096,
                                    "thinking": {"type": "enabled", "budget_tokens": 2048}})
    res = repair(req.messages, recs)
    actions = sanitize(req, res.is_verified, caps_for(req.model), Policy(), verbatim=res.verbatim)

    assistants = [m for m in req.messages if m.role == "assistant"]
    assert [a.kind for a in res.actions] == [ActionKind.RESTORED] * 4
    assert [a.kind for a in actions] == [ActionKind.KEPT_VERIFIED] * 4
    assert result.conversation is not None
    stored = [rec.content for rec in result.conversation.turns]
    # the record's own JSON, none built (the open loop's first turn is seen to start with thinking from it)
    assert [m.raw_blocks is rec for m, rec in zip(assistants, stored, strict=True)] == [True] * 4
    assert res.verbatim == [i for i, m in enumerate(req.messages) if m.role == "assistant"]
    assert [m.replay_digest for m in assistants] == [replay_digest(c) for c in stored]
    assert anthropic.encode_request(req)["messages"] == history  # exactly what the client once received
    assert stored == [answer(i) for i in range(4)]  # the records were not changed on the way


async def test_a_restored_turn_without_a_digest_is_restored_as_blocks() -> None:
    """Provider data rides with the turn (no replay digest): its stored form is not the client's, so the
    turn is restored as canonical blocks, not as recorded JSON."""
    store = MemoryStore()
    await store.start()
    scid = new_scid()
    turn = Turn("msg_p", "m", [anthropic.decode_block(b, "x") for b in answer(0)],
                provider=ProviderFields("openrouter", {"reasoning_details": [{"type": "reasoning.encrypted"}]}))
    first = anthropic.decode_request({"model": "m", "messages": [{"role": "user", "content": "go"}]}).messages
    await store.record(TENANT_A, TurnWrite(turn_record(turn, first, upstream="openai", dialect="openai"),
                                           scid=scid, expected_position=0))
    trimmed = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": [{**answer(0)[0], "thinking": "step 0:"}, *answer(0)[1:]]}]
    msgs = anthropic.decode_request({"model": "m", "messages": trimmed}).messages
    res = repair(msgs, records_from(await store.load(TENANT_A, LoadQuery(scid=scid)), scid))
    assert [a.kind for a in res.actions] == [ActionKind.RESTORED]
    assert msgs[1].raw_blocks is None and res.verbatim == []
    assert msgs[1].content[0].thinking == answer(0)[0]["thinking"] and msgs[1].provider == turn.provider

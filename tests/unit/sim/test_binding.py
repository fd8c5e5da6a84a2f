"""Thinking-block binding on the bound (Claude 5.x) models: protocols.md 1.8, 1.9 and rule 15.

The prefix check (with its non-differences), the chain (front drops allowed, middle drops not), the
errors with and without the beta header, ``drop_block`` and ``input_transformations`` (JSON and SSE),
model binding, the adaptive-only rule and the ``block_binding`` extra-inputs 400."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from tests.support.sim.helpers import (
    BINDING_BETA,
    BOUND_400,
    BOUND_MODEL,
    CLOCK_TOOL,
    NEEDS_BETA,
    SYSTEM_CHANGED,
    WEATHER_TOOL,
    answer,
    events_of,
    history,
    post,
    rejection,
    run_loop,
)
from thinkgate_sim.app import SimConfig, create_sim_app
from thinkgate_sim.binding import DEFAULT_BOUND_MODELS, prefix_of
from thinkgate_sim.signing import Minter

BOUND = BOUND_MODEL
BETA = {"anthropic-beta": BINDING_BETA}
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
WEATHER, CLOCK = WEATHER_TOOL, CLOCK_TOOL


def bound_request(text: str, *, model: str = BOUND, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": 4096, "thinking": {"type": "adaptive"},
                            "system": "You are a careful assistant.", "tools": [WEATHER, CLOCK],
                            "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return body


def thinking_at(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [(i, j) for i, m in enumerate(body["messages"]) if m["role"] == "assistant"
            for j, b in enumerate(m["content"]) if b["type"] in ("thinking", "redacted_thinking")]


async def two_turns(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Turn 1 (one tool round and a final answer), then turn 2 up to its first tool results:
    thinking blocks at messages 1, 3 and 5."""
    body, replies = await run_loop(client, bound_request("plan a trip [[sim:tools=1]]"), headers)
    body["messages"].append({"role": "assistant", "content": replies[-1]["content"]})
    body["messages"].append({"role": "user", "content": "and the next day?"})
    body = await history(client, body, 1, headers)
    assert thinking_at(body) == [(1, 0), (3, 0), (5, 0)]
    return body


# ------------------------------------------------------------------ the prefix check

async def test_faithful_client_passes_every_round(client: httpx.AsyncClient) -> None:
    _, replies = await run_loop(client, bound_request("q [[sim:tools=3]] [[sim:redacted]]"))
    assert len(replies) == 4 and all(r["content"][0]["type"] == "thinking" for r in replies)
    assert "input_transformations" not in replies[-1]  # without the beta nothing is reported
    minter = Minter(SimConfig().secret)
    for r in replies:  # and every block it replayed was bound: producer and prefix record signed in
        info = minter.inspect_thinking(r["content"][0]["thinking"], r["content"][0]["signature"])
        assert info is not None and info.producer == BOUND and info.binding is not None


async def test_changed_system_prompt_is_the_binding_400(client: httpx.AsyncClient) -> None:
    body = await history(client, bound_request("q [[sim:tools=2]]"), 1)
    body["system"] = "You are a careful assistant. It is 12:01."
    assert await rejection(client, body) == (
        400, "invalid_request_error", BOUND_400.format(i=1, j=0) + NEEDS_BETA + SYSTEM_CHANGED)
    # with the beta header the sentence about the header goes; the setting is still "error" by default
    assert (await rejection(client, body, BETA))[2] == BOUND_400.format(i=1, j=0) + SYSTEM_CHANGED
    errored = copy.deepcopy(body)
    errored["thinking"] = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}}
    assert (await rejection(client, errored, BETA))[2] == BOUND_400.format(i=1, j=0) + SYSTEM_CHANGED


async def test_added_tool_is_the_binding_400(client: httpx.AsyncClient) -> None:
    body = await history(client, bound_request("q [[sim:tools=2]]", tools=[WEATHER]), 1)
    body["tools"] = [WEATHER, CLOCK]
    assert await rejection(client, body) == (400, "invalid_request_error", BOUND_400.format(i=1, j=0) + NEEDS_BETA)


async def test_edited_earlier_message_fails_the_blocks_after_it(client: httpx.AsyncClient) -> None:
    body = await two_turns(client)
    body["messages"][4]["content"] = "and the day after?"  # before the block at 5, after those at 1 and 3
    assert (await rejection(client, body))[2] == BOUND_400.format(i=5, j=0) + NEEDS_BETA
    body = await two_turns(client)
    body["messages"][2]["content"][0]["content"] = "a shorter result"  # before the blocks at 3 and 5
    assert (await rejection(client, body))[2] == BOUND_400.format(i=3, j=0) + NEEDS_BETA


async def test_documented_non_differences_pass(client: httpx.AsyncClient) -> None:
    deferred = {**CLOCK, "name": "search_docs", "defer_loading": True}
    body = await history(client, bound_request("q [[sim:tools=2]]  "), 1)
    body["system"] = [{"type": "text", "text": "  You are a careful assistant.\n",  # string -> one text block
                       "cache_control": {"type": "ephemeral"}}]
    body["tools"] = [{**CLOCK, "cache_control": {"type": "ephemeral"}}, WEATHER, deferred]  # order, marker, deferred
    body["messages"][0]["content"] = [{"type": "text", "text": "\nq [[sim:tools=2]]",
                                       "cache_control": {"type": "ephemeral"}}]
    body["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    reply = await answer(client, body)
    assert reply["content"][0]["type"] == "thinking"
    body["system"][0]["text"] = "You are a careless assistant."  # a real difference still fails
    assert (await rejection(client, body))[2] == BOUND_400.format(i=1, j=0) + NEEDS_BETA + SYSTEM_CHANGED


async def test_a_referenced_deferred_tool_is_part_of_the_prefix(client: httpx.AsyncClient) -> None:
    deferred = {**WEATHER, "defer_loading": True}  # the sim calls the first tool: get_weather
    body = await history(client, bound_request("q [[sim:tools=3]]", tools=[deferred, CLOCK]), 2)
    assert body["messages"][1]["content"][-1]["name"] == "get_weather"
    body["tools"] = [{**deferred, "description": "changed"}, CLOCK]
    # the block at 1 was minted before any message referenced the deferred tool; the one at 3 after
    assert (await rejection(client, body))[2] == BOUND_400.format(i=3, j=0) + NEEDS_BETA


# ------------------------------------------------------------------ the chain

async def test_blocks_may_go_from_the_front_not_from_the_middle(client: httpx.AsyncClient) -> None:
    body = await two_turns(client)
    front = copy.deepcopy(body)
    for i in (1, 3):
        front["messages"][i]["content"] = [b for b in front["messages"][i]["content"] if b["type"] != "thinking"]
    resp = await post(client, front)
    assert resp.status_code == 200, resp.text
    middle = copy.deepcopy(body)
    middle["messages"][3]["content"] = [b for b in middle["messages"][3]["content"] if b["type"] != "thinking"]
    assert (await rejection(client, middle))[2] == BOUND_400.format(i=5, j=0) + NEEDS_BETA
    moved = copy.deepcopy(body)
    b1, b3 = moved["messages"][1]["content"][0], moved["messages"][3]["content"][0]
    moved["messages"][1]["content"][0], moved["messages"][3]["content"][0] = b3, b1
    assert (await rejection(client, moved))[2] == BOUND_400.format(i=1, j=0) + NEEDS_BETA


async def test_tampered_block_is_the_plain_400_even_with_drop_block(client: httpx.AsyncClient) -> None:
    body = await two_turns(client)
    body["thinking"] = DROP
    body["messages"][2]["content"][0]["content"] = "rewritten"  # 3 and 5 fail the prefix check: droppable
    assert (await post(client, body, BETA)).status_code == 200
    body["messages"][3]["content"][0]["thinking"] += " "  # a tampered block is not
    assert await rejection(client, body, BETA) == (
        400, "invalid_request_error", "messages.3.content.0: Invalid `signature` in `thinking` block")


# ------------------------------------------------------------------ drop_block

async def test_drop_block_drops_that_block_and_every_later_one(client: httpx.AsyncClient) -> None:
    body = await two_turns(client, BETA)
    body["messages"][2]["content"][0]["content"] = "rewritten by the client"
    body["thinking"] = DROP
    reply = await answer(client, body, BETA)
    assert reply["input_transformations"] == [
        {"type": "thinking_dropped", "reason": "prefix_binding_mismatch", "path": "messages.3.content.0"},
        {"type": "thinking_dropped", "reason": "prefix_binding_mismatch", "path": "messages.5.content.0"}]
    assert reply["content"][0]["type"] == "thinking"
    # the same in a stream: the array is final on message_start's message
    events = events_of((await post(client, {**body, "stream": True}, BETA)).content)
    start = next(data for name, data in events if name == "message_start")
    assert start["message"]["input_transformations"] == reply["input_transformations"]


async def test_drop_block_continues_the_conversation(client: httpx.AsyncClient) -> None:
    """After a drop the new block chains to the last block the model saw, so the client's next
    request (still carrying the stale blocks, still with drop_block) drops only those."""
    body = await history(client, bound_request("q [[sim:tools=3]]", thinking=DROP), 1, BETA)
    body["system"] = "You are a careful assistant. It is 12:01."
    reply = await answer(client, body, BETA)
    assert [e["path"] for e in reply["input_transformations"]] == ["messages.1.content.0"]


async def test_beta_header_alone_reports_an_empty_array(client: httpx.AsyncClient) -> None:
    reply = await answer(client, bound_request("q"), BETA)
    assert reply["input_transformations"] == []


async def test_count_tokens_answers_the_same_400(client: httpx.AsyncClient) -> None:
    body = await history(client, bound_request("q [[sim:tools=2]]"), 1)
    del body["max_tokens"]  # not a count_tokens field
    resp = await client.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": "sk-test"})
    assert resp.status_code == 200 and resp.json()["input_tokens"] > 0
    body["system"] = "changed"
    resp = await client.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": "sk-test"})
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == BOUND_400.format(i=1, j=0) + NEEDS_BETA + SYSTEM_CHANGED


# ------------------------------------------------------------------ model binding

async def test_blocks_another_model_cannot_read_are_dropped_silently(client: httpx.AsyncClient) -> None:
    body = await history(client, bound_request("q [[sim:tools=2]]", model="claude-fable-5-1"), 1)
    body["model"] = BOUND  # Opus 5.5 does not read Fable blocks
    reply = await answer(client, body)
    assert reply["content"][0]["type"] == "thinking" and "input_transformations" not in reply
    reply = await answer(client, body, BETA)
    assert reply["input_transformations"] == [
        {"type": "thinking_dropped", "reason": "model_binding_mismatch", "path": "messages.1.content.0"}]
    older = await history(client, bound_request("q [[sim:tools=2]]", model="claude-opus-4-5",
                                                thinking={"type": "enabled", "budget_tokens": 2048}), 1)
    older["model"], older["thinking"] = "claude-fable-5-1", {"type": "adaptive"}  # an older model's block
    assert (await post(client, older)).status_code == 200
    older["messages"][1]["content"][0]["signature"] = "EqQBforged"  # a forged one is not dropped
    assert (await rejection(client, older))[2] == "messages.1.content.0: Invalid `signature` in `thinking` block"


async def test_opus_5_5_reads_earlier_blocks_which_have_no_prefix_record(client: httpx.AsyncClient) -> None:
    """1.9: Opus 5.5 reads earlier Opus/Sonnet/Haiku blocks; with no prefix record they fail the prefix check."""
    older = await history(client, bound_request("q [[sim:tools=2]]", model="claude-opus-4-5",
                                                thinking={"type": "enabled", "budget_tokens": 2048}), 1)
    older["model"], older["thinking"] = BOUND, {"type": "adaptive"}
    assert (await rejection(client, older))[2] == BOUND_400.format(i=1, j=0) + NEEDS_BETA
    older["thinking"] = DROP
    assert (await answer(client, older, BETA))["input_transformations"] == [
        {"type": "thinking_dropped", "reason": "prefix_binding_mismatch", "path": "messages.1.content.0"}]


async def test_blocks_a_model_reads_are_prefix_checked(client: httpx.AsyncClient) -> None:
    body = await history(client, bound_request("q [[sim:tools=2]]", model="claude-sonnet-5-5"), 1)
    body["model"] = BOUND  # Opus 5.5 reads Sonnet 5.5 blocks
    assert (await post(client, body)).status_code == 200
    body["system"] = "changed"
    assert (await rejection(client, body))[2] == BOUND_400.format(i=1, j=0) + NEEDS_BETA + SYSTEM_CHANGED


async def test_unbound_models_are_unchanged(client: httpx.AsyncClient) -> None:
    body = await history(client, bound_request("q [[sim:tools=2]]", model="claude-opus-4-5",
                                               thinking={"type": "enabled", "budget_tokens": 2048}), 1)
    body["system"] = "changed"
    body["tools"] = [CLOCK]
    assert (await post(client, body)).status_code == 200


# ------------------------------------------------------------------ request parameters

async def test_bound_models_take_only_adaptive_thinking(client: httpx.AsyncClient) -> None:
    for ttype, extra in (("enabled", {"budget_tokens": 2048}), ("disabled", {})):
        assert await rejection(client, bound_request("q", thinking={"type": ttype, **extra})) == (
            400, "invalid_request_error",
            f"\"thinking.type.{ttype}\" is not supported for this model. Use \"thinking.type.adaptive\" and "
            "\"output_config.effort\" to control thinking behavior.")
    no_param = bound_request("q [[sim:tools=1]]")
    del no_param["thinking"]
    assert (await answer(client, no_param))["content"][0]["type"] == "thinking"  # adaptive by default


async def test_block_binding_needs_the_beta_and_adaptive(client: httpx.AsyncClient) -> None:
    assert await rejection(client, bound_request("q", thinking=DROP)) == (
        400, "invalid_request_error", "thinking.adaptive.block_binding: Extra inputs are not permitted")
    enabled = {"type": "enabled", "budget_tokens": 2048, "block_binding": {"prefix_mismatch_behavior": "error"}}
    assert (await rejection(client, bound_request("q", thinking=enabled), BETA))[2] == (
        "thinking.enabled.block_binding: Extra inputs are not permitted")
    bad = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "ignore"}}
    assert (await rejection(client, bound_request("q", thinking=bad), BETA))[2] == (
        "thinking.adaptive.block_binding.prefix_mismatch_behavior: Input should be 'error' or 'drop_block'")
    # a model that does not run the check accepts the object beside enabled thinking (with the beta)
    unbound = bound_request("q", model="claude-opus-4-5", thinking=enabled)
    assert (await post(client, unbound, BETA)).status_code == 200
    assert (await rejection(client, unbound))[2] == "thinking.enabled.block_binding: Extra inputs are not permitted"


# ------------------------------------------------------------------ configuration

def test_sim_command_takes_the_bound_model_list(monkeypatch: pytest.MonkeyPatch) -> None:
    import thinkgate_sim.app as sim_app
    from gateway.app.cli import build_parser

    seen: list[SimConfig] = []
    monkeypatch.setattr(sim_app, "run_sim", lambda host, port, config: seen.append(config))
    monkeypatch.setattr("logging.basicConfig", lambda **kw: None)
    for argv, models in ((["sim"], DEFAULT_BOUND_MODELS), (["sim", "--bound-models", ""], ()),
                         (["sim", "--bound-models", "claude-opus-5-5, claude-x-9"], ("claude-opus-5-5", "claude-x-9"))):
        args = build_parser().parse_args(argv)
        assert args.func(args) == 0
        config = seen.pop()
        assert config.bound_models == models and config.binding_enforced
    args = build_parser().parse_args(["sim", "--binding-not-enforced"])
    args.func(args)
    assert not seen.pop().binding_enforced
    assert BOUND in DEFAULT_BOUND_MODELS and "claude-opus-4-5" not in DEFAULT_BOUND_MODELS


async def test_an_empty_bound_list_turns_binding_off() -> None:
    app = create_sim_app(SimConfig(bound_models=()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
        body = await history(c, bound_request("q [[sim:tools=2]]"), 1)
        body["system"] = "changed"
        assert (await post(c, body)).status_code == 200


async def test_an_account_that_does_not_enforce_the_prefix_check() -> None:
    """1.9: the mismatch is recorded, acted on only when the request sets prefix_mismatch_behavior."""
    app = create_sim_app(SimConfig(binding_enforced=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
        body = await two_turns(c)
        body["messages"][2]["content"][0]["content"] = "rewritten by the client"
        assert "input_transformations" not in await answer(c, body)  # shown to the model all the same
        assert (await answer(c, body, BETA))["input_transformations"] == [
            {"type": "thinking_mismatch_allowed", "reason": "prefix_binding_mismatch",
             "path": f"messages.{i}.content.0"} for i in (3, 5)]
        body["thinking"] = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}}  # opts in
        assert (await rejection(c, body, BETA))[2] == BOUND_400.format(i=3, j=0)
        body["thinking"] = DROP
        assert [e["reason"] for e in (await answer(c, body, BETA))["input_transformations"]] == [
            "prefix_binding_mismatch"] * 2
        body["messages"][3]["content"][0]["thinking"] += " "  # tampering is never allowed
        body["thinking"] = {"type": "adaptive"}
        assert (await rejection(c, body))[2] == "messages.3.content.0: Invalid `signature` in `thinking` block"


async def test_a_prefix_deeper_than_the_json_encoder_writes_is_still_bound(client: httpx.AsyncClient) -> None:
    """Valid JSON nested deeper than orjson writes (255 levels) gets an answer, not a 500, and its digest
    still changes with its content."""
    def deep(leaf: str) -> Any:
        value: Any = leaf
        for _ in range(400):
            value = [value]
        return value

    body = bound_request("q")
    body["messages"][0]["content"] = [{"type": "text", "text": "q", "extra": deep("a")}]
    resp = await client.post("/v1/messages", content=json.dumps(body), headers={"x-api-key": "sk-test"})
    assert resp.status_code == 200 and resp.json()["content"][0]["type"] == "thinking"
    other = copy.deepcopy(body)
    other["messages"][0]["content"][0]["extra"] = deep("b")
    reply = {"role": "assistant", "content": []}
    assert prefix_of({**body, "messages": [*body["messages"], reply]}, 1, 0)[1].messages != \
        prefix_of({**other, "messages": [*other["messages"], reply]}, 1, 0)[1].messages


async def test_a_tool_schema_too_deep_to_encode_is_bound_like_any_other(client: httpx.AsyncClient) -> None:
    """A tool schema nested 261 levels (valid JSON, deeper than orjson writes) is digested like any tool: the loop
    runs, and adding such a tool later is the binding 400, never the simulator's 500."""
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(130):  # 261 levels: over the 255 orjson writes
        deep = {"type": "object", "properties": {"a": deep}}
    nested = {"name": "nested", "description": "deep", "input_schema": deep}
    _, replies = await run_loop(client, bound_request("q [[sim:tools=2]]", tools=[WEATHER, nested]))
    assert len(replies) == 3 and all(r["content"][0]["type"] == "thinking" for r in replies)
    body = await history(client, bound_request("q [[sim:tools=2]]"), 1)
    body["tools"] = [WEATHER, CLOCK, nested]
    assert await rejection(client, body) == (400, "invalid_request_error", BOUND_400.format(i=1, j=0) + NEEDS_BETA)

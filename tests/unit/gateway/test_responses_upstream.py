"""The OpenAI Responses upstream dialect (``protocols.responses_upstream`` and its stream translator), pure: output
items the strict simulator mints -> canonical blocks -> input items, reasoning items byte-exact and followed by the
item they preceded, with its id; degraded (left out, never forged) where that cannot hold."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn
from gateway.dialects.canonical import (
    Message,
    ProviderSig,
    Request,
    TextBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.responses.upstream import (
    ResponsesTranslator,
    assistant_items,
    decode_items,
    decode_turn,
    encode_items,
    encode_request,
)
from gateway.dialects.routing import ModelCaps, Router, parse_routes
from thinkgate_sim.responses import Memory, ResponsesMinter, check, plan
from thinkgate_sim.responses_stream import events

ORIGIN = "responses/gpt-5"
CAPS = ModelCaps("responses", kind="responses", flavor="responses")
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object",
                                                                   "properties": {"city": {"type": "string"}}}}]


def _answer(prompt: str, memory: Memory, minter: ResponsesMinter, items: list[dict[str, Any]] | None = None,
            **extra: Any) -> dict[str, Any]:
    body = {"model": "gpt-5", "input": items or [{"role": "user", "content": prompt}], "tools": TOOLS,
            "store": False, "reasoning": {"effort": "low", "summary": "auto"}, **extra}
    checked = check(body, minter, memory)
    assert isinstance(checked, list), checked
    return plan(body, checked, minter, memory)


def test_reasoning_items_go_back_exactly_as_received_followed_by_the_call_they_preceded() -> None:
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer("weather? [[sim:tools=1]] [[sim:parallel=2]]", memory, minter)
    blocks = decode_items(response["output"], ORIGIN)
    assert [type(b) for b in blocks] == [ThoughtBlock, ToolUseBlock, ToolUseBlock]
    thought = blocks[0]
    assert isinstance(thought, ThoughtBlock) and thought.text == response["output"][0]["summary"][0]["text"]
    items = assistant_items(blocks)
    rs, fc1, fc2 = response["output"]
    assert items[0] == rs and orjson.dumps(items[0]) == orjson.dumps(rs)  # byte-exact, key order included
    assert items[1]["id"] == fc1["id"] and items[1]["call_id"] == fc1["call_id"]
    assert "id" not in items[2] and items[2]["call_id"] == fc2["call_id"]  # only the follower carries its id
    # and the strict simulator takes the replay (a reasoning item it minted, unchanged, then its call)
    history = [{"role": "user", "content": "weather? [[sim:tools=1]] [[sim:parallel=2]]"}, *items,
               *({"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in (fc1, fc2))]
    assert isinstance(check({"model": "gpt-5", "input": history, "store": False}, minter, memory), list)


def test_the_simulator_refuses_reasoning_minted_for_another_organization_or_model() -> None:
    """``responses-1``: the API binds a reasoning item's encrypted_content to the organization (here: the bearer
    token) and model family that minted it; replayed by another, or to another family, it does not verify."""
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    prompt = "weather? [[sim:tools=1]]"
    body = {"model": "gpt-5", "input": [{"role": "user", "content": prompt}], "tools": TOOLS, "store": False,
            "reasoning": {"effort": "low", "summary": "auto"}}
    checked = check(body, minter, memory, "org-a")
    assert isinstance(checked, list)
    rs, fc = plan(body, checked, minter, memory, org="org-a")["output"]
    replay = {**body, "input": [*body["input"], rs, fc,
                                {"type": "function_call_output", "call_id": fc["call_id"], "output": "sunny"}]}
    assert isinstance(check(replay, minter, memory, "org-a"), list)
    for other, org in ((replay, "org-b"), ({**replay, "model": "o3"}, "org-a")):
        refused = check(other, minter, memory, org)
        assert isinstance(refused, tuple) and refused[0] == 400 and refused[2] == "responses-1", refused
        assert refused[1]["error"]["code"] == "invalid_encrypted_content"
        blob = rs["encrypted_content"]
        message = f"The encrypted content {blob[:4]}...{blob[-4:]} could not be verified."
        assert refused[1]["error"]["message"] == message


def test_a_reasoning_item_whose_follower_changed_is_left_out_and_no_id_is_sent() -> None:
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer("weather? [[sim:tools=1]]", memory, minter)
    thought, call = decode_items(response["output"], ORIGIN)
    assert isinstance(call, ToolUseBlock)
    other = ToolUseBlock("call_someone_else", call.name, call.input)
    items = assistant_items([thought, other])
    assert items == [{"type": "function_call", "call_id": "call_someone_else", "name": call.name,
                      "arguments": orjson.dumps(call.input).decode()}]
    assert assistant_items([thought, TextBlock("text instead")])[0]["type"] == "message"
    assert len(assistant_items([thought, TextBlock("text instead")])) == 1


def test_thought_without_a_recorded_item_is_never_sent() -> None:
    unrecorded = ThoughtBlock("the client's own reasoning text", ORIGIN)
    forged = ThoughtBlock("x", ORIGIN, ProviderSig(ORIGIN, "not an item"))
    items = assistant_items([unrecorded, forged, TextBlock("answer")])
    assert items == [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "answer"}]}]


def test_a_recorded_item_without_encrypted_content_is_not_sent_to_be_not_found() -> None:
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer("weather? [[sim:tools=1]]", memory, minter)
    rs, fc = response["output"]
    bare = {k: v for k, v in rs.items() if k != "encrypted_content"}  # an upstream that ignored ``include``
    items = assistant_items(decode_items([bare, fc], ORIGIN))
    assert [i["type"] for i in items] == ["function_call"] and "id" not in items[0]


def test_final_text_turn_carries_the_message_id_after_its_reasoning() -> None:
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer("hello", memory, minter)
    rs, msg = response["output"]
    items = assistant_items(decode_items(response["output"], ORIGIN))
    assert items[0] == rs and items[1]["id"] == msg["id"] and items[1]["content"][0]["text"] == \
        msg["content"][0]["text"]


def test_encode_request_keeps_no_upstream_state_and_asks_for_encrypted_reasoning() -> None:
    req = Request("gpt-5", [Message("user", [TextBlock("hi")], content_was_string=True),
                            Message("assistant", [ToolUseBlock("call_1", "get_weather", {"city": "Paris"})]),
                            Message("user", [ToolResultBlock("call_1", "sunny"), TextBlock("and now?")])],
                  thinking={"type": "enabled", "budget_tokens": 2048}, stream=True,
                  params={"system": "be brief", "max_tokens": 2000, "metadata": {"user_id": "u-1"},
                          "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
                          "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
                          "tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
    body = encode_request(req, CAPS)
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"] and body["stream"] is True
    assert body["instructions"] == "be brief" and body["max_output_tokens"] == 2000
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["safety_identifier"] == "u-1"
    assert body["text"] == {"format": {"type": "json_schema", "name": "response", "schema": {"type": "object"}}}
    assert body["tools"] == [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert body["input"] == [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]}]
    assert encode_items(req.messages) == body["input"]


def test_chat_parameters_reach_a_responses_upstream_or_are_refused_by_name() -> None:
    from gateway.dialects.openai_chat.codec import decode_request
    from gateway.errors import ClientError

    chat = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "minimal",
            "max_completion_tokens": 300, "user": "u-2", "parallel_tool_calls": False,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}
    body = encode_request(decode_request(chat, provider_fields=True, route="responses"), CAPS)
    assert body["reasoning"]["effort"] == "minimal" and body["max_output_tokens"] == 300
    assert body["safety_identifier"] == "u-2" and body["parallel_tool_calls"] is False
    assert body["text"]["format"]["schema"] == {"type": "object"}
    with pytest.raises(ClientError) as refused:
        decode_request({**chat, "stop": "END", "seed": 1}, provider_fields=True, route="responses")
    assert "(an OpenAI Responses upstream): stop, seed" in refused.value.message


@pytest.mark.parametrize("prompt", ["weather? [[sim:tools=1]] [[sim:parallel=2]]", "just talk"])
def test_the_stream_translates_to_the_same_turn_as_the_body(prompt: str) -> None:
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer(prompt, memory, minter)
    translator = ResponsesTranslator(origin=ORIGIN, model="gpt-5")
    snap = Snapshot()
    for event in events(copy.deepcopy(response)):
        for canonical in translator.feed(orjson.dumps(event).decode()):
            accumulate(canonical, snap)
    streamed = finished_turn(snap)
    assert streamed is not None
    whole = decode_turn(response, origin=ORIGIN, model="gpt-5")
    assert streamed.content == whole.content and streamed.stop_reason == whole.stop_reason
    assert streamed.id == response["id"]


def test_a_failed_stream_is_an_error_event_not_a_short_answer() -> None:
    translator = ResponsesTranslator(origin=ORIGIN, model="gpt-5")
    translator.feed(orjson.dumps({"type": "response.created", "response": {"id": "resp_1"}}).decode())
    out = translator.feed(orjson.dumps({"type": "response.failed", "response": {
        "id": "resp_1", "error": {"code": "server_error", "message": "boom"}}}).decode())
    assert out == [{"type": "error", "error": {"type": "server_error", "message": "boom"}}]
    assert translator.end() == []


def test_routes_name_a_responses_upstream() -> None:
    routes = parse_routes("gpt-5=responses@https://api.openai.com/v1")
    router = Router(routes)
    caps = router.caps_for("gpt-5-codex")
    assert (caps.upstream, caps.kind) == ("responses", "responses")
    assert router.named_upstreams()["responses"].base_url == "https://api.openai.com/v1"
    assert router.caps_for("gpt-4o").kind == "openai"


def test_reasoning_summary_streams_as_it_comes_and_its_item_completes_the_block() -> None:
    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer("weather? [[sim:tools=1]]", memory, minter)
    translator = ResponsesTranslator(origin=ORIGIN, model="gpt-5")
    first_thinking_at = provider_at = None
    for event in events(copy.deepcopy(response)):
        for out in translator.feed(orjson.dumps(event).decode()):
            delta = out.get("delta") or {}
            if delta.get("type") == "thinking_delta" and first_thinking_at is None:
                first_thinking_at = event["type"]
            if delta.get("type") == "provider_delta":
                provider_at = event["type"]
                assert delta["sig"].value["item"] == response["output"][0]
                assert delta["sig"].value["next"]["id"] == response["output"][1]["id"]
    assert first_thinking_at == "response.reasoning_summary_text.delta"  # live, not when the item is done
    assert provider_at == "response.output_item.added"  # once the item it preceded is known


def test_sanitize_drops_a_reasoning_item_parted_from_its_call_and_counts_it() -> None:
    from gateway.actions import ActionKind
    from gateway.pipeline.sanitize.core import Policy, sanitize

    memory, minter = Memory(), ResponsesMinter(b"s" * 32)
    response = _answer("weather? [[sim:tools=1]]", memory, minter)
    thought, call = decode_items(response["output"], ORIGIN)
    assert isinstance(call, ToolUseBlock)
    kept = Message("assistant", [thought, call])
    parted = Message("assistant", [thought, ToolUseBlock("call_renamed", call.name, call.input)])
    req = Request("gpt-5", [Message("user", [TextBlock("weather?")]), kept,
                            Message("user", [ToolResultBlock(call.id, "sunny")]), parted,
                            Message("user", [ToolResultBlock("call_renamed", "sunny")])])
    actions = sanitize(req, lambda b: False, CAPS, Policy())
    assert [(a.kind, a.message_index, a.detail) for a in actions if a.detail == "reasoning_unpaired"] == \
        [(ActionKind.DROPPED, 3, "reasoning_unpaired")]
    assert req.messages[1].content == [thought, call] and req.messages[3].content[0].id == "call_renamed"
    assert len(req.messages[3].content) == 1

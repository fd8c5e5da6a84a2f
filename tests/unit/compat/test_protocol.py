"""Pure pieces of the OpenAI-compatible upstream dialect: request encoding, answers, stream translation."""

from __future__ import annotations

import orjson

from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn
from gateway.dialects.canonical import (
    Message,
    ProviderFields,
    ProviderSig,
    Request,
    TextBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.openai_compat import wire as openai_compat
from gateway.dialects.openai_compat.wire import CompatTranslator
from gateway.dialects.routing import ModelCaps
from gateway.errors import upstream_error

ORIGIN = "openrouter/google/gemini-3-pro-preview"
DETAILS = [{"type": "reasoning.text", "text": "ab", "format": "google-gemini-v1", "index": 0},
           {"type": "reasoning.encrypted", "data": "D", "format": "google-gemini-v1", "index": 1}]


def test_tool_only_messages_are_sent_with_null_content_and_fields_as_received() -> None:
    msgs = [Message("user", [TextBlock("q")]),
            Message("assistant", [ThoughtBlock("ab", ORIGIN), ToolUseBlock("c1", "f", {"a": 1})],
                    provider=ProviderFields(ORIGIN, {"reasoning_details": DETAILS})),
            Message("user", [ToolResultBlock("c1", "r"), TextBlock("and?")])]
    req = Request("google/gemini-3-pro-preview", msgs, {"type": "enabled", "budget_tokens": 2048},
                  params={"system": "sys", "max_tokens": 100, "tools": [{"name": "f", "input_schema": {}}],
                          "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}, stream=True)
    body = openai_compat.encode_request(req, ModelCaps("openrouter", kind="openai", flavor="openrouter"))
    assert body["messages"] == [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}],
         "reasoning_details": DETAILS},
        {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "user", "content": "and?"}]
    assert body["reasoning"] == {"max_tokens": 2048} and body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False and body["stream_options"] == {"include_usage": True}


def test_answer_decoding_keeps_the_message_level_fields() -> None:
    body = {"id": "x", "model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning": "ab", "reasoning_details": DETAILS,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"},
                        "extra_content": {"google": {"thought_signature": "S"}}}]}}]}
    turn = openai_compat.decode_turn(body, origin=ORIGIN, model="m")
    assert turn.content == [ThoughtBlock("ab", ORIGIN), ToolUseBlock("c1", "f", {}, sig=ProviderSig(ORIGIN, "S"))]
    assert turn.provider == ProviderFields(ORIGIN, {"reasoning_details": DETAILS})
    assert turn.stop_reason == "tool_use"


def _stream(chunks: list[object]) -> Turn:
    t = CompatTranslator(origin=ORIGIN, model="m")
    snap = Snapshot()
    for c in chunks:
        for ev in t.feed(c if isinstance(c, str) else orjson.dumps(c).decode()):
            accumulate(ev, snap)
    for ev in t.end():
        accumulate(ev, snap)
    turn = finished_turn(snap)
    assert turn is not None
    return turn


def _delta(finish: str | None = None, **delta: object) -> dict[str, object]:
    return {"id": "x", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_stream_merges_reasoning_details_by_index_and_keeps_opaque_fields() -> None:
    turn = _stream([
        _delta(role="assistant", reasoning="a", reasoning_details=[{**DETAILS[0], "text": "a"}]),
        _delta(reasoning="b", reasoning_details=[{**DETAILS[0], "text": "b"}]),
        _delta(reasoning_details=[DETAILS[1]], reasoning_opaque="OP",
               tool_calls=[{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]),
        _delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a":'}}]),
        _delta(tool_calls=[{"index": 0, "function": {"arguments": "1}"}}]),
        _delta("tool_calls"), {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
        "[DONE]"])
    assert turn.content == [ThoughtBlock("ab", ORIGIN), ToolUseBlock("c1", "f", {"a": 1})]
    assert turn.provider == ProviderFields(ORIGIN, {"reasoning_opaque": "OP", "reasoning_details": DETAILS})
    assert turn.usage == {"input_tokens": 3, "output_tokens": 4} and turn.stop_reason == "tool_use"


def test_stream_without_finish_is_not_a_turn_and_errors_become_events() -> None:
    t = CompatTranslator(origin=ORIGIN, model="m")
    assert t.feed(orjson.dumps(_delta(content="hi")).decode())
    assert t.feed("[DONE]") == [] and t.end() == []
    err = CompatTranslator(origin=ORIGIN, model="m").feed('{"error": {"message": "nope", "type": "x"}}')
    assert err == [{"type": "error", "error": {"type": "x", "message": "nope"}}]


def test_openrouter_error_keeps_the_provider_cause() -> None:
    raw = b'{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"inner cause"}}}'
    err = upstream_error(400, raw)
    assert err.status == 400 and err.message == "Provider returned error: inner cause"

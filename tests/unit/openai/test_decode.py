"""OpenAI request bodies -> canonical requests (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.openai_chat.codec import decode_request
from gateway.errors import ClientError

MODEL = "claude-opus-4-5"
AWKWARD = "  Let me think.\r\n  Trailing spaces   \n\n\ncafé — 思考 🤔\r\n"
SIG = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=="


def body(*messages: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": list(messages), **params}


def wire(b: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic request the gateway would send."""
    return anthropic.encode_request(decode_request(b))


def test_tool_loop_history_becomes_anthropic_messages() -> None:
    req = decode_request(body(
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "reasoning_details": [{"type": "reasoning.text", "text": AWKWARD, "signature": SIG,
                                "format": "anthropic-claude-v1", "index": 0},
                               {"type": "reasoning.encrypted", "data": "opaque==", "format": "anthropic-claude-v1",
                                "index": 1}],
         "reasoning_content": AWKWARD,
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                        {"id": "toolu_2", "type": "function", "function": {"name": "get_weather",
                                                                            "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
        {"role": "user", "content": "and tomorrow?"},
    ))
    assert req.params["system"] == "Be brief."
    assert [m.role for m in req.messages] == ["user", "assistant", "user"]
    thinking, redacted, call1, call2 = req.messages[1].content
    assert thinking == ThinkingBlock(AWKWARD, SIG)  # byte-exact, no format/index leaking into the block
    assert redacted == RedactedThinkingBlock("opaque==")
    assert call1 == ToolUseBlock("toolu_1", "get_weather", {"city": "Paris"})
    assert call2 == ToolUseBlock("toolu_2", "get_weather", {})
    results = req.messages[2].content
    assert results[:2] == [ToolResultBlock("toolu_1", "sunny"),
                           ToolResultBlock("toolu_2", [{"type": "text", "text": "rain"}])]
    assert results[2] == TextBlock("and tomorrow?")  # a user message right after tool results joins them


@pytest.mark.parametrize("empty", [None, [], ""], ids=["null", "list", "string"])
def test_tool_only_assistant_content_may_be_null_empty_list_or_empty_string(empty: Any) -> None:
    req = decode_request(body({"role": "user", "content": "go"},
                              {"role": "assistant", "content": empty, "tool_calls": [
                                  {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                              {"role": "tool", "tool_call_id": "call_1", "content": "done"}))
    assert req.messages[1].content == [ToolUseBlock("call_1", "f", {})]


@pytest.mark.parametrize(("fields", "expected"), [
    ({"reasoning_content": AWKWARD}, [ThinkingBlock(AWKWARD, None)]),
    ({"reasoning": AWKWARD}, [ThinkingBlock(AWKWARD, None)]),
    ({"thinking": AWKWARD, "signature": SIG, "cot_id": "c1", "cot_summary": "s"}, [ThinkingBlock(AWKWARD, SIG)]),
    ({"reasoning_details": [{"type": "reasoning.text", "text": AWKWARD}]}, [ThinkingBlock(AWKWARD, None)]),
    ({"reasoning_details": [{"type": "reasoning.text", "text": "", "signature": SIG}]}, [ThinkingBlock("", SIG)]),
    ({"reasoning_details": [{"type": "reasoning.summary", "summary": "short"}]}, [ThinkingBlock("short", None)]),
    ({"reasoning_details": [{"type": "reasoning.encrypted", "data": "g==", "format": "google-gemini-v1"}]},
     [RedactedThinkingBlock("g==", {"format": "google-gemini-v1"})]),
    ({"reasoning_details": [], "reasoning_content": "fallback"}, [ThinkingBlock("fallback", None)]),
], ids=["reasoning_content", "reasoning", "vendor", "text_only_details", "empty_signed", "summary", "foreign",
        "empty_details"])
def test_reasoning_fields_on_replayed_assistant_messages(fields: dict[str, Any], expected: list[Any]) -> None:
    req = decode_request(body({"role": "user", "content": "q"}, {"role": "assistant", "content": "a", **fields}))
    assert req.messages[1].content == [*expected, TextBlock("a")]


def test_split_assistant_messages_merge_with_thinking_first() -> None:
    req = decode_request(body(
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me look.", "reasoning_details": [
            {"type": "reasoning.text", "text": "t", "signature": "s"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    ))
    assert [b.type for b in req.messages[1].content] == ["thinking", "text", "tool_use"]


def test_user_parts_images_files_and_anthropic_blocks() -> None:
    req = decode_request(body({"role": "user", "content": [
        {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"}},
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "from an Anthropic-minded client"},
    ]}))
    text, img, url, doc, result = req.messages[0].content
    assert text == TextBlock("look", {"cache_control": {"type": "ephemeral"}})
    assert img == OpaqueBlock({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                           "data": "iVBORw0K"}})
    assert url == OpaqueBlock({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}})
    assert doc.type == "document"
    assert result == ToolResultBlock("toolu_9", "from an Anthropic-minded client")


def test_parameters_map_to_anthropic() -> None:
    out = wire(body({"role": "developer", "content": [{"type": "text", "text": "A"}]},
                    {"role": "system", "content": "B"},
                    {"role": "user", "content": "hi"},
                    tools=[{"type": "function", "function": {"name": "f", "description": "d",
                                                             "parameters": {"type": "object"}}},
                           {"type": "function", "name": "g", "parameters": {"properties": {}}}],
                    tool_choice={"type": "function", "function": {"name": "f"}}, parallel_tool_calls=False,
                    temperature=0.2, top_p=0.9, stop="END", max_completion_tokens=1000, user="u-1",
                    stream=True, stream_options={"include_usage": True}))
    assert out == {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "max_tokens": 1000,
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}},
                  {"name": "g", "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        "temperature": 0.2, "top_p": 0.9, "stop_sequences": ["END"], "metadata": {"user_id": "u-1"},
    }
    surface = decode_request(body({"role": "user", "content": "hi"}, stream_options={"include_usage": True})).surface
    assert (surface.include_usage, surface.exclude_reasoning) == (True, False)


@pytest.mark.parametrize(("params", "thinking", "max_tokens"), [
    ({}, None, 8192),
    ({"reasoning_effort": "low"}, {"type": "enabled", "budget_tokens": 2048}, 8192 + 2048),
    ({"reasoning_effort": "high"}, {"type": "enabled", "budget_tokens": 16384}, 8192 + 16384),
    ({"reasoning_effort": "none"}, None, 8192),
    ({"reasoning": {"effort": "medium"}}, {"type": "enabled", "budget_tokens": 8192}, 16384),
    ({"reasoning": {"max_tokens": 3000}}, {"type": "enabled", "budget_tokens": 3000}, 11192),
    ({"reasoning": {"enabled": True}}, {"type": "enabled", "budget_tokens": 8192}, 16384),
    ({"reasoning": {"exclude": True}}, {"type": "enabled", "budget_tokens": 8192}, 16384),
    ({"reasoning": {"enabled": False}, "reasoning_effort": "high"}, None, 8192),
    ({"thinking": {"type": "enabled", "budget_tokens": 4000}, "reasoning_effort": "low"},
     {"type": "enabled", "budget_tokens": 4000}, 12192),
    ({"reasoning_effort": "low", "max_tokens": 500}, {"type": "enabled", "budget_tokens": 2048}, 500),
])
def test_reasoning_parameters(params: dict[str, Any], thinking: Any, max_tokens: int) -> None:
    req = decode_request(body({"role": "user", "content": "q"}, **params))
    assert req.thinking == thinking
    assert req.params["max_tokens"] == max_tokens


def test_adaptive_only_models_get_adaptive_thinking_with_effort() -> None:
    req = decode_request({"model": "claude-opus-4-7", "messages": [{"role": "user", "content": "q"}],
                          "reasoning_effort": "high"})
    assert req.thinking == {"type": "adaptive"} and req.params["output_config"] == {"effort": "high"}


@pytest.mark.parametrize(("choice", "expected"), [
    ("auto", {"type": "auto"}), ("none", {"type": "none"}), ("required", {"type": "any"}),
    ({"type": "function", "name": "f"}, {"type": "tool", "name": "f"}),
])
def test_tool_choice(choice: Any, expected: dict[str, Any]) -> None:
    req = decode_request(body({"role": "user", "content": "q"}, tool_choice=choice,
                              tools=[{"type": "function", "function": {"name": "f"}}]))
    assert req.params["tool_choice"] == expected


def test_invalid_tool_ids_are_mapped_the_same_on_both_sides() -> None:
    req = decode_request(body(
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "functions.f:0", "content": "r"}))
    assert req.messages[1].tool_use_ids() == req.messages[2].tool_result_ids() == ["functions_f_0"]


def test_responses_shaped_body_is_translated() -> None:
    req = decode_request({
        "model": MODEL, "instructions": "You are Cursor.", "stream": True, "max_output_tokens": 3000,
        "reasoning": {"effort": "low", "summary": "auto"}, "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "function", "name": "read_file", "description": "Read",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}, "strict": False}],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "open a.txt"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should read it"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
            {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path":"a.txt"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "hello"},
        ]})
    assert req.params["system"] == "You are Cursor." and req.params["max_tokens"] == 3000
    assert req.params["tools"] == [{"name": "read_file", "description": "Read", "input_schema": {
        "type": "object", "properties": {"path": {"type": "string"}}}}]
    assert req.thinking == {"type": "enabled", "budget_tokens": 2048} and req.stream is True
    user, assistant, results = req.messages
    assert user.content == [TextBlock("open a.txt")]
    assert assistant.content == [ThinkingBlock("I should read it", None), TextBlock("Reading."),
                                 ToolUseBlock("call_1", "read_file", {"path": "a.txt"})]
    assert results.content == [ToolResultBlock("call_1", "hello")]


@pytest.mark.parametrize(("raw", "needle"), [
    ([], "JSON object"),
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    (body(), "messages"),
    ({"model": MODEL, "messages": "hi"}, "messages"),
    (body({"role": "user", "content": "x"}, stream="yes"), "stream"),
    (body({"role": "user", "content": "x"}, n=2), "n=1"),
    (body({"role": "wizard", "content": "x"}), "messages.0.role"),
    (body({"role": "user"}), "messages.0.content"),
    (body({"role": "user", "content": [{"type": "input_audio"}]}), "messages.0.content.0.type"),
    (body({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}), "image_url"),
    (body({"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}),
     "messages.1.tool_calls.0.function.arguments: Input should be valid JSON"),
    (body({"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}), "JSON object"),
    (body({"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}), "messages.1.tool_calls.0.id"),
    (body({"role": "tool", "content": "r"}), "messages.0.tool_call_id"),
    (body({"role": "user", "content": "q"}, tools=[{"type": "web_search_preview"}]), "tools.0.type"),
    (body({"role": "user", "content": "q"}, reasoning_effort="max"), "reasoning_effort"),
    (body({"role": "user", "content": "q"}, max_tokens=0), "max_tokens"),
    (body({"role": "user", "content": "q"}, stop=[1]), "stop"),
    (body({"role": "user", "content": "q"}, temperature="hot"), "temperature"),
    (body({"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                                            "reasoning_details": [{"type": "reasoning.text", "text": 5}]}),
     "reasoning_details.0"),
    ({"model": MODEL, "input": 5}, "input"),
    ({"model": MODEL, "input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
    ({"model": MODEL, "input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
])
def test_bad_input_is_a_400_naming_the_problem(raw: Any, needle: str) -> None:
    with pytest.raises(ClientError) as info:
        decode_request(raw)
    assert info.value.status == 400 and needle in info.value.message


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["role", "content", "type", "text", "tool_calls", "function", "id",
                                          "arguments", "name", "tool_call_id", "reasoning_details", "image_url",
                                          "url", "signature", "data", "thinking"]), inner, max_size=4),
                     max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(messages=st.none() | st.lists(_json, max_size=4), extra=st.dictionaries(
    st.sampled_from(["tools", "tool_choice", "reasoning", "reasoning_effort", "stop", "max_tokens", "input",
                     "instructions", "thinking", "stream", "n", "temperature", "parallel_tool_calls"]),
    _json, max_size=3))
def test_any_body_decodes_or_is_a_client_error(messages: list[Any] | None, extra: dict[str, Any]) -> None:
    raw = {"model": MODEL, **extra} if messages is None else {"model": MODEL, "messages": messages, **extra}
    try:
        req = decode_request(raw)
    except ClientError:
        return
    anthropic.encode_request(req)  # whatever decodes also encodes

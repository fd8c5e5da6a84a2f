"""Canonical turns -> chat.completion, and back through a client's replay (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.openai_chat.codec import decode_request, encode_completion

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
AWKWARD = [
    "  Let me think.\r\n  Trailing spaces   \n\n\ncafé — 思考 🤔\r\n",
    "",                                # display: omitted (empty text, valid signature)
    "\r\r\n\t \u2028 line sep, zero\u200bwidth, \U0001f9e0 ",
    "quotes \" and \\ backslashes \\n (literal) and </thinking> tags",
]


def _turn(content: list[Any], stop: str = "tool_use") -> Turn:
    return Turn("msg_01X", "claude-opus-4-5", content, stop, None,
                {"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 2,
                 "output_tokens": 7})


def _replay(completion: dict[str, Any]) -> Message:
    """What a faithful client sends back: the assistant message as received."""
    msg = dict(completion["choices"][0]["message"])
    msg.pop("refusal")
    req = decode_request({"model": "claude-opus-4-5", "messages": [{"role": "user", "content": "q"}, msg]})
    return req.messages[1]


@pytest.mark.parametrize("text", AWKWARD, ids=["crlf_trailing_unicode", "empty_signed", "separators", "escapes"])
def test_reasoning_details_round_trip_byte_exact(text: str) -> None:
    content = [ThinkingBlock(text, "sig/+=" + str(len(text))), RedactedThinkingBlock("EmwKAhgBEgy3va3pzix/LafP"),
               TextBlock("Checking."), ToolUseBlock("toolu_01A", "get_weather", {"city": "Zürich", "n": [1, 2.5]})]
    completion = encode_completion(_turn(content), created=1, scid="SCID")
    msg = completion["choices"][0]["message"]
    assert msg["reasoning_content"] == text
    assert msg["reasoning_details"] == [
        {"type": "reasoning.text", "text": text, "signature": "sig/+=" + str(len(text)),
         "format": "anthropic-claude-v1", "index": 0},
        {"type": "reasoning.encrypted", "data": "EmwKAhgBEgy3va3pzix/LafP", "format": "anthropic-claude-v1",
         "index": 1}]
    # Through JSON, as on the wire, and back: the very same canonical blocks.
    assert _replay(json.loads(json.dumps(completion))).content == content


def test_completion_shape() -> None:
    content = [ThinkingBlock("t", "s"), TextBlock("I'll check "), TextBlock("twice."),
               ToolUseBlock("toolu_1", "f", {"a": 1}), ToolUseBlock("toolu_2", "g", {})]
    out = encode_completion(_turn(content), created=1700000000, scid="SCID123")
    assert out == {
        "id": "chatcmpl-msg_01X", "object": "chat.completion", "created": 1700000000, "model": "claude-opus-4-5",
        "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "I'll check twice.", "refusal": None,
            "reasoning_content": "t",
            "reasoning_details": [{"type": "reasoning.text", "text": "t", "signature": "s",
                                   "format": "anthropic-claude-v1", "index": 0}],
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 17, "completion_tokens": 7, "total_tokens": 24,
                  "prompt_tokens_details": {"cached_tokens": 5}},
        "_gateway": {"conversation_id": "SCID123"},
    }


@pytest.mark.parametrize(("stop", "finish"), [("end_turn", "stop"), ("stop_sequence", "stop"),
                                              ("tool_use", "tool_calls"), ("max_tokens", "length"),
                                              ("refusal", "content_filter"), ("something_new", "stop")])
def test_finish_reasons(stop: str, finish: str) -> None:
    assert encode_completion(_turn([TextBlock("x")], stop), created=0)["choices"][0]["finish_reason"] == finish


def test_tool_only_answer_has_null_content_and_no_reasoning_fields() -> None:
    msg = encode_completion(_turn([ToolUseBlock("toolu_1", "f", {})]), created=0)["choices"][0]["message"]
    assert msg["content"] is None and "reasoning_content" not in msg and "reasoning_details" not in msg
    assert "_gateway" not in encode_completion(_turn([TextBlock("x")]), created=0)


def test_excluded_reasoning_is_not_sent() -> None:
    out = encode_completion(_turn([ThinkingBlock("t", "s"), TextBlock("x")]), created=0, exclude_reasoning=True)
    assert set(out["choices"][0]["message"]) == {"role", "content", "refusal"}


def test_golden_message_round_trips_through_the_openai_shape() -> None:
    expected = json.loads((FIXTURES / "sse_thinking_tool_use.json").read_text(encoding="utf-8"))
    turn = anthropic.decode_turn(expected)
    replayed = _replay(encode_completion(turn, created=0))
    assert [anthropic.encode_block(b) for b in replayed.content] == expected["content"]

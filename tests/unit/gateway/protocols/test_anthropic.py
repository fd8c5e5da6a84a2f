"""The Anthropic dialect round-trips requests and turns without losing a byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, OpaqueBlock, ResultShape, ThinkingBlock
from gateway.errors import ClientError

AWKWARD = ["", " ", "a\r\nb", "trailing   ", "\n\n\nblank lines\n", "café — 思考 🤔", "\t tab\r", "\u2028\u00a0"]

CLAUDE_CODE_BODY = {
    "model": "claude-opus-4-7",
    "max_tokens": 32000,
    "stream": True,
    "thinking": {"type": "adaptive", "display": "omitted"},
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "system", "content": "injected reminder"},
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "", "signature": "EqSig=="},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}, "caller": {"k": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "ok"}],
                                      "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": [{"name": "Read", "input_schema": {"type": "object"}, "defer_loading": True}],
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "metadata": {"user_id": "u"},
}


def test_claude_code_body_round_trips_exactly() -> None:
    req = anthropic.decode_request(CLAUDE_CODE_BODY)
    assert isinstance(req.messages[2].content[1], OpaqueBlock)
    assert anthropic.encode_request(req) == CLAUDE_CODE_BODY
    # and key order of the top level is preserved for model/messages/stream/thinking then params
    assert list(anthropic.encode_request(req))[:2] == ["model", "messages"]


@given(text=st.sampled_from(AWKWARD) | st.text(), sig=st.sampled_from(["", "EqX=="]) | st.text(min_size=1))
def test_thinking_text_and_signature_are_never_reencoded(text: str, sig: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": text, "signature": sig},
                                          {"type": "text", "text": "a"}]}]}
    req = anthropic.decode_request(json.loads(json.dumps(body)))
    block = req.messages[1].content[0]
    assert isinstance(block, ThinkingBlock)
    assert block.thinking is not None and block.thinking.encode("utf-8", "surrogatepass") == text.encode(
        "utf-8", "surrogatepass")
    assert anthropic.encode_request(req) == body


def test_missing_thinking_and_signature_keys_stay_missing() -> None:
    body = {"model": "m", "messages": [{"role": "assistant", "content": [{"type": "thinking"}]}]}
    req = anthropic.decode_request(body)
    block = req.messages[0].content[0]
    assert isinstance(block, ThinkingBlock) and block.thinking is None and block.signature is None
    assert anthropic.encode_request(req) == body


@pytest.mark.parametrize(("body", "msg"), [
    ([], "Request body must be a JSON object"),
    ({"messages": []}, "model: Field required"),
    ({"model": "m"}, "messages: Field required"),
    ({"model": "m", "messages": {}}, "messages: Input should be a valid list"),
    ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages.0.content: Input should be a valid list"),
    ({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
     "messages.0.content.0.text: Input should be a valid string"),
    ({"model": "m", "messages": [], "stream": "yes"}, "stream: Input should be a valid boolean"),
])
def test_wrong_types_are_client_errors(body: object, msg: str) -> None:
    with pytest.raises(ClientError) as e:
        anthropic.decode_request(body)
    assert e.value.status == 400 and e.value.message == msg


def test_turn_round_trip() -> None:
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "thinking", "thinking": "x\r\n", "signature": "s"},
                        {"type": "redacted_thinking", "data": "d"},
                        {"type": "tool_use", "id": "t", "name": "n", "input": {"a": [1]}}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1}, "container": None}
    assert anthropic.encode_turn(anthropic.decode_turn(body)) == body


def test_what_a_stage_derives_from_an_undecoded_message_is_computed_once_per_json() -> None:
    calls: list[int] = []

    def count(m: Message) -> int:
        raw = m.raw_blocks
        assert raw is not None
        calls.append(len(raw))
        return len(raw)

    m = anthropic.decode_message({"role": "assistant", "content": [{"type": "text", "text": "a"}]}, 0)
    assert m.raw_derived(count) == 1 and m.raw_derived(count) == 1 and calls == [1]
    m.restore_raw([{"type": "text", "text": "r"}, {"type": "text", "text": "s"}], lambda: [], b"d")
    assert m.raw_derived(count) == 2 and calls == [1, 2]  # new JSON: computed again
    m.content  # noqa: B018  # decoded: nothing derived from JSON any more
    assert m.raw_derived(count) is None and calls == [1, 2]


def test_a_message_result_shape_is_read_once_per_content_list() -> None:
    """``Message.result_shape`` (what the tool-chain and loop rules read of every message of a replay) is
    computed once per content list: again for a new list, or the same list grown or shrunk."""
    m = anthropic.decode_message({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "x"}, {"type": "text", "text": "  "},
        {"type": "tool_result", "tool_use_id": "b"}]}, 0)
    shape = m.result_shape()
    assert (shape.result_ids, shape.results_lead, shape.blank_text) == (("a", "b"), False, True)
    assert m.result_shape() is shape
    m.content.pop()
    assert m.result_shape().result_ids == ("a",) and m.result_shape().results_lead
    m.content = [m.content[0]]
    assert m.result_shape() == ResultShape(("a",), True, False)

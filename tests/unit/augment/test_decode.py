"""Augment chat-stream requests -> canonical requests (Augment-BYOK's reading of the wire)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.augment.codec import DEFAULT_MAX_TOKENS, DEFAULT_THINKING, ToolMeta, decode_chat_request
from gateway.errors import ClientError


def wire(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [anthropic.encode_message(m) for m in decode_chat_request(body).request.messages]


def tool_result(tid: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"id": 1, "type": 1, "tool_result_node": {"tool_use_id": tid, "content": content, **extra}}


def response_nodes(tid: str, *, thinking: str | None = "hmm", signature: str | None = "sig") -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    if thinking is not None:
        th = {"summary": thinking, **({"signature": signature} if signature else {})}
        nodes.append({"id": 1, "type": 8, "content": "", "thinking": th})
    nodes += [{"id": 2, "type": 0, "content": "Let me look."},
              {"id": 3, "type": 7, "content": "", "tool_use": {"tool_use_id": tid, "tool_name": "read",
                                                                 "input_json": ""}},
              {"id": 4, "type": 5, "content": "", "tool_use": {"tool_use_id": tid, "tool_name": "read",
                                                                 "input_json": '{"path": "a.txt"}'}},
              {"id": 5, "type": 2, "content": "Let me look."}]
    return nodes


def test_history_exchanges_become_alternating_messages() -> None:
    body = {"model": "claude-opus-4-5", "conversation_id": "c0ffee00-0000-4000-8000-000000000001",
            "chat_history": [
                {"request_message": "read a.txt", "request_nodes": [], "response_text": "Let me look.",
                 "response_nodes": response_nodes("toolu_1")},
                {"request_message": "", "request_nodes": [tool_result("toolu_1", "hello")], "response_text": "",
                 "response_nodes": response_nodes("toolu_2", thinking=None)}],
            "message": "", "nodes": [tool_result("toolu_2", "world", is_error=True)]}
    assert wire(body) == [
        {"role": "user", "content": [{"type": "text", "text": "read a.txt"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "a.txt"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "world", "is_error": True}]},
    ]
    assert decode_chat_request(body).conversation_id == "c0ffee00-0000-4000-8000-000000000001"


def test_unsigned_thinking_and_tool_use_start_only_replays() -> None:
    nodes = [n for n in response_nodes("toolu_9", signature=None) if n["type"] in (8, 7)]
    msgs = wire({"model": "m", "chat_history": [{"request_message": "q", "response_nodes": nodes}], "message": "next"})
    assert msgs[1]["content"] == [{"type": "thinking", "thinking": "hmm"},
                                  {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {}}]
    assert msgs[2] == {"role": "user", "content": [{"type": "text", "text": "next"}]}


def test_text_nodes_placeholders_and_context_nodes() -> None:
    body = {"model": "m", "message": "fix it", "nodes": [
        {"id": 1, "type": 0, "text_node": {"content": "fix it"}},        # duplicate of message: once
        {"id": 2, "type": 0, "text_node": {"content": "---"}},           # placeholder: dropped
        {"id": 3, "type": 4, "ide_state_node": {"file": "a.py"}},
        {"id": 4, "type": 2, "image_node": {"image_data": "iVBOR", "format": 2}},
        tool_result("toolu_3", {"rows": 2}),                              # structured: JSON text
        tool_result("toolu_4", "", content_nodes=[{"type": 1, "text_content": "line"},
                                                   {"type": 2, "image_content": {"image_data": "R0lG", "format": 3}}]),
    ]}
    assert wire(body) == [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_3", "content": '{"rows":2}'},
        {"type": "tool_result", "tool_use_id": "toolu_4", "content": [
            {"type": "text", "text": "line"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"}}]},
        {"type": "text", "text": "fix it"},
        {"type": "text", "text": 'IdeState: {"file":"a.py"}'},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "iVBOR"}},
    ]}]


def test_params_tools_system_and_defaults() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    chat = decode_chat_request({
        "model": "claude-opus-4-5", "message": "hi", "userGuidelines": "Be brief.", "rules": ["r1", " ", "r2"],
        "agent_memories": "likes tests", "path": "src/a.py", "prefix": "code before the cursor",
        "featureDetectionFlags": {"supportToolUseStart": False},
        "tool_definitions": [{"name": "read", "description": "Read a file", "input_schema_json": json.dumps(schema),
                              "mcp_server_name": "fs", "mcp_tool_name": "read_file"},
                             {"name": "noop", "input_schema_json": "not json"}, {"description": "nameless"}]})
    req = chat.request
    assert req.model == "claude-opus-4-5" and req.stream is True and req.thinking == DEFAULT_THINKING
    assert req.params == {"max_tokens": DEFAULT_MAX_TOKENS, "system": "Be brief.\n\nr1\nr2\n\nlikes tests",
                          "tools": [{"name": "read", "description": "Read a file", "input_schema": schema},
                                    {"name": "noop", "input_schema": {"type": "object", "properties": {}}}]}
    assert chat.tool_meta == {"read": ToolMeta("fs", "read_file")}
    assert chat.tool_use_start is False
    off = decode_chat_request({"model": "m", "message": "x", "thinking": None, "max_tokens": 100}).request
    assert off.thinking is None and off.params["max_tokens"] == 100


@pytest.mark.parametrize(("body", "needle"), [
    ([], "JSON object"),
    ({"message": "hi"}, "model"),
    ({"model": "m", "message": "hi", "chat_history": {}}, "chat_history"),
    ({"model": "m", "message": "hi", "chat_history": ["x"]}, "chat_history.0"),
    ({"model": "m", "message": "   "}, "no message"),
    ({"model": "m", "message": "hi", "max_tokens": "9"}, "max_tokens"),
    ({"model": "m", "message": "hi", "thinking": "on"}, "thinking"),
])
def test_malformed_requests(body: Any, needle: str) -> None:
    with pytest.raises(ClientError) as err:
        decode_chat_request(body)
    assert err.value.status == 400 and needle in err.value.message

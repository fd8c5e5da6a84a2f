"""Golden Anthropic SSE transcripts -> chat.completion.chunk lines (pure, and through the relay)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn
from gateway.dialects.openai_chat.codec import encode_completion
from gateway.dialects.openai_chat.stream import StreamEncoder
from gateway.sse import SSEDecoder
from gateway.transport.upstream import relay_sse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
THINKING = "Let me think.\r\n  Trailing spaces   \n\n\ncafé — 思考 🤔\r\n"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=="


def fold(raw: bytes, encoder: StreamEncoder) -> bytes:
    """What the relay does with each event: accumulate first, then encode."""
    out = b""
    for ev in SSEDecoder().feed(raw):
        data = json.loads(ev.data)
        accumulate(data, encoder.snap)
        out += encoder.event(data, ev)
    return out + encoder.end()


def chunks(wire: bytes) -> list[Any]:
    text = wire.decode()
    assert text.endswith("\n\n") and "\r" not in text.replace("\\r", "")
    lines = [part for part in text.split("\n\n") if part]
    assert all(line.startswith("data: ") for line in lines)
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


def deltas(items: list[Any]) -> list[tuple[dict[str, Any], str | None]]:
    return [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in items
            if isinstance(c, dict) and c.get("choices")]


def test_golden_thinking_tool_use_transcript() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    items = chunks(fold(raw, StreamEncoder(Snapshot(), created=7, scid="SCID1", include_usage=True)))
    assert items[-1] == "[DONE]"
    first = items[0]
    assert first["_gateway"] == {"conversation_id": "SCID1"}
    assert {first["id"], first["object"], first["model"], first["created"]} == {
        "chatcmpl-msg_01Golden", "chat.completion.chunk", "claude-sonnet-4-5", 7}
    assert all(c["id"] == "chatcmpl-msg_01Golden" for c in items[:-1])
    assert deltas(items) == [
        ({"role": "assistant", "content": ""}, None),
        ({"reasoning_content": "Let me think.\r"}, None),
        ({"reasoning_content": "\n  Trailing spac"}, None),
        ({"reasoning_content": "es   \n\n\ncafé — 思考 🤔\r\n"}, None),
        ({"reasoning_details": [{"type": "reasoning.text", "text": THINKING, "signature": SIGNATURE,
                                 "format": "anthropic-claude-v1", "index": 0}]}, None),
        ({"content": "I'll check "}, None),
        ({"content": "the weather."}, None),
        ({"tool_calls": [{"index": 0, "id": "toolu_01AbmHJypDhKqBF7NKdRPJ6d", "type": "function",
                          "function": {"name": "get_weather", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"loca'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": 'tion": "San Fra'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": 'ncisco, CA", "unit": "c'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": 'elsius"}'}}]}, None),
        ({}, "tool_calls"),
    ]
    usage_chunk = items[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
        "prompt_tokens": 42, "completion_tokens": 89, "total_tokens": 131,
        "prompt_tokens_details": {"cached_tokens": 0}}


def test_assembled_stream_equals_the_non_stream_answer() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    enc = StreamEncoder(Snapshot(), created=0)
    items = deltas(chunks(fold(raw, enc)))
    content = "".join(d.get("content") or "" for d, _ in items)
    reasoning = "".join(d.get("reasoning_content", "") for d, _ in items)
    details = [e for d, _ in items for e in d.get("reasoning_details", [])]
    args = "".join(tc["function"]["arguments"] for d, _ in items for tc in d.get("tool_calls", []))
    turn = finished_turn(enc.snap)
    assert turn is not None
    msg = encode_completion(turn, created=0)["choices"][0]["message"]
    assert (content, reasoning, details) == (msg["content"], msg["reasoning_content"], msg["reasoning_details"])
    assert json.loads(args) == json.loads(msg["tool_calls"][0]["function"]["arguments"])
    assert "usage" not in json.dumps([d for d, _ in items])  # no usage chunk unless asked


def test_redacted_and_omitted_thinking_and_arguments_without_fragments() -> None:
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                                      "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "S"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "R=="}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_a",
                                                                      "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_b",
                                                                      "name": "g", "input": {}}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 3},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]
    raw = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)
    got = deltas(chunks(fold(raw, StreamEncoder(Snapshot(), created=0))))
    assert got[1:] == [
        ({"reasoning_details": [{"type": "reasoning.text", "text": "", "signature": "S",
                                 "format": "anthropic-claude-v1", "index": 0}]}, None),
        ({"reasoning_details": [{"type": "reasoning.encrypted", "data": "R==", "format": "anthropic-claude-v1",
                                 "index": 1}]}, None),
        ({"tool_calls": [{"index": 0, "id": "toolu_a", "type": "function",
                          "function": {"name": "f", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, None),  # valid JSON for the client
        ({"tool_calls": [{"index": 1, "id": "toolu_b", "type": "function",
                          "function": {"name": "g", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}, None),
        ({}, "tool_calls"),
    ]


def test_exclude_reasoning_sends_none() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    wire = fold(raw, StreamEncoder(Snapshot(), created=0, exclude_reasoning=True))
    assert b"reasoning" not in wire and b"I'll check " in wire


def test_midstream_error_becomes_an_error_chunk_without_done() -> None:
    raw = (FIXTURES / "sse_midstream_error.sse").read_bytes()
    items = chunks(fold(raw, StreamEncoder(Snapshot(), created=0)))
    assert "[DONE]" not in items
    assert items[-1] == {"error": {"message": "Overloaded", "type": "server_error", "param": None,
                                   "code": "overloaded_error"}}
    assert deltas(items)[-1] == ({"content": "Partial"}, None)


class FakeUpstream:
    """Enough of ``UpstreamResponse`` for the relay: the body in small pieces."""

    def __init__(self, body: bytes, piece: int = 7) -> None:
        self.body, self.piece = body, piece
        self.closed = self.released = False

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for k in range(0, len(self.body), self.piece):
            yield self.body[k:k + self.piece]

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.released = True


async def _relay(body: bytes, **kwargs: Any) -> tuple[bytes, list[Any]]:
    snap, recorded = Snapshot(), []

    async def on_complete(turn: Any) -> None:
        recorded.append(turn)

    enc = StreamEncoder(snap, created=0, **kwargs)
    out = b"".join([c async for c in relay_sse(FakeUpstream(body), enc,  # type: ignore[arg-type]
                                               on_complete=on_complete, snapshot=snap)])
    return out, recorded


async def test_through_the_relay_done_and_record() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    wire, recorded = await _relay(raw)
    assert wire == fold(raw, StreamEncoder(Snapshot(), created=0))
    assert wire.endswith(b"data: [DONE]\n\n") and len(recorded) == 1


async def test_truncated_upstream_stream_ends_with_an_error_chunk() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    wire, recorded = await _relay(raw[: len(raw) // 2])
    last = chunks(wire)[-1]
    assert last["error"]["message"] == "upstream stream ended before message_stop"
    assert last["error"]["type"] == "server_error" and not recorded and b"[DONE]" not in wire


async def test_malformed_tool_input_ends_with_an_error_chunk_and_no_record() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes().replace(b'elsius\\"}', b'elsius\\"')
    wire, recorded = await _relay(raw)
    last = chunks(wire)[-1]
    assert "not valid JSON" in last["error"]["message"] and not recorded

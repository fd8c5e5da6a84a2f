"""The SSE event sequence (rule 14) and faithful replay of whole tool loops, streamed and not."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette

from tests.support.sim.helpers import HEADERS, INTERLEAVED, Event, events_of, post, request, run_loop
from thinkgate_sim.render import split_awkward


def assert_well_formed(events: list[Event]) -> None:
    names = [n for n, _ in events]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert "ping" in names[1:-2]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 1 and start["usage"]["input_tokens"] > 0
    open_index: int | None = None
    next_index = 0
    last_delta: dict[str, Any] | None = None
    for name, data in events[1:-2]:
        if name == "ping":
            continue
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index
            open_index, last_delta = data["index"], None
            block = data["content_block"]
            if block["type"] == "thinking":
                assert block == {"type": "thinking", "thinking": "", "signature": ""}
            if block["type"] == "tool_use":
                assert block["input"] == {}
        elif name == "content_block_delta":
            assert data["index"] == open_index
            if last_delta is not None:
                assert last_delta["type"] != "signature_delta", "signature_delta must be the thinking block's last"
            last_delta = data["delta"]
        else:
            assert name == "content_block_stop" and data["index"] == open_index
            if start_type(events, open_index) == "thinking":
                assert last_delta is not None and last_delta["type"] == "signature_delta"
            open_index, next_index = None, next_index + 1
    assert open_index is None and next_index > 0
    final = events[-2][1]
    assert final["delta"]["stop_reason"] in ("end_turn", "tool_use")
    assert final["usage"]["output_tokens"] > 1


def start_type(events: list[Event], index: int) -> str:
    return next(d["content_block"]["type"] for n, d in events
                if n == "content_block_start" and d["index"] == index)


async def test_event_order_and_signature_before_stop(client: httpx.AsyncClient) -> None:
    resp = await post(client, request("q [[sim:tools=1]] [[sim:parallel=2]] [[sim:redacted]]", stream=True))
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["request-id"].startswith("req_")
    events = events_of(resp.content)
    assert_well_formed(events)
    types = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert types == ["thinking", "redacted_thinking", "text", "tool_use", "tool_use"]
    redacted = next(d["content_block"] for n, d in events
                    if n == "content_block_start" and d["content_block"]["type"] == "redacted_thinking")
    assert redacted["data"]
    thinking_deltas = [d["delta"]["thinking"] for n, d in events
                       if n == "content_block_delta" and d["delta"]["type"] == "thinking_delta"]
    assert len(thinking_deltas) >= 4
    assert any(part.endswith("\r") for part in thinking_deltas), "a CRLF is split across deltas"
    assert [n for n, d in events if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"]


def test_split_awkward_cuts_inside_crlf_and_around_multibyte() -> None:
    text = "ab\r\ncafé — 思考 🤔 end  \n"
    parts = split_awkward(text)
    assert "".join(parts) == text
    assert any(p.endswith("\r") for p in parts)
    assert any(p.endswith("思") for p in parts) and any(p.startswith("考") for p in parts)
    assert any(p.endswith("🤔") for p in parts)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("thinking", "headers"), [
    ("enabled", None), ("enabled", INTERLEAVED), ("adaptive", None),
], ids=["enabled", "interleaved", "adaptive"])
async def test_faithful_multi_round_tool_loop_is_accepted(client: httpx.AsyncClient, stream: bool,
                                                          thinking: str, headers: dict[str, str] | None) -> None:
    body = request("plan a trip [[sim:tools=3]] [[sim:parallel=2]] [[sim:redacted]]", thinking=thinking,
                   stream=stream)
    final_body, replies = await run_loop(client, body, headers)
    assert [r["stop_reason"] for r in replies] == ["tool_use"] * 3 + ["end_turn"]
    interleaved = thinking == "adaptive" or headers is not None
    for k, reply in enumerate(replies):
        types = [b["type"] for b in reply["content"]]
        if k == 0 or interleaved:
            assert types[:2] == ["thinking", "redacted_thinking"]
        else:
            assert "thinking" not in types
        if k < 3:
            assert types.count("tool_use") == 2
    texts = [b["thinking"] for r in replies for b in r["content"] if b["type"] == "thinking"]
    assert len(set(texts)) == len(texts), "every round thinks something different"
    # the final answer replayed as history, plus a new question, is valid too
    final_body["messages"].append({"role": "assistant", "content": replies[-1]["content"]})
    final_body["messages"].append({"role": "user", "content": "thanks, and tomorrow?"})
    resp = await post(client, final_body, headers)
    assert resp.status_code == 200, resp.text


async def test_streamed_reassembly_matches_signature_of_exact_text(client: httpx.AsyncClient) -> None:
    body = request("streamed [[sim:tools=1]]", stream=True)
    _, replies = await run_loop(client, body)
    thinking = replies[0]["content"][0]
    assert "\r\n" in thinking["thinking"] and thinking["thinking"].endswith(" \n")
    assert thinking["signature"].startswith("Eq")


async def test_display_omitted_empty_signed_thinking_loop(client: httpx.AsyncClient) -> None:
    body = request("claude code style [[sim:tools=2]]", thinking="adaptive", stream=True)
    body["thinking"]["display"] = "omitted"
    body["messages"].append({"role": "system", "content": "You are Claude Code."})  # after the user, as Claude Code
    _, replies = await run_loop(client, body, {"anthropic-beta": "claude-code-20250219"})
    assert len(replies) == 3
    for reply in replies:
        first = reply["content"][0]
        assert first["type"] == "thinking" and first["thinking"] == "" and first["signature"]
    resp = await post(client, body, {"anthropic-beta": "claude-code-20250219"})
    deltas = [d["delta"]["type"] for n, d in events_of(resp.content) if n == "content_block_delta"
              and d["index"] == 0]
    assert deltas == ["signature_delta"]


async def test_each_event_is_its_own_body_chunk(sim_app: Starlette) -> None:
    """At the ASGI level every SSE event goes out in its own ``http.response.body`` message."""
    body = orjson.dumps(request("x [[sim:tools=1]] [[sim:redacted]]", stream=True))
    sent: list[dict[str, Any]] = []
    requested = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/messages", "raw_path": b"/v1/messages", "query_string": b"",
             "root_path": "", "headers": [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()],
             "client": ("127.0.0.1", 1), "server": ("sim", 80)}
    await sim_app(scope, receive, send)
    chunks = [m["body"] for m in sent if m["type"] == "http.response.body" and m.get("body")]
    assert len(chunks) > 20
    for chunk in chunks:
        assert chunk.startswith(b"event: ") and chunk.endswith(b"\n\n") and chunk.count(b"\n\n") == 1

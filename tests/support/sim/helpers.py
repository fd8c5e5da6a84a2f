"""Request builders, an SSE reassembler and a faithful tool-loop driver for the simulator tests."""

from __future__ import annotations

import copy
import json
import socket
from typing import Any

import httpx
import orjson

from gateway.sse import SSEDecoder

MODEL = "claude-sonnet-4-5-20250929"
HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
INTERLEAVED = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
Event = tuple[str, dict[str, Any]]

# thinking-block binding (bound models, tests/*/sim/test_binding*.py)
BOUND_MODEL = "claude-opus-5-5"
BINDING_BETA = "thinking-binding-controls-2026-08-01"
WEATHER_TOOL = {"name": "get_weather", "description": "Weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CLOCK_TOOL = {"name": "get_time", "description": "Time in a zone",
              "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}
BOUND_400 = ("messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a different "
             "conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "
             "\"drop_block\".")
NEEDS_BETA = (" That setting requires the `thinking-binding-controls-2026-08-01` value in the `anthropic-beta` "
              "header.")
SYSTEM_CHANGED = " The `system` prompt differs from the one this block was created with."


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request(text: str, *, thinking: str | None = "enabled", stream: bool = False, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 4096,
                            "messages": [{"role": "user", "content": text}]}
    if thinking == "enabled":
        body["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    elif thinking == "adaptive":
        body["thinking"] = {"type": "adaptive"}
    elif thinking == "disabled":
        body["thinking"] = {"type": "disabled"}
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


async def post(client: httpx.AsyncClient, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> httpx.Response:
    try:
        raw = orjson.dumps(body)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes (255 levels): still valid JSON
        raw = json.dumps(body).encode()
    return await client.post("/v1/messages", content=raw, headers={**HEADERS, **(headers or {})})


def events_of(raw: bytes) -> list[Event]:
    dec = SSEDecoder()
    out: list[Event] = [(ev.event or "", ev.json()) for ev in dec.feed(raw)]  # type: ignore[misc]
    out.extend((ev.event or "", ev.json()) for ev in dec.flush())  # type: ignore[misc]
    return out


def reassemble(events: list[Event]) -> dict[str, Any]:
    """Rebuild the Message from SSE events the way the SDKs do (text appends, signature replaces)."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for name, data in events:
        if name == "message_start":
            message = copy.deepcopy(data["message"])
        elif name == "content_block_start":
            assert data["index"] == len(message["content"])
            message["content"].append(copy.deepcopy(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "compaction_delta":
                block["content"] = delta["content"]
            elif delta["type"] == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            if data["index"] in partial:
                message["content"][data["index"]]["input"] = orjson.loads(partial.pop(data["index"]))
        elif name == "message_delta":
            message.update(data["delta"])
            if "context_management" in data:
                message["context_management"] = data["context_management"]
            message["usage"] = {**message["usage"], **data["usage"]}
    return message


async def answer(client: httpx.AsyncClient, body: dict[str, Any],
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One successful reply (streamed and reassembled when ``body["stream"]``)."""
    resp = await post(client, body, headers)
    assert resp.status_code == 200, resp.text
    if body.get("stream"):
        return reassemble(events_of(resp.content))
    return resp.json()  # type: ignore[no-any-return]


def tool_results(message: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b["id"], "content": f"result for {b['id']}"}
        for b in message["content"] if b["type"] == "tool_use"]}


async def run_loop(client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None,
                   max_rounds: int = 8) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Drive the tool loop to its final answer, replaying every reply verbatim.

    Returns the final request body (whole history) and the replies in order."""
    body = copy.deepcopy(body)
    replies: list[dict[str, Any]] = []
    for _ in range(max_rounds):
        reply = await answer(client, body, headers)
        replies.append(reply)
        if reply["stop_reason"] != "tool_use":
            return body, replies
        body["messages"].append({"role": "assistant", "content": reply["content"]})
        body["messages"].append(tool_results(reply))
    raise AssertionError("tool loop did not finish")


async def history(client: httpx.AsyncClient, body: dict[str, Any], rounds: int,
                  headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The request body after ``rounds`` faithfully replayed tool rounds (ending in tool results)."""
    body = copy.deepcopy(body)
    for _ in range(rounds):
        reply = await answer(client, body, headers)
        assert reply["stop_reason"] == "tool_use", reply
        body["messages"].append({"role": "assistant", "content": reply["content"]})
        body["messages"].append(tool_results(reply))
    return body


async def rejection(client: httpx.AsyncClient, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, error type, message) of a rejected request; checks the envelope and request-id."""
    resp = await post(client, body, headers)
    payload = resp.json()
    assert payload["type"] == "error", payload
    assert payload["request_id"].startswith("req_")
    assert resp.headers["request-id"] == payload["request_id"]
    assert set(payload) == {"type", "error", "request_id"}
    return resp.status_code, payload["error"]["type"], payload["error"]["message"]

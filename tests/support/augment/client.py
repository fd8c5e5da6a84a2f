"""A plain-HTTP Augment chat-stream client for the tests: httpx, NDJSON read line by line."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

MODEL = "claude-opus-4-5"
THINKING = {"type": "enabled", "budget_tokens": 2048}
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
SCID = "x-ag-conversation-id"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOL_DEFINITIONS = [{"name": "get_weather", "description": "Weather for a city",
                     "input_schema_json": json.dumps(WEATHER_SCHEMA)}]
RAW_RESPONSE, MAIN_TEXT_FINISHED, TOOL_USE, TOOL_USE_START, THINKING_NODE, TOKEN_USAGE = 0, 2, 5, 7, 8, 10

Exchange = dict[str, Any]
Replay = Callable[[list[Exchange]], list[Exchange]]


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    lines: list[dict[str, Any]] = field(default_factory=list)
    body: Any = None  # the JSON body of a non-200 answer

    @property
    def text(self) -> str:
        return "".join(line["text"] for line in self.lines)

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return [n for line in self.lines for n in line.get("nodes", [])]

    def of_type(self, t: int) -> list[dict[str, Any]]:
        return [n for n in self.nodes if n["type"] == t]

    @property
    def stop_reason(self) -> int | None:
        return self.lines[-1].get("stop_reason") if self.lines else None

    def tool_uses(self) -> list[dict[str, Any]]:
        return [n["tool_use"] for n in self.of_type(TOOL_USE)]


def assert_tools_stream_per_tool(nodes: list[dict[str, Any]]) -> list[str]:
    """The tool nodes of an answer whose upstream sends its tools one after another (every upstream
    thinkgate fronts does): each tool's TOOL_USE_START (name known, no input yet) then its TOOL_USE
    (complete input), both before the next tool's TOOL_USE_START, not all at the end. The tool ids."""
    tools = [(n["type"], n["tool_use"]["tool_use_id"]) for n in nodes if n["type"] in (TOOL_USE_START, TOOL_USE)]
    ids = list(dict.fromkeys(tid for _, tid in tools))
    assert tools == [pair for tid in ids for pair in ((TOOL_USE_START, tid), (TOOL_USE, tid))]
    starts = [n for n in nodes if n["type"] == TOOL_USE_START]
    assert all(n["tool_use"]["input_json"] == "" for n in starts)
    uses = [n["tool_use"] for n in nodes if n["type"] == TOOL_USE]
    assert [u["tool_name"] for u in uses] == [n["tool_use"]["tool_name"] for n in starts]
    assert all(isinstance(json.loads(u["input_json"]), dict) for u in uses)
    return ids


def chat(url: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
    with httpx.stream("POST", url + "/gateway/chat-stream", json=body, headers=headers, timeout=30) as r:
        if r.status_code != 200:
            r.read()
            return Reply(r.status_code, r.headers, body=r.json())
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line.strip()]
        return Reply(200, r.headers, lines)


def tool_result_nodes(reply: Reply, structured: bool = False) -> list[dict[str, Any]]:
    """One TOOL_RESULT node per call; with ``structured`` the second result of each round is
    sent as content nodes (a non-string result)."""
    out = []
    for k, tu in enumerate(reply.tool_uses()):
        node: dict[str, Any] = {"tool_use_id": tu["tool_use_id"], "is_error": False}
        if structured and k % 2 == 1:
            node["content"] = ""
            node["content_nodes"] = [{"type": 1, "text_content": json.dumps({"temp": 21, "call": k})}]
        else:
            node["content"] = f"sunny in {json.loads(tu['input_json'])}"
        out.append({"id": k + 1, "type": 1, "tool_result_node": node})
    return out


def exchange(message: str, nodes: list[dict[str, Any]], reply: Reply) -> Exchange:
    """The history entry the extension keeps for one request/response."""
    return {"request_message": message, "request_nodes": nodes, "response_text": reply.text,
            "response_nodes": reply.nodes}


@dataclass
class Loop:
    replies: list[Reply] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


def run_loop(url: str, prompt: str, *, key: str, conversation_id: str | None, replay: Replay | None = None,
             structured: bool = False, max_rounds: int = 8, headers: dict[str, str] | None = None) -> Loop:
    """Play a tool loop to its final answer. ``replay=None``: server-side state (empty chat_history)."""
    hdrs = {"authorization": f"Bearer {key}", **BETA, **(headers or {})}
    history: list[Exchange] = []
    message, nodes = prompt, []
    loop = Loop()
    for _ in range(max_rounds):
        body: dict[str, Any] = {"model": MODEL, "message": message, "nodes": nodes,
                                "chat_history": replay(history) if replay else [],
                                "tool_definitions": TOOL_DEFINITIONS, "thinking": THINKING, "max_tokens": 4096,
                                "feature_detection_flags": {"support_tool_use_start": True}}
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        reply = chat(url, body, hdrs)
        assert reply.status == 200, reply.body
        loop.replies.append(reply)
        loop.bodies.append(body)
        history.append(exchange(message, nodes, reply))
        if reply.stop_reason != 3:
            return loop
        message, nodes = "", tool_result_nodes(reply, structured)
    raise AssertionError("tool loop did not finish")

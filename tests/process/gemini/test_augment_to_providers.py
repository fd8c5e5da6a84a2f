"""The Augment chat-stream surface in front of the Gemini and OpenAI-compatible upstreams."""

from __future__ import annotations

from typing import Any

import pytest

from tests.process_fixtures import ServerProcess, Sim
from tests.support.augment.client import (
    RAW_RESPONSE,
    THINKING_NODE,
    TOOL_DEFINITIONS,
    TOOL_USE_START,
    Reply,
    assert_tools_stream_per_tool,
    chat,
    exchange,
    tool_result_nodes,
)
from tests.support.gemini.helpers import DEEPSEEK, GEMINI, OPENROUTER, RESPONSES, Rejections


@pytest.fixture()
def gw(provider_gateway: ServerProcess) -> ServerProcess:
    return provider_gateway


def check_reasoning_and_tools(reply: Reply, model: str) -> int:
    """The upstream reasons on every answer (Gemini thought summaries, OpenRouter ``reasoning``,
    DeepSeek ``reasoning_content``, a Responses reasoning item's summary): THINKING nodes first, never in the
    text; each tool's TOOL_USE_START before its TOOL_USE, per tool. The number of tools."""
    types = [n["type"] for n in reply.nodes]
    assert [n["id"] for n in reply.nodes] == list(range(1, len(types) + 1))
    first_content = min(types.index(t) for t in (RAW_RESPONSE, TOOL_USE_START) if t in types)
    thinking = reply.of_type(THINKING_NODE)
    assert thinking and all(types.index(THINKING_NODE) <= k < first_content
                            for k, t in enumerate(types) if t == THINKING_NODE)
    for node in thinking:
        summary = node["thinking"]["summary"]
        assert summary.strip() and summary not in reply.text
        assert all(summary not in n["content"] for n in reply.of_type(RAW_RESPONSE))
        if model != GEMINI:  # OpenAI-compatible reasoning text has no signature to carry
            assert set(node["thinking"]) == {"summary"}
    assert "".join(n["content"] for n in reply.of_type(RAW_RESPONSE)) == reply.text
    return len(assert_tools_stream_per_tool(reply.nodes))


@pytest.mark.parametrize("replay", [False, True], ids=["server_side_state", "replayed_history"])
@pytest.mark.parametrize("model", [GEMINI, OPENROUTER, DEEPSEEK, RESPONSES])
def test_augment_tool_loop(gw: ServerProcess, sim: Sim, model: str, replay: bool) -> None:
    """Server-side state (empty chat_history), or a client that replays every exchange as streamed,
    THINKING nodes included (they came from another family: repair keeps them off the upstream)."""
    headers = {"authorization": "Bearer sk-augment-providers"}
    family = {GEMINI: "1", OPENROUTER: "2", DEEPSEEK: "3", RESPONSES: "4"}[model]
    conversation = f"0b6a2a4e-5f4d-4e0b-9a51-6f1d7c1a0c{replay:d}{family}"
    message = "[[sim:tools=2]] [[sim:parallel=2]] augment weather"
    nodes: list[dict[str, Any]] = []
    replies: list[Reply] = []
    history: list[dict[str, Any]] = []
    with Rejections(sim):
        for _ in range(5):
            body = {"model": model, "message": message, "nodes": nodes, "chat_history": history if replay else [],
                    "conversation_id": conversation, "tool_definitions": TOOL_DEFINITIONS,
                    "thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}
            reply = chat(gw.url, body, headers)
            assert reply.status == 200, reply.body
            replies.append(reply)
            history = [*history, exchange(message, nodes, reply)]
            if reply.stop_reason != 3:
                break
            message, nodes = "", tool_result_nodes(reply)
    assert [r.stop_reason for r in replies] == [3, 3, 1]
    assert [check_reasoning_and_tools(r, model) for r in replies] == [2, 2, 0]
    assert "Final answer after 2 tool rounds" in replies[-1].text

"""The Augment chat-stream surface in front of the Gemini and OpenAI-compatible upstreams."""

from __future__ import annotations

import pytest

from tests.augment.client import TOOL_DEFINITIONS, chat, exchange, tool_result_nodes
from tests.gemini.helpers import DEEPSEEK, GEMINI, OPENROUTER, Rejections
from tests.process_fixtures import ServerProcess, Sim


@pytest.fixture()
def gw(provider_gateway: ServerProcess) -> ServerProcess:
    return provider_gateway


@pytest.mark.parametrize("model", [GEMINI, OPENROUTER, DEEPSEEK])
def test_augment_tool_loop_with_server_side_history(gw: ServerProcess, sim: Sim, model: str) -> None:
    headers = {"authorization": "Bearer sk-augment-providers"}
    conversation = "0b6a2a4e-5f4d-4e0b-9a51-6f1d7c1a0c" + {GEMINI: "01", OPENROUTER: "02", DEEPSEEK: "03"}[model]
    message, nodes = "[[sim:tools=2]] augment weather", []  # type: tuple[str, list[dict[str, Any]]]
    replies = []
    with Rejections(sim):
        for _ in range(5):
            body = {"model": model, "message": message, "nodes": nodes, "chat_history": [],
                    "conversation_id": conversation, "tool_definitions": TOOL_DEFINITIONS,
                    "thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}
            reply = chat(gw.url, body, headers)
            assert reply.status == 200, reply.body
            replies.append(reply)
            exchange(message, nodes, reply)
            if reply.stop_reason != 3:
                break
            message, nodes = "", tool_result_nodes(reply)
    assert [r.stop_reason for r in replies][:2] == [3, 3] and len(replies) == 3
    assert "Final answer after 2 tool rounds" in replies[-1].text

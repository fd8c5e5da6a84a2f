"""Issue 34 item 5: a streamed Responses answer carries the same output items as the same answer not streamed, on
every upstream (a Gemini answer streamed had an extra empty message item: Gemini's last part carries only a
signature, an empty text, which is no message: ``openai_responses.layout``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.gemini.helpers import (
    CLAUDE,
    COPILOT,
    DEEPSEEK,
    GEMINI,
    GEMINI_COMPAT,
    OPENROUTER,
    RESPONSES,
    gateway_env,
)

MODELS = [CLAUDE, GEMINI, OPENROUTER, COPILOT, DEEPSEEK, GEMINI_COMPAT, RESPONSES]
TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def gw(sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, gateway_env(sim))
    yield sp
    sp.stop()


def shape(output: list[Any]) -> list[tuple[str, ...]]:
    """Each item's type and what it says (ids differ between two answers)."""
    out: list[tuple[str, ...]] = []
    for o in output:
        if o.type == "message":
            out.append(("message", *(c.text for c in o.content)))
        elif o.type == "function_call":
            out.append(("function_call", o.name, o.arguments))
        else:
            out.append((o.type, str(bool(o.encrypted_content))))
    return out


@pytest.mark.parametrize("include", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("tools", [0, 1], ids=["text", "tool-call"])
@pytest.mark.parametrize("model", MODELS)
def test_streamed_and_whole_answers_carry_the_same_items(gw: ServerProcess, model: str, tools: int,
                                                         include: bool) -> None:
    params: dict[str, Any] = {"model": model, "input": f"[[sim:tools={tools}]] weather? {uuid.uuid4().hex[:8]}",
                              "tools": [TOOL], "reasoning": {"effort": "low", "summary": "auto"}, "store": False,
                              "include": ["reasoning.encrypted_content"] if include else []}
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-stream-whole", max_retries=0) as c:
        whole = c.responses.create(**params)
        final = None
        for event in c.responses.create(stream=True, **params):
            if event.type == "response.completed":
                final = event.response
    assert final is not None
    assert shape(final.output) == shape(whole.output)
    assert all(o.type != "message" or any(c.text for c in o.content) for o in final.output), "an empty message"

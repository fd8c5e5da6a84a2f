"""Fallback chains (issue 35 item 4, ``GATEWAY_FALLBACKS``), in process: an upstream that answers 429, 5xx or
overloaded before the first byte sends the request on as its model's fallback, every stage run again for the new
target; a chain is followed until an upstream answers or it comes back to a model it tried; each fallback is
counted."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest
from prometheus_client import REGISTRY

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from state.memory_store import MemoryStore
from tests.process_fixtures import GatewayFactory, Sim
from tests.unit.gateway.test_handler import GEMINI_ANSWER, FakeUpstream

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
CHAT = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}


def fallbacks(status: str) -> float:
    return REGISTRY.get_sample_value("gateway_fallbacks_total", {"status": status}) or 0.0


async def _chat(fallback: str, anthropic: FakeUpstream, gemini: FakeUpstream, body: dict[str, Any] = CHAT
                ) -> httpx.Response:
    settings = Settings(fallbacks=fallback)
    upstreams: Any = {"anthropic": anthropic, "gemini": gemini}
    app = create_app(settings, store=MemoryStore(), upstreams=upstreams)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        return await client.post("/v1/chat/completions", content=orjson.dumps(body),
                                 headers={"authorization": "Bearer sk-client"})


async def test_an_overloaded_upstream_sends_the_request_to_the_fallback() -> None:
    before = fallbacks("529")
    down, up = FakeUpstream("anthropic", 529, OVERLOADED), FakeUpstream("gemini", body=GEMINI_ANSWER)
    answer = await _chat("claude-sonnet-4-5=gemini-3-pro-preview", down, up)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "hi", answer.text
    assert len(down.sent) == 1 and up.sent[0][0] == "/v1beta/models/gemini-3-pro-preview:generateContent"
    assert fallbacks("529") == before + 1


async def test_a_chain_that_comes_back_to_a_model_it_tried_relays_the_last_error() -> None:
    down = FakeUpstream("anthropic", 529, OVERLOADED)
    limited = FakeUpstream("gemini", 429, {"error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}})
    answer = await _chat("claude-sonnet-4-5=gemini-3-pro-preview,gemini-3-pro-preview=claude-sonnet-4-5", down,
                         limited)
    assert answer.status_code == 429 and len(down.sent) == 1 and len(limited.sent) == 1, answer.text


async def test_a_client_error_is_not_a_reason_to_fall_back() -> None:
    bad = FakeUpstream("anthropic", 400, {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}})
    up = FakeUpstream("gemini", body=GEMINI_ANSWER)
    answer = await _chat("claude-sonnet-4-5=gemini-3-pro-preview", bad, up)
    assert answer.status_code == 400 and not up.sent


@pytest.mark.process
def test_a_tool_loop_falls_back_mid_loop_with_zero_4xx(sim: Sim, gateways: GatewayFactory) -> None:
    """Anthropic direct answers 529 once, at the loop's second round: the round goes to an OpenRouter route for the
    same model (its fallback), every replayed turn judged for that target; the loop finishes with no upstream 4xx,
    and thinking is kept on every turn that went to Anthropic."""
    env = {"GATEWAY_ROUTES": f"anthropic/=openrouter@{sim.url}/openrouter/api/v1",
           "GATEWAY_FALLBACKS": "claude-sonnet-4-5=anthropic/claude-sonnet-4.5"}
    gw = gateways.start(sim.url, env)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-fallback-loop", max_retries=0)
    before = sim.stats()
    prompt = ("[[sim:conv=fallback-loop]] [[sim:tools=3]] [[sim:fault=overloaded]] [[sim:fault_round=2]] "
              "[[sim:fault_times=1]] weather in Paris?")
    messages: list[Any] = [{"role": "user", "content": prompt}]
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    served: list[str] = []
    for _ in range(4):
        answer = client.chat.completions.create(model="claude-sonnet-4-5", messages=messages, tools=tools,
                                                reasoning_effort="low")
        msg = answer.choices[0].message
        served.append(answer.model)
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            break
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in msg.tool_calls]
    after = sim.stats()
    assert after["rejections"] == before["rejections"], after["rejections"]  # no upstream 4xx
    assert "anthropic/claude-sonnet-4.5" in served and served[-1] == "claude-sonnet-4-5", served
    assert not msg.tool_calls and msg.content

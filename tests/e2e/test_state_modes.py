"""The state machine switch and /readyz reporting the store."""

from __future__ import annotations

from typing import Any

import httpx

from tests.process_fixtures import GatewayFactory, Sim
from tests.redis_fixtures import RedisServer

KEY = {"x-api-key": "sk-modes", "anthropic-version": "2023-06-01"}


def _loop_turn(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}
                                         for b in answer["content"] if b["type"] == "tool_use"]}]


def test_state_machine_off_still_sanitizes(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_STATE_MACHINE_ENABLED": "false"})
    body = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "[[sim:tools=1]] off"}]}
    first = httpx.post(gw.url + "/v1/messages", json=body, headers=KEY).json()
    # Replay with the signature stripped: nothing can be verified without records, but no 400 either.
    turn = _loop_turn(first)
    turn[0]["content"][0].pop("signature")
    body["messages"] += turn
    before = sum(sim.stats()["rejections"].values())
    r = httpx.post(gw.url + "/v1/messages", json=body, headers=KEY)
    assert r.status_code == 200, r.text
    assert sum(sim.stats()["rejections"].values()) == before
    assert "thinking" not in sim.last()["body"]  # disabled for consistency: the loop's thinking was unverifiable
    assert httpx.get(gw.url + "/readyz").json()["store"]["backend"] == "none"


def test_readyz_reports_the_store(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                  "GATEWAY_SECRET": "modes-0123456789abcdef0123456789"})
    ready = httpx.get(gw.url + "/readyz")
    assert ready.status_code == 200
    assert ready.json()["store"] == {"backend": "redis", "ok": True, "circuit": "closed"}
    embedded = httpx.get(gateways.start(sim.url).url + "/readyz").json()
    assert embedded["store"]["backend"] == "memory"


EMBEDDED_NOTICE = "using the embedded in-process store (single process only)"


def test_startup_log_says_which_store(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> None:
    # An empty value is "unset" for the settings, whatever this test process's environment holds.
    embedded = gateways.start(sim.url, {"GATEWAY_REDIS_URL": "", "GATEWAY_LOG_LEVEL": "INFO"})
    assert httpx.get(embedded.url + "/readyz").json()["store"]["backend"] == "memory"
    assert "no GATEWAY_REDIS_URL: " + EMBEDDED_NOTICE in embedded.log()
    shared = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                      "GATEWAY_SECRET": "modes-0123456789abcdef0123456789",
                                      "GATEWAY_LOG_LEVEL": "INFO"})
    assert httpx.get(shared.url + "/readyz").json()["store"]["backend"] == "redis"
    assert EMBEDDED_NOTICE not in shared.log()

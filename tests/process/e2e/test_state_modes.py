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


def test_a_store_never_reached_keeps_the_replica_not_ready_until_it_answers(
        sim: Sim, gateways: GatewayFactory) -> None:
    """Issue 32, item 3: a Redis that nothing listens for started "ready" and served statelessly. Until the store has
    answered once the replica is not ready (unless GATEWAY_STATELESS_START says so); once it has, a store that goes
    away keeps it ready (every replica shares the store)."""
    later = RedisServer()  # its port: nothing listens there yet
    env = {"GATEWAY_REDIS_URL": later.url, "GATEWAY_SECRET": "modes-0123456789abcdef0123456789",
           "GATEWAY_STORE_TIMEOUT_MS": "300"}
    gw = gateways.start(sim.url, env)
    meant = gateways.start(sim.url, {**env, "GATEWAY_STATELESS_START": "true"})
    try:
        r = httpx.get(gw.url + "/readyz")
        assert r.status_code == 503 and r.json()["status"] == "store_never_reached", r.text
        assert r.json()["store"]["ok"] is False
        assert httpx.get(meant.url + "/readyz").status_code == 200  # a stateless start, on purpose
        # it serves meanwhile (statelessly), as for an outage
        body = {"model": "claude-opus-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(gw.url + "/v1/messages", json=body, headers=KEY).status_code == 200
        later.start()
        ready = httpx.get(gw.url + "/readyz")
        assert ready.status_code == 200 and ready.json()["store"]["ok"] is True, ready.text
        later.stop()
        gone = httpx.get(gw.url + "/readyz")
        assert gone.status_code == 200 and gone.json()["store"]["ok"] is False  # went away after: still ready
    finally:
        later.cleanup()

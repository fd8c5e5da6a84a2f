"""Every request served without state is counted by reason: ``gateway_stateless_requests_total{reason}``
(issue 22, item 1). A served gateway on a private redis-server that is hung (SIGSTOP: ``store_timeout``),
then stopped (refused: ``store_unavailable``, then ``breaker_open``). Every reason starts at zero."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from gateway.ops.metrics import STATELESS_REASONS
from gateway.pipeline.identify import SCID_HEADER as SCID
from state.keys import new_scid
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum, scrape
from tests.redis_fixtures import RedisServer, running

KEY = "sk-stateless-reasons"
STATELESS = "gateway_stateless_requests_total"


@pytest.fixture()
def redis_to_break() -> Iterator[RedisServer]:
    yield from running(RedisServer())


def ask(gw: ServerProcess) -> httpx.Response:
    body = {"model": "claude-opus-4-5", "max_tokens": 256,
            "messages": [{"role": "user", "content": f"hello {uuid.uuid4().hex}"}]}
    # (a conversation id to look up: a first request without one loads nothing, so needs no store)
    r = httpx.post(gw.url + "/v1/messages", json=body, headers={"x-api-key": KEY, SCID: new_scid()}, timeout=20)
    assert r.status_code == 200, r.text
    return r


def by_reason(gw: ServerProcess) -> dict[str, float]:
    return {dict(labels)["reason"]: v for labels, v in scrape(gw).get(STATELESS, {}).items()}


def test_stateless_requests_are_counted_by_reason(sim: Sim, gateways: GatewayFactory,
                                                  redis_to_break: RedisServer) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_to_break.url,
                                  "GATEWAY_SECRET": "stateless-reasons-0123456789abcd",
                                  "GATEWAY_STORE_TIMEOUT_MS": "100"})
    try:
        assert by_reason(gw) == dict.fromkeys(STATELESS_REASONS - {"other"}, 0.0)  # every reason starts at zero
        ask(gw)
        assert sum(by_reason(gw).values()) == 0

        redis_to_break.pause()  # hung: the load times out (and its retry), served statelessly
        try:
            ask(gw)
        finally:
            redis_to_break.resume()
        assert metric_sum(gw, STATELESS, reason="store_timeout") == 1

        redis_to_break.stop()  # refused: unavailable until the breaker opens, then breaker_open
        for _ in range(4):
            ask(gw)
        counts = by_reason(gw)
        assert counts["store_unavailable"] >= 1 and counts["breaker_open"] >= 1, counts
        assert counts["store_unavailable"] + counts["breaker_open"] == 4, counts
        assert counts["no_store"] == counts["no_credential"] == 0
    finally:
        gw.stop()


def test_a_gateway_without_a_store_counts_no_store(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_STATE_MACHINE_ENABLED": "false"})
    try:
        ask(gw)
        assert metric_sum(gw, STATELESS, reason="no_store") == 1
    finally:
        gw.stop()

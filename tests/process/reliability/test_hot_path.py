"""The hot path's mechanisms (performance issue), each shown on a served gateway or the real store client:
an untouched request is forwarded as the very bytes the client sent; upstream and Redis connections are
pooled and kept alive across requests (no client per request); Redis replies are parsed by hiredis."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest

from state.factory import open_store
from state.redis_store import RedisStore
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer

KEY = {"x-api-key": "sk-hot-path", "anthropic-version": "2023-06-01", "content-type": "application/json"}


def _post(gw: ServerProcess, raw: bytes) -> httpx.Response:
    return httpx.post(gw.url + "/v1/messages", content=raw, headers=KEY, timeout=15)


def test_an_untouched_request_reaches_the_upstream_as_the_clients_bytes(sim: Sim, gateway: ServerProcess) -> None:
    """Nothing to repair: no re-serialisation. Odd spacing, key order and escapes survive byte for byte."""
    raw = ('{ "messages" : [ {"content": "caf\\u00e9 \u00e9 \\ud83e\\udd14 [[sim:tools=0]]",  "role":"user"} ],'
           '\n  "max_tokens": 64, "model":"claude-opus-4-5", "temperature": 1.0e0 }').encode()
    assert _post(gateway, raw).status_code == 200
    assert sim.last()["raw_sha256"] == hashlib.sha256(raw).hexdigest()


@pytest.fixture(scope="module")
def redis_gateway(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> ServerProcess:
    return gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                    "GATEWAY_SECRET": "hot-path-0123456789abcdef0123456"})


def test_upstream_and_redis_connections_are_pooled_and_kept_alive(
        sim: Sim, redis_gateway: ServerProcess, redis_server: RedisServer) -> None:
    """30 sequential tool-loop requests (each loads and records) ride one kept-alive upstream connection
    (the simulator sees one client port) and open no Redis connection (the server's count of accepted
    connections does not move): no client, session or connection per request."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=40]] pooled?"}]
    ports: set[int] = set()
    _post(redis_gateway, json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": [
        {"role": "user", "content": "warm up"}]}).encode())  # first connections opened here
    rc = redis_server.client()
    accepted = rc.info("stats")["total_connections_received"]
    for _ in range(30):
        body = {"model": "claude-opus-4-5", "max_tokens": 1024, "messages": history,
                "thinking": {"type": "enabled", "budget_tokens": 512}}
        r = _post(redis_gateway, json.dumps(body).encode())
        assert r.status_code == 200, r.text
        ports.add(sim.last()["peer_port"])
        answer = r.json()
        history += [{"role": "assistant", "content": answer["content"]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}
                                                 for b in answer["content"] if b["type"] == "tool_use"]}]
    assert len(ports) == 1, f"upstream connections used: {len(ports)}"
    assert rc.info("stats")["total_connections_received"] == accepted, "no Redis connection opened"


async def test_the_store_parses_redis_replies_with_hiredis(redis_server: RedisServer) -> None:
    """Round trips on a single node go through ``state.resp`` (hiredis by construction); what stays on
    redis-py (PING, SCRIPT LOAD; Sentinel and Cluster round trips) parses with hiredis too."""
    store = open_store(redis_server.url)
    try:
        assert isinstance(store, RedisStore) and store._node is not None
        client: Any = store.client
        conn = client.connection_pool.make_connection()
        assert type(conn._parser).__name__ == "_AsyncHiredisParser"
    finally:
        await store.close()

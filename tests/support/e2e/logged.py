"""A gateway process with the JSON access log, and reading that log: for end-to-end tests that check what the
gateway did to a request (its ``actions``), on the embedded store or a real redis-server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from state.keys import tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.reliability.loops import access_lines


def logged_gateway(request: pytest.FixtureRequest, sim: Sim, gateways: GatewayFactory,
                   secret: str) -> Iterator[ServerProcess]:
    """For a fixture parametrized by store ("embedded", or "redis": a real redis-server): a gateway with the JSON
    access log, stopped after."""
    env = {"GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_LOG_FORMAT": "json", "GATEWAY_SECRET": secret}
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        env |= {"GATEWAY_REDIS_URL": server.url, "GATEWAY_STORE_TIMEOUT_MS": "1000"}
    sp = gateways.start(sim.url, env)
    yield sp
    sp.stop()


def last_access(gw: ServerProcess, seen: int, timeout: float = 5.0) -> dict[str, Any]:
    """The access-log line of the request after the first ``seen`` ones (the gateway may write it just after
    the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = access_lines(gw.log_lines())
        if len(lines) > seen:
            return lines[seen]
        if time.monotonic() > deadline:
            raise AssertionError(f"no access-log line after {seen}:\n{gw.log()[-2000:]}")
        time.sleep(0.02)  # polling a child's log file: there is no event to await


def tenant_access(gw: ServerProcess, secret: str, api_key: str, n: int, timeout: float = 5.0) -> dict[str, Any]:
    """The access-log line of the ``n``-th request (from 1) the gateway served with ``api_key`` (its tenant, under
    ``secret``): unlike counting all lines, a line written late for an earlier request cannot be taken for it."""
    tenant = tenant_prefix(secret.encode(), api_key)
    deadline = time.monotonic() + timeout
    while True:
        lines = [rec for rec in access_lines(gw.log_lines()) if rec.get("tenant") == tenant]
        if len(lines) >= n:
            return lines[n - 1]
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(lines)} access-log lines of the tenant, not {n}:\n{gw.log()[-2000:]}")
        time.sleep(0.02)  # polling a child's log file: there is no event to await

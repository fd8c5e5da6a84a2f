"""Pytest plugin: the gateways the Gemini and OpenAI-compatible suites and the acceptance matrix
(``tests/process/e2e/test_mangling_matrix.py``) share, session scope: ``provider_gateway`` (embedded store) and
``provider_pair`` (two gateways on one redis-server), every upstream kind at the session's simulator."""

from __future__ import annotations

import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.gemini.helpers import gateway_env
from tests.support.gemini.matrix import Pair, start_pair


@pytest.fixture(scope="session")
def provider_gateway(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    return gateways.start(sim.url, gateway_env(sim))


@pytest.fixture(scope="session")
def provider_pair(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Pair:
    return start_pair(sim, gateways, redis_server)

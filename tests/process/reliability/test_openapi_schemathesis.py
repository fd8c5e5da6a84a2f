"""Schemathesis against ``gateway/openapi.yaml``, on a real gateway process (simulator upstream, Redis).

One test per documented operation, a bounded number of examples each, positive and negative
(schema-violating) data: never a 5xx, every status documented, every body matches its documented
schema (so every error is the caller's dialect envelope), and the content type is the documented one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer

SPEC = Path(__file__).resolve().parents[3] / "gateway" / "openapi.yaml"
schema = schemathesis.openapi.from_path(SPEC)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                  "GATEWAY_SECRET": "schemathesis-secret-0123456789ab",
                                  "GATEWAY_GEMINI_BASE_URL": sim.url,
                                  "GATEWAY_STORE_TIMEOUT_MS": "1000", "GATEWAY_MAX_BODY_BYTES": "65536"})
    yield sp
    sp.stop()


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
def test_every_operation_conforms(api: ServerProcess, case: schemathesis.Case) -> None:
    case.call_and_validate(base_url=api.url, headers={"x-api-key": "sk-schemathesis"}, checks=CHECKS, timeout=20)

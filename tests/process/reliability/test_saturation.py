"""Issue 22's acceptance, short form (``bench/saturation.py`` runs the 60 s one): two replicas with two workers
each on one real Redis, 16 concurrent mangled tool-loop conversations (the official anthropic SDK, thinking
dropped from every replayed turn, consecutive requests on different replicas) saturating the cores, with the
default store settings. Zero requests served statelessly, zero 4xx or other failures, every turn recorded (each
conversation exported and compared with what its client got); then the same with Redis SIGSTOPped for 300 ms
in the middle: no turn lost, no failure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import saturation
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer, running

CONVERSATIONS = 16
DURATION_S = 8.0


@pytest.fixture(scope="module")
def saturation_redis() -> Iterator[RedisServer]:
    yield from running(RedisServer())


@pytest.fixture(scope="module")
def replicas(sim: Sim, gateways: GatewayFactory, saturation_redis: RedisServer) -> Iterator[list[ServerProcess]]:
    env = saturation.replica_env(sim.url, saturation_redis.url)
    team = [gateways.start(sim.url, env, workers=2) for _ in range(2)]
    yield team
    for sp in team:
        sp.stop()


def test_saturated_replicas_serve_every_request_with_state(replicas: list[ServerProcess]) -> None:
    result = saturation.measure(replicas, CONVERSATIONS, DURATION_S)
    print("saturation:", result)
    assert result["failures"] == 0 and result["client_4xx"] == 0, result["failure_samples"]
    assert result["stateless"] == 0, result["stateless_by_reason"]
    assert result["turns_recorded"] == result["turns_expected"] > 0, result["lost_samples"]
    assert result["thinking_restored"] == result["turns_expected"]  # every turn repaired from the records
    assert result["ok"]


def test_a_300_ms_redis_pause_loses_no_turn(replicas: list[ServerProcess], saturation_redis: RedisServer) -> None:
    result = saturation.measure(replicas, CONVERSATIONS, DURATION_S, saturation_redis, sigstop_s=0.3)
    print("saturation with a 300 ms SIGSTOP:", result)
    assert result["failures"] == 0 and result["client_4xx"] == 0, result["failure_samples"]
    assert result["turns_recorded"] == result["turns_expected"] > 0, result["lost_samples"]
    assert result["record_retries"]["dropped"] == result["record_retries"]["queue_full"] == 0

"""A worker with its caches warm plans every request as a worker that holds nothing (issue 31: any replica).

One app (real simulator, real Redis) against a reference worker on the same Redis with no conversation
cache and no replay memo: every tool-loop step of every replay scenario (faithful, every message and
history mangling, edits, parameter fixes) is prepared both ways and must come out the same (outgoing bytes,
actions, conversation, position, fork), then goes upstream (the strict simulator) and is recorded. Every load
takes its round trip: a cache never decides by itself that it is current (``state.coherence``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from gateway.app.factory import Gateway, create_app
from gateway.app.settings import Settings
from gateway.pipeline import stages as pipeline
from gateway.transport.upstream import forward_request_headers
from tests.support.gateway.memo_equivalence import answered, exchange_of, prepare_both_ways, relay_and_record
from tests.support.gateway.replay_memo_tests import HEADERS, SCENARIOS


@contextlib.asynccontextmanager
async def worker_and_cold(sim_url: str, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """(a worker as configured by default, one on the same Redis that holds nothing between requests)."""
    settings = Settings(anthropic_base_url=sim_url, redis_url=redis_url, secret="warm-cold-secret",
                        store_timeout_ms=2000)
    app, cold_app = create_app(settings), create_app(dataclasses.replace(settings, load_cache_mb=0))
    async with app.router.lifespan_context(app), cold_app.router.lifespan_context(cold_app):
        yield app.state.gateway, dataclasses.replace(cold_app.state.gateway, replay_memo=None)


def load_trips() -> float:
    return REGISTRY.get_sample_value("gateway_store_round_trips_total", {"op": "load"}) or 0.0


def timed_loads() -> float:
    return REGISTRY.get_sample_value("gateway_store_operation_seconds_count", {"op": "load"}) or 0.0


@pytest.fixture()
async def pair(sim: Any, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with worker_and_cold(sim.url, redis_url) as both:
        yield both


@pytest.mark.parametrize("scid_header", [False, True])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_a_warm_worker_plans_as_a_cold_one(
        pair: tuple[Gateway, Gateway], scenario: str, scid_header: bool) -> None:
    worker, _ = pair
    step_fn = SCENARIOS[scenario]
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools=6]] weather ({scenario})"}]
    params = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    headers = dict(HEADERS)
    trips: list[float] = []
    timed: list[float] = []
    mangled: list[bool] = []
    for step in range(7):
        sent, extra = step_fn(history, step)
        mangled.append(sent != history)
        make = exchange_of({**params, **extra, "messages": sent}, endpoint="messages", dialect="anthropic",
                           headers=headers)
        before, timed_before = load_trips(), timed_loads()
        ex = await prepare_both_ways(pair, make, pipeline.prepare)
        trips.append(load_trips() - before)  # both ways: the worker's trips plus the cold one's
        timed.append(timed_loads() - timed_before)
        answer = await relay_and_record(worker, ex, forward_request_headers(ex.client.headers))
        if scid_header and ex.identity.scid:
            headers["x-ag-conversation-id"] = ex.identity.scid
        if answer["stop_reason"] != "tool_use":
            break
        answered(history, answer, f"sunny {step}")
    assert len(trips) == 7
    if scenario in ("faithful", "params fixed every request", "thinking disabled at step 3") or \
            scenario.startswith("assistant:"):
        # from the second request on, both workers go to the store, once each (the warm one by header, or by the
        # index with its hint): what a worker holds serves only as of the head its round trip reads
        # (``state.coherence``), so no load is answered from memory alone
        assert all(t == 2 for t in trips[1:]), (trips, mangled)
        assert all(t == 2 for t in timed[1:]), timed

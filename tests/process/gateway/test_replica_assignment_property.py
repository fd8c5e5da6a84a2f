"""Issue 31, item 2, the in-process property: whichever replica serves each request of a conversation, the upstream
receives what a worker that holds nothing would send.

Two gateways (replicas: every per-worker cache and continuation on) on one real Redis and one secret, in front of
the strict simulator, and a reference worker on the same Redis that holds nothing between requests (no conversation
cache, no replay memo, no continuation, no conversation hints). Hypothesis draws a client behaviour (every replay
scenario of the equivalence suite: faithful, every message and history mangling the suite knows, edits, parameter
fixes, thinking switches), whether the client sends the conversation id back, and which replica serves each request.
Every request is prepared by its replica and by the reference: the same upstream bytes and the same plan (actions,
identification, position, fork); the replica's goes upstream and is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.app.factory import Gateway, create_app
from gateway.app.settings import Settings
from gateway.pipeline import stages as pipeline
from gateway.pipeline.identify import ConversationHints
from gateway.transport.upstream import forward_request_headers
from tests.redis_fixtures import RedisServer, fresh_url
from tests.support.gateway.memo_equivalence import answered, exchange_of, plan, relay_and_record
from tests.support.gateway.replay_memo_tests import HEADERS, SCENARIOS

STEPS = 6
OFF = frozenset({"splice", "carried_repair", "carried_sanitize"})


@contextlib.asynccontextmanager
async def replicas_and_reference(sim_url: str, redis_url: str) -> AsyncIterator[tuple[list[Gateway], Gateway]]:
    settings = Settings(anthropic_base_url=sim_url, redis_url=redis_url, secret="replica-assignment-secret",
                        store_timeout_ms=2000)
    apps = [create_app(settings) for _ in range(2)]
    cold = create_app(dataclasses.replace(settings, load_cache_mb=0, replay_memo_mb=0, continuations_off=OFF))
    async with contextlib.AsyncExitStack() as stack:
        for app in (*apps, cold):
            await stack.enter_async_context(app.router.lifespan_context(app))
        yield [app.state.gateway for app in apps], cold.state.gateway


async def play(sim_url: str, redis_url: str, scenario: str, header: bool, assignment: list[int]) -> None:
    step_fn = SCENARIOS[scenario]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"[[sim:tools={STEPS}]] [[sim:parallel=2]] weather ({scenario})"}]
    params = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    headers = dict(HEADERS)
    async with replicas_and_reference(sim_url, redis_url) as (replicas, reference):
        for step, k in enumerate(assignment):
            sent, extra = step_fn(history, step)
            make = exchange_of({**params, **extra, "messages": sent}, endpoint="messages", dialect="anthropic",
                               headers=headers)
            cold = make()
            await pipeline.prepare(cold, dataclasses.replace(reference, hints=ConversationHints()))
            ex = make()
            await pipeline.prepare(ex, replicas[k])
            got, want = plan(ex), plan(cold)
            assert got[1:] == want[1:], f"step {step} on replica {k}: {got[1:]} != {want[1:]}"
            assert got[0] == want[0], f"step {step} on replica {k}: the upstream bytes differ"
            answer = await relay_and_record(replicas[k], ex, forward_request_headers(ex.client.headers))
            if header and ex.identity.scid:
                headers["x-ag-conversation-id"] = ex.identity.scid
            if answer["stop_reason"] != "tool_use":
                return
            answered(history, answer, f"sunny {step}")


ALTERNATING, LAGGING = [0, 1] * (STEPS // 2), [0, 1, 1, 1, 0, 0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
# the client shapes always, alternating and lagging, with and without the conversation id
@example(scenario="history:drop_latest_assistant", header=False, assignment=ALTERNATING)
@example(scenario="history:drop_latest_assistant", header=True, assignment=LAGGING)
@example(scenario="history:collapse_text_blocks", header=False, assignment=ALTERNATING)
@example(scenario="history:split_parallel_calls", header=True, assignment=ALTERNATING)
@example(scenario="history:split_parallel_calls_grouped", header=False, assignment=LAGGING)
@given(scenario=st.sampled_from(sorted(SCENARIOS)), header=st.booleans(),
       assignment=st.lists(st.integers(0, 1), min_size=STEPS, max_size=STEPS))
def test_any_replica_assignment_sends_what_a_worker_holding_nothing_sends(
        sim: Any, redis_server: RedisServer, scenario: str, header: bool, assignment: list[int]) -> None:
    asyncio.run(play(sim.url, fresh_url(redis_server), scenario, header, assignment))

"""Each continuation switched off alone against a worker with all of them on (``gateway.continuation.replay_memo``; the
acceptance of issue 21, item 2): every step of a faithful and of mangled tool loops (real simulator, real
Redis) goes upstream as the same bytes with the same plan (repair's and sanitize's actions, identification,
position, fork), and the switched-off worker's stages really did without it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.app.factory import Gateway
from gateway.transport.upstream import forward_request_headers
from tests.support.gateway.memo_equivalence import (
    CONTINUATIONS,
    answered,
    continuation_pair,
    exchange_of,
    step_both_ways,
)
from tests.support.gateway.replay_memo_tests import HEADERS, SCENARIOS

# faithful, a parameter fix on every request, IDE manglings of the assistant messages (restored from their
# records on every request), a mangled history (synthesized results, rewritten tool ids) and an edit
LOOPS = ("faithful", "params fixed every request", "assistant:drop_signature", "assistant:trim_thinking",
         "assistant:thinking_to_text_block", "assistant:empty_text_beside_tool_use", "history:rewrite_tool_ids",
         "earlier tool result edited")


@pytest.fixture(params=CONTINUATIONS)
async def pair(request: pytest.FixtureRequest, sim: Any, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with continuation_pair(sim.url, redis_url, request.param) as both:
        yield both


@pytest.mark.parametrize("loop", LOOPS)
async def test_a_continuation_switched_off_sends_the_same_bytes_with_the_same_plan(
        pair: tuple[Gateway, Gateway], loop: str) -> None:
    _, off = pair
    step_fn = SCENARIOS[loop]
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools=6]] weather ({loop})"}]
    params = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    resumed: list[tuple[int, int]] = []  # (all on, switched off): messages repair did not look at again
    continued: list[tuple[int, int]] = []  # ... sanitize did not
    for step in range(7):
        sent, extra = step_fn(history, step)
        make = exchange_of({**params, **extra, "messages": sent}, endpoint="messages", dialect="anthropic",
                           headers=HEADERS)
        (mine, its), answer = await step_both_ways(pair, make, forward_request_headers(HEADERS))
        resumed.append((mine.resumed if mine else 0, its.resumed if its else 0))
        continued.append((mine.continued if mine else 0, its.continued if its else 0))
        if answer["stop_reason"] != "tool_use":
            break
        answered(history, answer, f"sunny {step}")
    assert len(resumed) == 7
    if loop in ("faithful", "params fixed every request") or loop.startswith("assistant:"):
        # the worker with all of them on continued; the other did without the one switched off
        assert any(r for r, _ in resumed[2:]) and any(c for c, _ in continued[2:]), (resumed, continued)
    off_name = _switched_off(off)
    if off_name in ("memo", "carried_repair"):
        assert not any(r for _, r in resumed), resumed
    if off_name in ("memo", "carried_sanitize"):
        assert not any(c for _, c in continued), continued
    if off_name == "memo":
        assert off.replay_memo is None
    if off_name == "load_cache":
        assert off.settings.load_cache_mb == 0


def _switched_off(gw: Gateway) -> str:
    s = gw.settings
    if s.replay_memo_mb == 0:
        return "memo"
    if s.load_cache_mb == 0:
        return "load_cache"
    (name,) = s.continuations_off
    return name

"""Redis trouble: every call fails fast with StoreUnavailable, the breaker opens, and it closes again
once redis-server is back on the same port. Uses a private redis-server it may pause, kill and restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from state.errors import StoreUnavailable
from state.factory import open_store
from state.keys import new_scid
from state.redis_store import RedisStore
from state.store import LoadQuery, TurnWrite
from tests.redis_fixtures import RedisServer
from tests.support.state.factories import TENANT_A, turn

TIMEOUT_MS = 100  # (the default GATEWAY_STORE_TIMEOUT_MS is 250)
TIMEOUT_S = TIMEOUT_MS / 1000
# Timing bounds are relative to the configured timeout, with room for a loaded 2-core CI box:
# - a call that gives up by its timeout (a round trip, retried once) ends within GIVE_UP_S;
# - a call that ignores the timeout hangs on the paused server until GUARD_S ends it: the guard's
#   TimeoutError is not StoreUnavailable, so the test fails (quickly, not at the per-test timeout);
# - on the paused server any call that reaches the network costs at least TIMEOUT_S, so a call
#   that fails faster than that did not touch the network (also checked by the round-trip counter).
GIVE_UP_S = 8 * TIMEOUT_S  # (1 + RETRY_PATIENCE) timeouts, and slack
GUARD_S = 5.0
THRESHOLD = 3
COOLDOWN_S = 30.0  # never elapses by itself: the test moves the breaker's clock


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
async def faulty(restartable_redis: RedisServer) -> AsyncIterator[tuple[RedisStore, RedisServer, FakeClock]]:
    clock = FakeClock()
    store = open_store(restartable_redis.url, timeout_ms=TIMEOUT_MS, failure_threshold=THRESHOLD,
                       cooldown_seconds=COOLDOWN_S, clock=clock)
    assert isinstance(store, RedisStore)
    await store.start()
    yield store, restartable_redis, clock
    await store.close()


async def _timed_failure(store: RedisStore, i: int, match: str | None = None) -> float:
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match=match):
        async with asyncio.timeout(GUARD_S):
            if i % 2:
                await store.load(TENANT_A, LoadQuery(scid=new_scid(), tool_ids=["toolu_x"]))
            else:
                await store.record(TENANT_A, TurnWrite(turn(i, tag="fault")))
    return time.monotonic() - t0


async def test_hung_redis_times_out_opens_breaker_and_recovers_after_restart(
    faulty: tuple[RedisStore, RedisServer, FakeClock],
) -> None:
    store, server, clock = faulty
    ok = await store.record(TENANT_A, TurnWrite(turn(0)))
    assert ok.status == "appended" and store.breaker.state == "closed"

    # 1. hung server (SIGSTOP): each call gives up by its timeout (a round trip and its one retry); a pause
    # shorter than the breaker's slow_seconds does not open it, timeouts that last do
    server.pause()
    for i in range(THRESHOLD):
        elapsed = await _timed_failure(store, i, match="(?i)timeout")
        assert elapsed <= GIVE_UP_S, elapsed
    assert store.breaker.state == "closed"
    clock.now += store.breaker.slow_seconds
    await _timed_failure(store, THRESHOLD, match="(?i)timeout")
    assert store.breaker.state == "open" and store.breaker.opened_count == 1
    health = await store.health()
    assert not health.ok and health.circuit == "open"

    # 2. while open, calls fail at once without touching the (still hung) network
    round_trips = store.round_trips
    for i in range(5):
        elapsed = await _timed_failure(store, i, match="circuit open")
        assert elapsed < TIMEOUT_S, elapsed
    assert store.round_trips == round_trips

    # 3. server dies; after the cooldown one probe goes through, fails, and re-opens the circuit
    server.stop()
    clock.now += COOLDOWN_S
    assert store.breaker.state == "half_open"
    round_trips = store.round_trips
    assert await _timed_failure(store, 1) <= GIVE_UP_S
    assert store.round_trips > round_trips  # the probe went to the network (and retried the refused connect)
    assert store.breaker.state == "open" and store.breaker.opened_count == 2

    # 4. redis-server is back on the same port (empty: no persistence, no scripts loaded)
    server.start()
    assert store.breaker.state == "open"  # nothing tried yet
    clock.now += COOLDOWN_S
    res = await store.record(TENANT_A, TurnWrite(turn(1), scid=ok.scid))  # the probe; reloads scripts
    assert res.status == "appended" and res.created  # the old data went with the old process
    assert store.breaker.state == "closed" and store.breaker.consecutive_failures == 0
    assert (await store.health()).ok
    loaded = await store.load(TENANT_A, LoadQuery(scid=ok.scid, tool_ids=["toolu_t_1"]))
    assert loaded.conversation is not None and "toolu_t_1" in loaded.tool_hits


async def test_refused_connections_fail_within_timeout(
    faulty: tuple[RedisStore, RedisServer, FakeClock],
) -> None:
    store, server, _ = faulty
    server.stop()
    for i in range(THRESHOLD):
        assert await _timed_failure(store, i) <= GIVE_UP_S
    assert store.breaker.state == "open"
    health = await store.health()
    assert not health.ok and health.backend == "redis"


async def test_start_does_not_raise_when_redis_is_down(restartable_redis: RedisServer) -> None:
    restartable_redis.stop()
    store = open_store(restartable_redis.url, timeout_ms=TIMEOUT_MS)
    await store.start()  # logs, does not raise
    assert not (await store.health()).ok
    restartable_redis.start()
    assert (await store.health()).ok
    res = await store.record(TENANT_A, TurnWrite(turn(0)))  # scripts loaded lazily on NOSCRIPT
    assert res.status == "appended"
    await store.close()

"""Redis trouble: every call fails fast with StoreUnavailable, the breaker opens, and it closes again
once redis-server is back on the same port. Uses a private redis-server it may pause, kill and restart."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from state.errors import StoreUnavailable
from state.factory import open_store
from state.keys import new_scid
from state.redis_store import RedisStore
from state.store import LoadQuery, TurnWrite
from tests.redis_fixtures import RedisServer
from tests.state.factories import TENANT_A, turn

TIMEOUT_MS = 100
SLACK_S = 0.15  # scheduling slack on a busy 2-core CI box
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


async def _timed_failure(store: RedisStore, i: int) -> float:
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable):
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

    # 1. hung server (SIGSTOP): each call gives up after the timeout
    server.pause()
    for i in range(THRESHOLD):
        elapsed = await _timed_failure(store, i)
        assert elapsed <= TIMEOUT_MS / 1000 + SLACK_S, elapsed
    assert store.breaker.state == "open" and store.breaker.opened_count == 1
    health = await store.health()
    assert not health.ok and health.circuit == "open"

    # 2. while open, calls fail at once without touching the network
    for i in range(5):
        assert await _timed_failure(store, i) < 0.02

    # 3. server dies; after the cooldown one probe goes through, fails, and re-opens the circuit
    server.stop()
    clock.now += COOLDOWN_S
    assert store.breaker.state == "half_open"
    assert await _timed_failure(store, 1) <= TIMEOUT_MS / 1000 + SLACK_S
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
        assert await _timed_failure(store, i) <= TIMEOUT_MS / 1000 + SLACK_S
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

"""The store timeout bounds Redis, not the worker (issue 22, item 1).

A saturated replica runs its event loop late: a request's CPU (parsing, repair) holds the loop while
Redis's reply already waits in the socket. The timeout is measured from the write and a reply that has
arrived is read, however late the loop gets to it; a Redis that really does not answer (SIGSTOP) still
times out, and a timed-out round trip is retried once before the call fails. Real redis-server, reached
over plain TCP and over TLS (``rediss://``: the same fast path, ``state.resp``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TypeVar

import pytest

from state.errors import StoreTimeout
from state.factory import open_store
from state.keys import new_scid
from state.redis_store import RETRY_PATIENCE, RedisStore
from state.store import LoadQuery, TurnWrite
from tests.redis_fixtures import RedisServer
from tests.support.state.factories import TENANT_A, turn

pytestmark = pytest.mark.process  # (the servers come through the ``server`` fixture's parameter)
T = TypeVar("T")
TIMEOUT_MS = 100
LAG_S = 0.4  # the event loop held this long right after the write: four times the store timeout


def hold_the_loop(seconds: float) -> None:
    """What a saturated worker does to its event loop: CPU for other requests, no awaiting."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture(params=["tcp", "tls"])
def server(request: pytest.FixtureRequest) -> RedisServer:
    """A private redis-server the test may SIGSTOP, reached over plain TCP or TLS."""
    return request.getfixturevalue("restartable_redis" if request.param == "tcp" else "restartable_tls_redis")


@pytest.fixture()
async def lagged(server: RedisServer) -> AsyncIterator[RedisStore]:
    store = open_store(server.url, timeout_ms=TIMEOUT_MS)
    assert isinstance(store, RedisStore)
    await store.start()
    yield store
    await store.close()


async def _after_the_write(store: RedisStore, call: asyncio.Future[T]) -> T:
    """Let ``call`` write its commands (its task runs up to the write and awaits the reply), then hold the
    loop while Redis answers."""
    before = store.round_trips
    for _ in range(10):
        if store.round_trips > before:
            break
        await asyncio.sleep(0)  # one step of the call's task
    assert store.round_trips > before and not call.done()
    hold_the_loop(LAG_S)
    return await call


async def test_a_late_event_loop_is_not_a_slow_redis(lagged: RedisStore) -> None:
    scid = new_scid()
    ok = await lagged.record(TENANT_A, TurnWrite(turn(0), scid=scid, expected_position=0))
    assert ok.status == "appended"
    for i in range(1, 6):
        rec = asyncio.ensure_future(lagged.record(TENANT_A, TurnWrite(turn(i), scid=scid, expected_position=i)))
        assert (await _after_the_write(lagged, rec)).status == "appended"
        load = asyncio.ensure_future(lagged.load(TENANT_A, LoadQuery(scid=scid, tool_ids=[f"toolu_t_{i}"])))
        loaded = await _after_the_write(lagged, load)
        assert loaded.conversation is not None and f"toolu_t_{i}" in loaded.tool_hits
    assert lagged.breaker.state == "closed" and lagged.breaker.consecutive_failures == 0


async def test_a_redis_that_does_not_answer_still_times_out_after_one_retry(
        lagged: RedisStore, server: RedisServer) -> None:
    await lagged.record(TENANT_A, TurnWrite(turn(0)))
    connections = lagged._node.connections_made if lagged._node else 0
    server.pause()
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreTimeout):
            await lagged.load(TENANT_A, LoadQuery(scid=new_scid(), tool_ids=["toolu_x"]))
        elapsed = time.monotonic() - t0
    finally:
        server.resume()
    # the round trip's TIMEOUT_MS, then its retry's RETRY_PATIENCE x TIMEOUT_MS on a fresh connection, inside the
    # call's budget
    assert (1 + RETRY_PATIENCE) * TIMEOUT_MS / 1000 <= elapsed < lagged.budget_s, elapsed
    # the retry went to a fresh connection (over TLS: the one whose handshake the hung server never answered, which
    # the same timeout bounds, so it is not counted as made)
    assert lagged._node is not None and lagged._node.connections_made == connections + (server.tls is None)
    assert lagged.breaker.state == "closed"  # one slow call is not an outage


async def test_a_pause_shorter_than_two_timeouts_is_ridden_through(
        lagged: RedisStore, server: RedisServer) -> None:
    """Redis SIGSTOPped for 300 ms (a fork, a slow disk): the call's retry gets the answer."""
    scid = new_scid()
    await lagged.record(TENANT_A, TurnWrite(turn(0), scid=scid, expected_position=0))
    server.pause()
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, server.resume)
    res = await lagged.record(TENANT_A, TurnWrite(turn(1), scid=scid, expected_position=1))
    assert res.status in ("appended", "duplicate") and res.position == 1  # (the first write ran on SIGCONT)
    conv = await lagged.get_conversation(TENANT_A, scid)
    assert conv is not None and [t.content[-1]["id"] for t in conv.turns] == ["toolu_t_0", "toolu_t_1"]

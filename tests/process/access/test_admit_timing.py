"""A wrong secret is answered no sooner than a right one (issue 35: "no timing difference measurable between a wrong
key and a right one of the same length"): on a real redis-server, ADMIT with a wrong secret runs the same commands
as with the right one up to the first write, then reads where the right one writes, and writes nothing. The
measured medians are in BENCHMARKS.md (``bench/key_cost.py``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.access import admission
from state.factory import open_store
from state.gateway_keys import KeyRecord
from state.store import Store

KEY_ID = "0123456789ab"
RIGHT = admission.secret_hash("r" * 43)
WRONG = admission.secret_hash("w" * 43)


@pytest.fixture()
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = open_store(redis_url)
    await s.start()
    try:
        yield s
    finally:
        await s.close()


async def _calls(r: aioredis.Redis) -> dict[str, int]:
    stats = await r.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def _admit_counting(store: Store, r: aioredis.Redis, digest: str) -> tuple[str, dict[str, int]]:
    before = await _calls(r)
    got = await store.admit(KEY_ID, digest, int(time.time() * 1000))
    after = await _calls(r)
    return got.status, {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


@pytest.mark.parametrize("limits", [
    {},
    {"rpm": 600, "tpm": 1_000_000, "budget_micros": 10**12, "budget_usd": "1000000", "concurrency": 50},
])
async def test_a_wrong_secret_reads_what_a_right_one_reads_and_writes_nothing(store: Store, redis_url: str,
                                                                               limits: dict[str, object]) -> None:
    await store.key_put(KeyRecord(KEY_ID, "timing", RIGHT, **limits), create=True)  # type: ignore[arg-type]
    r = aioredis.from_url(redis_url)
    try:
        wrong_status, wrong = await _admit_counting(store, r, WRONG)
        right_status, right = await _admit_counting(store, r, RIGHT)
    finally:
        await r.aclose()
    assert (wrong_status, right_status) == ("unknown", "ok")
    writes = ("set", "incr", "decr", "pexpire", "incrby")
    assert not any(wrong.get(k) for k in writes)
    assert any(right.get(k) for k in writes) == bool(limits)
    assert wrong.get("hmget") == right.get("hmget") == 1
    assert wrong.get("get", 0) >= right.get("get", 0) == (3 if limits else 0)  # the budget, tokens and rate, both
    assert sum(wrong.values()) >= sum(right.values()), (wrong, right)  # reads where a right secret writes

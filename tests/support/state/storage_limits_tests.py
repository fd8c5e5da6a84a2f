"""The per-tenant storage limits (issue 22, item 4), on every backend: a tenant past its budget of recorded bytes
gets ``TenantOverBudget`` (its turns are not recorded; other tenants are not affected), and a record whose stored
form is larger than the prompt cap is stored without its prompt."""

from __future__ import annotations

import os

import pytest
import redis

from state import records
from state.engine import StorageLimits
from state.keys import tenant_bytes_key
from state.memory_store import MemoryStore
from state.store import TenantOverBudget, TurnWrite
from tests.support.state.factories import TENANT_A, TENANT_B, big_turn, turn
from tests.support.state.fixtures import MakeStore


def _stored(i: int = 0) -> int:
    """The stored bytes of one ``big_turn`` (what the counter adds per record)."""
    return len(records.encode_turn(big_turn(i)))


async def test_a_tenant_past_its_budget_is_not_recorded_and_others_are(make_store: MakeStore) -> None:
    one = _stored()
    store = await make_store(limits=StorageLimits(tenant_budget_bytes=3 * one + one // 2))
    recorded = 0
    with pytest.raises(TenantOverBudget):
        for i in range(10):
            await store.record(TENANT_A, TurnWrite(big_turn(i)))
            recorded += 1
    assert recorded == 4  # the fourth crossed the budget (recorded: its reply told the worker), the fifth refused
    conv_b = await store.record(TENANT_B, TurnWrite(big_turn(0)))  # another tenant: its own budget
    assert conv_b.status == "appended"


async def test_the_counter_lives_with_the_records_ttl(make_store: MakeStore, raw_nodes: list[redis.Redis]) -> None:
    store = await make_store(limits=StorageLimits(tenant_budget_bytes=1 << 20), ttl_seconds=600)
    await store.record(TENANT_A, TurnWrite(turn(0)))
    key = tenant_bytes_key(TENANT_A)
    seen = []
    for node in raw_nodes:  # (memory: nothing to look at from outside; a cluster: the node that owns the slot)
        try:
            value, ttl = node.get(key), node.ttl(key)
        except redis.exceptions.MovedError:
            continue
        seen.append((int(value), ttl))
    assert all(v > 0 and 0 < ttl <= 600 for v, ttl in seen) and len(seen) == min(1, len(raw_nodes))


async def test_a_record_larger_than_the_prompt_cap_is_stored_without_its_prompt(make_store: MakeStore) -> None:
    store = await make_store(limits=StorageLimits(max_prompt_bytes=4096))
    pasted = os.urandom(12_000).hex()  # incompressible: ~24 KB stored
    prompt = [{"role": "user", "content": [{"type": "text", "text": pasted}]}]
    small = await store.record(TENANT_A, TurnWrite(turn(0, prompt=[{"role": "user", "content": "hi"}])))
    big = await store.record(TENANT_A, TurnWrite(turn(1, prompt=prompt), scid=small.scid))
    assert not small.prompt_capped and big.prompt_capped
    conv = await store.get_conversation(TENANT_A, small.scid)
    assert conv is not None
    first, second = conv.turns
    assert first.prompt == [{"role": "user", "content": "hi"}] and second.prompt == []
    assert second.content == turn(1).content  # the turn itself is whole


async def test_an_over_budget_tenant_is_checked_again_after_the_recheck_window() -> None:
    now = [1000.0]
    one = _stored()  # (turns differ by a few bytes: ids, times; the budget leaves half a turn of margin)
    store = MemoryStore(limits=StorageLimits(tenant_budget_bytes=int(2.5 * one)), clock=lambda: now[0])
    await store.record(TENANT_A, TurnWrite(big_turn(0)))
    await store.record(TENANT_A, TurnWrite(big_turn(1)))
    await store.record(TENANT_A, TurnWrite(big_turn(2)))  # crosses the budget
    with pytest.raises(TenantOverBudget):
        await store.record(TENANT_A, TurnWrite(big_turn(3)))
    now[0] += 31  # the worker records one to ask the counter again: still over
    await store.record(TENANT_A, TurnWrite(big_turn(4)))
    with pytest.raises(TenantOverBudget):
        await store.record(TENANT_A, TurnWrite(big_turn(5)))
    now[0] += 86400  # the window (the records' TTL) is over: the counter starts again
    await store.record(TENANT_A, TurnWrite(big_turn(6)))
    await store.record(TENANT_A, TurnWrite(big_turn(7)))

"""``RecordRetry``: a turn whose record failed is recorded again in the background; bounded queue, bounded
attempts, clean shutdown (issue 22, item 1)."""

from __future__ import annotations

import asyncio

from gateway.continuation.outage import RecordRetry
from state.errors import CodecError, StoreTimeout
from state.memory_store import MemoryStore
from state.store import LoadQuery, RecordResult, TurnWrite
from tests.support.state.factories import TENANT_A, turn


class Flaky(MemoryStore):
    """A memory store whose first ``failures`` records raise ``error``."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.error = error or StoreTimeout("memory: timeout")
        self.calls = 0

    async def record(self, tenant: str, write: TurnWrite) -> RecordResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return await super().record(tenant, write)


async def test_a_failed_record_is_recorded_in_the_background() -> None:
    store = Flaky(failures=2)
    retry = RecordRetry(store, pauses=(0, 0, 0))
    retry.start()
    write = TurnWrite(turn(0), scid="c" * 32, expected_position=0)
    assert retry.submit(TENANT_A, write)
    await retry.idle()
    conv = await store.get_conversation(TENANT_A, "c" * 32)
    assert conv is not None and len(conv.turns) == 1
    assert (store.calls, retry.recorded, retry.dropped) == (3, 1, 0)
    await retry.close()


async def test_attempts_are_bounded() -> None:
    store = Flaky(failures=10)
    retry = RecordRetry(store, pauses=(0, 0, 0))
    retry.start()
    retry.submit(TENANT_A, TurnWrite(turn(0)))
    await retry.idle()
    assert (store.calls, retry.recorded, retry.dropped) == (3, 0, 1)
    await retry.close()


async def test_a_turn_that_cannot_be_encoded_is_not_retried() -> None:
    store = Flaky(failures=10, error=CodecError("bad"))
    retry = RecordRetry(store, pauses=(0, 0, 0))
    retry.start()
    retry.submit(TENANT_A, TurnWrite(turn(0)))
    await retry.idle()
    assert (store.calls, retry.dropped) == (1, 1)
    await retry.close()


async def test_the_queue_is_bounded_and_shutdown_drops_what_is_left() -> None:
    store = Flaky(failures=0)
    retry = RecordRetry(store, capacity=2, pauses=(60,))  # never due before the shutdown
    retry.start()
    assert retry.submit(TENANT_A, TurnWrite(turn(0)))
    assert retry.submit(TENANT_A, TurnWrite(turn(1)))
    await asyncio.sleep(0)  # the task takes the first one and waits for its due time
    assert retry.submit(TENANT_A, TurnWrite(turn(2)))
    assert not retry.submit(TENANT_A, TurnWrite(turn(3)))  # full
    await retry.close()
    assert store.calls == 0 and retry.pending == 0 and retry.dropped == 3


async def test_a_turn_served_without_a_load_is_placed_by_it_once_the_store_answers() -> None:
    """Issue 32 item 4: a turn served while the store was away carries its request's load (``placed_by``): recorded,
    it goes into the conversation that load finds then (here by a tool id of its first turn), at the place the request
    gave it, and a later turn that arrives first leaves that place as a gap the turn fills in place."""
    store = Flaky(failures=0)
    first = await store.record(TENANT_A, TurnWrite(turn(0)))
    later = await store.record(TENANT_A, TurnWrite(turn(2), scid=first.scid, expected_position=2))
    assert later.position == 2
    tool_id = next(b["id"] for b in turn(0).content if b["type"] == "tool_use")
    retry = RecordRetry(store, pauses=(0, 0, 0))
    retry.start()
    assert retry.submit(TENANT_A, TurnWrite(turn(1), expected_position=1), placed_by=LoadQuery(tool_ids=[tool_id]))
    await retry.idle()
    conv = await store.get_conversation(TENANT_A, first.scid)
    assert conv is not None and [t.position for t in conv.turns] == [0, 1, 2]
    assert conv.turn_at(1) is not None and conv.turn_at(1).turn_id == turn(1).turn_id  # type: ignore[union-attr]
    assert retry.recorded == 1
    await retry.close()

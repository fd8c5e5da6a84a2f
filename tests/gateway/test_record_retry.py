"""``RecordRetry``: a turn whose record failed is recorded again in the background; bounded queue, bounded
attempts, clean shutdown (issue 22, item 1)."""

from __future__ import annotations

import asyncio

from gateway.record_retry import RecordRetry
from state.errors import CodecError, StoreTimeout
from state.memory_store import MemoryStore
from state.store import RecordResult, TurnWrite
from tests.state.factories import TENANT_A, turn


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

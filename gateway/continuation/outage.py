"""While the store is away: turns whose record failed, recorded again in the background (``RecordRetry``), and the
thinking this worker relayed, so that a client's faithful replay of it is still verified (``Journal``).

``RecordRetry``: turns whose record failed (the store timed out or was away), recorded again in the background so the
conversation's next request still finds them. A bounded queue (``capacity``; a turn that does not fit is dropped and
counted ``queue_full``), one task per worker started and stopped by the app's lifespan, at most ``len(pauses)``
attempts per turn, each after its pause (0.1 s ... 4 s: longer, all told, than the circuit breaker's cooldown, so a
Redis restart is outlived). Replaying a write is safe: the same turn id at its position is a duplicate, a forking
write lands on the same fork (``Store.record``). Only ``StoreUnavailable`` is retried; anything else is the turn's
own fault. A turn served while the store was away (its load failed too) is *placed* when it is recorded: its
request's load (``placed_by``) is asked again first, and the turn goes into the conversation it finds then (else the
one the client named, else a new one), at the position the request gave it. Counted in
``gateway_record_retries_total{outcome}``.

``Journal``: without the store a replayed thinking block cannot be checked against its record, so sanitize degrades
it; but a block this very worker handed the client is authentic when its bytes are the same. The journal keeps, per
tenant, the SHA-256 of each relayed thinking text with the signature it came with (and of each redacted block's
data), in a bounded LRU (``ENTRIES``). It is content-addressed: an entry names exact bytes and the signature the
upstream minted for them, so it cannot be stale (``state.coherence``); it only vouches, while the store is away or
has just come back (``pipeline.OUTAGE_GRACE_S``), for blocks no record covers. A turn another replica relayed is not
in it: that one's thinking is degraded until its deferred record lands (``RecordRetry``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.dialects.canonical import Block, RedactedThinkingBlock, ThinkingBlock
from gateway.ops import metrics
from gateway.pipeline import identify
from state.coherence import Lru
from state.keys import exact_hash
from state.store import LoadQuery, Store, StoreUnavailable, TurnWrite

log = logging.getLogger("thinkgate.record_retry")
PAUSES_SECONDS = (0.1, 0.5, 1.0, 2.0, 4.0)
CAPACITY = 1000


@dataclass(frozen=True, slots=True)
class _Pending:
    tenant: str
    write: TurnWrite
    attempt: int  # attempts made so far (background ones)
    due: float    # loop time of the next attempt
    placed_by: LoadQuery | None = None  # the load that finds the turn's conversation (a turn served without one)


class RecordRetry:
    def __init__(self, store: Store, *, capacity: int = CAPACITY,
                 pauses: tuple[float, ...] = PAUSES_SECONDS) -> None:
        self.store = store
        self.pauses = pauses
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(capacity)
        self._task: asyncio.Task[None] | None = None
        self.recorded = 0
        self.dropped = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="thinkgate-record-retry")

    async def close(self) -> None:
        """Stop the task; turns still waiting are dropped (counted, logged)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        left = self._queue.qsize()
        while not self._queue.empty():
            self._queue.get_nowait()
        if left:
            self._drop(left)
            log.warning("shutting down with %d turn(s) still to record; not recorded", left)

    def submit(self, tenant: str, write: TurnWrite, placed_by: LoadQuery | None = None) -> bool:
        """Queue a turn whose record failed (``placed_by``: or that was served without a load, placed by this one
        when it is recorded); False (and counted) when the queue is full."""
        return self._put(_Pending(tenant, write, 0, asyncio.get_running_loop().time() + self.pauses[0], placed_by))

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def idle(self) -> None:
        """Until every queued turn was recorded or dropped (tests)."""
        await self._queue.join()

    def _put(self, item: _Pending) -> bool:
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            metrics.observe_record_retry("queue_full")
            log.warning("background record queue full; turn not recorded")
            return False
        metrics.observe_record_retry("queued")
        return True

    def _drop(self, n: int = 1) -> None:
        self.dropped += n
        metrics.observe_record_retry("dropped", n)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await self._queue.get()
            try:
                wait = item.due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)  # the item's backoff: nothing to await but time
                await self._attempt(item, loop.time())
            except asyncio.CancelledError:  # shutting down: this one is not recorded either
                self._drop()
                log.warning("shutting down while a turn waited to be recorded; not recorded")
                raise
            finally:
                self._queue.task_done()

    async def _placed(self, item: _Pending) -> TurnWrite:
        """The write, in the conversation its load finds now (one round trip), for a turn served without one."""
        if item.placed_by is None:
            return item.write
        found = identify.identify_conversation(await self.store.load(item.tenant, item.placed_by), item.placed_by)
        return dataclasses.replace(item.write, scid=found.scid or item.write.scid)

    async def _attempt(self, item: _Pending, now: float) -> None:
        try:
            await self.store.record(item.tenant, await self._placed(item))
        except StoreUnavailable as e:
            attempt = item.attempt + 1
            if attempt < len(self.pauses):
                with contextlib.suppress(asyncio.QueueFull):  # (full: given up on, below)
                    self._queue.put_nowait(dataclasses.replace(item, attempt=attempt, due=now + self.pauses[attempt]))
                    return
            log.warning("background record gave up after %d attempt(s) (%s); turn not recorded", attempt,
                        type(e).__name__)
            self._drop()
            return
        except Exception as e:  # the turn's own fault (codec, malformed): retrying cannot help
            log.warning("background record failed (%s); turn not recorded", type(e).__name__)
            self._drop()
            return
        self.recorded += 1
        metrics.observe_record_retry("recorded")
        log.info("turn recorded by the background retry (attempt %d)", item.attempt + 1)


# --- the journal of relayed thinking ---

ENTRIES = 100_000  # ~150 bytes each: about 15 MB at most per worker


class Journal:
    def __init__(self, entries: int = ENTRIES) -> None:
        self._seen: Lru[tuple[str, str], str] = Lru(entries)

    def __len__(self) -> int:
        return len(self._seen)

    def note(self, tenant: str, blocks: Iterable[Block]) -> None:
        """The blocks of a turn this worker relayed to ``tenant``."""
        for b in blocks:
            key = _key(b)
            if key is not None:
                self._seen.put((tenant, key[0]), key[1])

    def vouches(self, tenant: str, block: Block) -> bool:
        """``block`` is exactly a thinking block this worker relayed to ``tenant``, signature included."""
        key = _key(block)
        return key is not None and self._seen.get((tenant, key[0])) == key[1]


def _key(b: Block) -> tuple[str, str] | None:
    if isinstance(b, ThinkingBlock) and b.thinking is not None and b.signature:
        return "t" + exact_hash(b.thinking), b.signature
    if isinstance(b, RedactedThinkingBlock) and b.data:
        return "r" + exact_hash(b.data), ""
    return None

"""The store, instrumented: ``InstrumentedStore`` wraps any ``Store`` (the app's, ``instrument_store``), times every
call into ``gateway_store_operation_seconds``, counts failures by kind (``store_error_kind``) and round trips, and
keeps ``gateway_store_circuit_open`` current. The metrics themselves are defined in ``gateway.ops.metrics``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.ops.metrics import (
    STORAGE_LIMITED,
    STORE_CIRCUIT_OPEN,
    STORE_ERRORS,
    STORE_OP_SECONDS,
    STORE_ROUND_TRIPS,
    child,
)
from state.store import (
    LoadQuery,
    LoadResult,
    RecordResult,
    Store,
    StoreError,
    StoreHealth,
    StoreTimeout,
    StoreUnavailable,
    TenantOverBudget,
)

if TYPE_CHECKING:
    from state.records import ConversationState
    from state.store import TurnWrite

T = TypeVar("T")


class InstrumentedStore:
    """The ``Store`` protocol around another store: times every call, counts failures by kind and
    keeps ``gateway_store_circuit_open`` current (state/ never imports gateway/)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.backend = inner.backend

    def __getattr__(self, name: str) -> Any:  # diagnostics (round_trips, breaker, ...) pass through
        return getattr(self.inner, name)

    async def start(self) -> None:
        await self.inner.start()
        self._circuit()

    async def close(self) -> None:
        await self.inner.close()

    async def health(self) -> StoreHealth:
        h = await self._call("health", self.inner.health())
        if not h.ok:
            child(STORE_ERRORS, "health", "timeout" if "timeout" in h.detail.lower() else "unavailable").inc()
        STORE_CIRCUIT_OPEN.set(0 if h.circuit == "closed" else 1)
        return h

    async def load(self, tenant: str, query: LoadQuery) -> LoadResult:
        # a load the worker answered itself (no round trip) is not a store call's duration
        result = await self._call("load", self.inner.load(tenant, query), timed=lambda r: r.round_trips > 0)
        child(STORE_ROUND_TRIPS, "load").inc(result.round_trips)
        return result

    async def record(self, tenant: str, write: TurnWrite) -> RecordResult:
        result = await self._call("record", self.inner.record(tenant, write))
        child(STORE_ROUND_TRIPS, "record").inc(result.round_trips)
        if result.prompt_capped:
            child(STORAGE_LIMITED, "prompt_capped").inc()
        return result

    async def get_conversation(self, tenant: str, scid: str) -> ConversationState | None:
        return await self._call("get_conversation", self.inner.get_conversation(tenant, scid))

    async def _call(self, op: str, call: Awaitable[T], timed: Callable[[T], bool] | None = None) -> T:
        """``timed``: whether a result's duration is observed (failures always are)."""
        started = time.perf_counter()
        result: T | None = None
        try:
            result = await call
            return result
        except TenantOverBudget:  # a limit doing its job, not a store fault (no store-error alert)
            child(STORAGE_LIMITED, "tenant_budget").inc()
            raise
        except (StoreError, ValueError) as e:
            child(STORE_ERRORS, op, store_error_kind(e)).inc()
            raise
        finally:
            if result is None or timed is None or timed(result):
                child(STORE_OP_SECONDS, op).observe(time.perf_counter() - started)
            self._circuit()

    def _circuit(self) -> None:
        breaker = getattr(self.inner, "breaker", None)
        state = getattr(breaker, "state", "closed")
        STORE_CIRCUIT_OPEN.set(0 if state == "closed" else 1)


def store_error_kind(e: BaseException) -> str:
    if isinstance(e, StoreTimeout):
        return "timeout"
    if isinstance(e, StoreUnavailable):
        if e.__cause__ is None:
            return "circuit_open"  # raised before any I/O: the breaker refused the call
        return "timeout" if isinstance(e.__cause__, TimeoutError) else "unavailable"
    if isinstance(e, StoreError):
        return "codec" if type(e).__name__ == "CodecError" else "other"
    return "invalid" if isinstance(e, ValueError) else "other"


def instrument_store(store: Store | None) -> Store | None:
    if store is None or isinstance(store, InstrumentedStore):
        return store
    return InstrumentedStore(store)

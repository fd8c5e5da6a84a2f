"""The state package's errors. ``state.store`` re-exports them; catch ``StoreError`` for all of them."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the state package raises on purpose."""


class StoreUnavailable(StoreError):
    """The backend did not answer in time, failed, or the circuit breaker is open.

    The gateway treats this as "no state available" and carries on statelessly; it must never turn
    into a client-visible error.
    """


class StoreTimeout(StoreUnavailable):
    """The backend did not answer a round trip within the store timeout (measured from the write),
    retried once, or the whole call outlived its budget. A slow store, not a missing one."""


class CircuitOpen(StoreUnavailable):
    """The circuit breaker refused the call without touching the network (the backend failed just now)."""


class CodecError(StoreError):
    """Bytes could not be encoded or decoded (unknown version byte, corrupt msgpack, wrong shape)."""


class TenantOverBudget(StoreError):
    """The tenant recorded more than its storage budget in the current window: the turn is not recorded (the
    request is served all the same; its conversation continues statelessly). Not a store fault."""

"""A small circuit breaker so a dead Redis costs nothing per request.

closed --(``failure_threshold`` consecutive failures)--> open --(``cooldown_seconds``)--> half_open
half_open: exactly one probe call goes through; success -> closed, failure -> open again.

A failure is a backend that refused, reset or rejected us (``on_failure``): a real outage, so the breaker
opens after ``failure_threshold`` of them in a row. A timeout (``on_timeout``) is a slow backend, not a
missing one: it counts among the consecutive failures, but opens the breaker only once calls have gone
unanswered for ``slow_seconds`` (a backend hung for longer than a pause: a 300 ms SIGSTOP, a fork for a
snapshot, a loaded box, must not make every request of the next ``cooldown_seconds`` stateless).
While open (or while the probe is in flight), ``acquire()`` returns False and the caller fails fast.
The clock is injectable (monotonic seconds) so tests move time instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(self, failure_threshold: int = 3, cooldown_seconds: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, slow_seconds: float = 1.0) -> None:
        if failure_threshold < 1 or cooldown_seconds < 0 or slow_seconds < 0:
            raise ValueError("failure_threshold must be >= 1, cooldown_seconds and slow_seconds >= 0")
        self.slow_seconds = slow_seconds
        self._slow_since: float | None = None  # when the current run of timeouts began
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self.opened_count = 0  # times the circuit opened (for metrics/tests)

    @property
    def state(self) -> BreakerState:
        if self._state == "open" and self._clock() - self._opened_at >= self.cooldown_seconds:
            return "half_open"
        return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def acquire(self) -> bool:
        """May a call go to the backend now? Every True must be followed by exactly one of
        ``on_success`` / ``on_failure`` / ``on_abandon``."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._state = "half_open"
            self._probing = True
            return True
        return False

    def on_success(self) -> None:
        self._state = "closed"
        self._failures = 0
        self._probing = False
        self._slow_since = None

    def on_timeout(self) -> None:
        """The backend did not answer in time: opens the breaker only once the timeouts have lasted
        ``slow_seconds`` (and ``failure_threshold`` calls failed in a row), or when it was the probe."""
        now = self._clock()
        if self._slow_since is None:
            self._slow_since = now
        if self._probing or now - self._slow_since >= self.slow_seconds:
            self.on_failure()
        else:
            self._failures += 1

    def on_failure(self) -> None:
        self._failures += 1
        was_probe, self._probing = self._probing, False
        if was_probe or (self._state == "closed" and self._failures >= self.failure_threshold):
            if self._state != "open":
                self.opened_count += 1
            self._state = "open"
            self._opened_at = self._clock()

    def on_abandon(self) -> None:
        """The call ended without telling anything about the backend (cancelled, or a local bug)."""
        if self._probing:
            self._probing = False
            self._state = "open"  # stays eligible for an immediate new probe (cooldown already spent)

"""Circuit breaker state machine, driven by a fake clock."""

from __future__ import annotations

import pytest

from state.breaker import CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_opens_after_k_consecutive_failures_and_success_resets() -> None:
    b = CircuitBreaker(failure_threshold=3, cooldown_seconds=10, clock=Clock())
    for _ in range(2):
        assert b.acquire()
        b.on_failure()
    assert b.acquire()
    b.on_success()  # not consecutive any more
    for _ in range(2):
        assert b.acquire()
        b.on_failure()
    assert b.state == "closed"
    assert b.acquire()
    b.on_failure()
    assert b.state == "open" and not b.acquire() and b.opened_count == 1


def test_half_open_allows_a_single_probe() -> None:
    clock = Clock()
    b = CircuitBreaker(failure_threshold=1, cooldown_seconds=5, clock=clock)
    assert b.acquire()
    b.on_failure()
    clock.t = 4.9
    assert b.state == "open" and not b.acquire()
    clock.t = 5.0
    assert b.state == "half_open"
    assert b.acquire()  # the probe
    assert not b.acquire()  # everyone else still fails fast
    b.on_failure()
    assert b.state == "open" and b.opened_count == 2
    clock.t = 10.0
    assert b.acquire()
    b.on_success()
    assert b.state == "closed" and b.acquire() and b.consecutive_failures == 0


def test_abandoned_probe_frees_the_slot() -> None:
    clock = Clock()
    b = CircuitBreaker(failure_threshold=1, cooldown_seconds=1, clock=clock)
    b.acquire()
    b.on_failure()
    clock.t = 2
    assert b.acquire()
    b.on_abandon()
    assert b.state == "half_open" and b.acquire()


def test_validation() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(failure_threshold=0)


def test_timeouts_open_only_once_they_last_slow_seconds() -> None:
    """A slow store is not a missing one: a burst of timeouts (every request in flight during a 300 ms pause)
    leaves the breaker closed; timeouts that go on for ``slow_seconds`` open it."""
    clock = Clock()
    b = CircuitBreaker(failure_threshold=3, cooldown_seconds=2, clock=clock, slow_seconds=1.0)
    for _ in range(20):
        assert b.acquire()
        b.on_timeout()
    clock.t += 0.3
    assert b.acquire()
    b.on_success()  # the pause ended: the run of timeouts is over
    assert b.state == "closed" and b.consecutive_failures == 0
    for _ in range(5):
        assert b.acquire()
        b.on_timeout()
    clock.t += 0.99
    b.on_timeout()
    assert b.state == "closed"
    clock.t += 0.01
    b.on_timeout()
    assert b.state == "open" and b.opened_count == 1
    assert not b.acquire()


def test_hard_failures_still_open_at_the_threshold() -> None:
    """Refused, reset, rejected: an outage fails fast after ``failure_threshold`` in a row, timeouts or not."""
    b = CircuitBreaker(failure_threshold=3, cooldown_seconds=2, clock=Clock(), slow_seconds=1.0)
    b.on_timeout()
    b.on_failure()
    assert b.state == "closed"
    b.on_failure()
    assert b.state == "open"


def test_a_probe_that_times_out_reopens_at_once() -> None:
    clock = Clock()
    b = CircuitBreaker(failure_threshold=1, cooldown_seconds=2, clock=clock, slow_seconds=60)
    b.on_failure()
    clock.t += 2
    assert b.acquire() and b.state == "half_open"
    b.on_timeout()
    assert b.state == "open" and b.opened_count == 2

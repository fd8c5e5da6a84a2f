"""``gateway.transport.upstream``: which answers are retried before the first byte, and after how long (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import orjson
import pytest

from gateway.app.settings import Settings
from gateway.transport.upstream import RetryPolicy, retry_after_header, retry_after_seconds, retry_delay_in_body

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, None),
    ({"retry-after": "3"}, 3.0),
    ({"retry-after": " 0.5 "}, 0.5),
    ({"retry-after": "-1"}, None),
    ({"retry-after": "inf"}, None),
    ({"retry-after": "nan"}, None),
    ({"retry-after": "soon"}, None),
    ({"retry-after": format_datetime(NOW + timedelta(seconds=7), usegmt=True)}, 7.0),
    ({"retry-after": format_datetime(NOW - timedelta(seconds=7), usegmt=True)}, 0.0),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"retry-after-ms": "x", "retry-after": "9"}, 9.0),
])
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers, now=lambda: NOW) == expected


def _google(delay: object, *, wrap: bool = False, kind: str = "type.googleapis.com/google.rpc.RetryInfo") -> bytes:
    err = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.Help", "links": []}, {"@type": kind, "retryDelay": delay}]}}
    return orjson.dumps([err] if wrap else err)


@pytest.mark.parametrize(("body", "expected"), [
    (_google("38s"), 38.0),
    (_google("45.837906927s"), 45.837906927),
    (_google("0s"), 0.0),
    (_google("7s", wrap=True), 7.0),  # the list-wrapped envelope
    (_google("7s", kind="type.googleapis.com/google.rpc.QuotaFailure"), None),
    (_google("7"), None), (_google("-7s"), None), (_google("7.s"), None), (_google("1e3s"), None),
    (_google(7), None), (_google(None), None),
    (b'{"error": {"code": 429, "message": "Resource exhausted."}}', None),  # Vertex: no details
    (b'{"type": "error", "error": {"type": "rate_limit_error", "message": "x"}}', None),  # Anthropic
    (b"not json", None), (b"[]", None), (b'"s"', None),
])
def test_retry_delay_in_a_google_error_body(body: bytes, expected: float | None) -> None:
    assert retry_delay_in_body(body) == expected


def test_a_retry_after_header_is_whole_seconds_rounded_up() -> None:
    assert [retry_after_header(s) for s in (0.0, 0.2, 45.837906927, 38.0)] == ["0", "1", "46", "38"]


def policy(retries: int = 2, max_delay: float = 5.0) -> RetryPolicy:
    return RetryPolicy(retries, max_delay, base_delay_s=0.5, rand=lambda lo, hi: hi)  # the top of the jitter


def test_only_retryable_answers_are_retried() -> None:
    p = policy()
    for status in (400, 401, 404, 413, 500, 502, 504):
        assert p.delay(0, status, {}) is None
    for status in (429, 503, 529):
        assert p.delay(0, status, {}) == 0.5
    assert p.delay(0, None, {}) == 0.5  # connection refused: nothing was sent
    assert p.delay(0, 529, {"x-should-retry": "false"}) is None


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    p = policy(max_delay=5.0)
    assert p.delay(0, 429, {"retry-after": "2"}) == 2.0
    assert p.delay(0, 429, {"retry-after": "5"}) == 5.0
    assert p.delay(0, 429, {"retry-after": "6"}) is None  # longer than the cap: relayed to the client


def test_backoff_grows_is_capped_and_attempts_are_bounded() -> None:
    p = policy(retries=5, max_delay=3.0)
    assert [p.delay(n, 529, {}) for n in range(6)] == [0.5, 1.0, 2.0, 3.0, 3.0, None]
    assert RetryPolicy().delay(0, 529, {}) is None  # the default: no retry
    jittered = RetryPolicy(1, 3.0)
    assert all(0.0 <= (jittered.delay(0, 529, {}) or 0) <= 0.5 for _ in range(50))


def test_settings_read_the_retry_variables() -> None:
    s = Settings.from_env({"GATEWAY_UPSTREAM_RETRIES": "3", "GATEWAY_UPSTREAM_RETRY_MAX_DELAY_S": "1.5"})
    assert (s.upstream_retries, s.upstream_retry_max_delay_s) == (3, 1.5)
    assert (Settings().upstream_retries, Settings().upstream_retry_max_delay_s) == (0, 10.0)

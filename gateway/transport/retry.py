"""Retrying an upstream request before its first byte reached the client: one policy for every surface.

``Upstream.post`` applies it, so /v1/messages, /v1/chat/completions and /gateway/chat-stream all
behave the same. Only answers that say "try again" are retried (429, 503, 529), and connections that
were refused (nothing was sent); never a timeout (the upstream may be working on it) and never once
a stream has started (a relayed byte cannot be taken back).

The delay before retry ``n`` (0-based):

- the upstream's ``retry-after`` (seconds or an HTTP date) when it gives one (Google APIs send none: the
  delay of their 429 is a ``google.rpc.RetryInfo`` in the error body, which ``Upstream.post`` turns into
  a ``retry-after`` header, ``retry_delay_in_body``, for this policy and for the client). If it asks for longer
  than ``max_delay_s`` the gateway does not wait: the answer goes to the client as is, with its
  ``retry-after``, so the client (which may have its own budget) decides;
- otherwise full-jitter exponential backoff: uniform in ``[0, min(max_delay_s, base_delay_s * 2**n)]``.

``x-should-retry: false`` from the upstream disables the retry of that answer.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

RETRYABLE_STATUSES = frozenset({429, 503, 529})


def retry_after_seconds(headers: Mapping[str, str], now: Callable[[], datetime] = lambda: datetime.now(UTC)
                        ) -> float | None:
    """The ``retry-after`` header in seconds (``retry-after-ms`` wins), or ``None`` if absent/unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000
        except ValueError:
            value = -1.0
        if 0 <= value < float("inf"):
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now()).total_seconds())
    return seconds if 0 <= seconds < float("inf") else None


_DURATION = re.compile(r"(\d{1,12})(\.\d{1,9})?s")  # a protobuf Duration in JSON: "38s", "45.837906927s"


def retry_delay_in_body(body: bytes) -> float | None:
    """Seconds from a Google error body's ``google.rpc.RetryInfo`` detail (``retryDelay``), or ``None``.
    The envelope may come wrapped in a list (``[{"error": ...}]``)."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, list) and data:
        data = data[0]
    err = data.get("error") if isinstance(data, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    for d in details if isinstance(details, list) else ():
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("google.rpc.RetryInfo"):
            m = _DURATION.fullmatch(d["retryDelay"]) if isinstance(d.get("retryDelay"), str) else None
            if m:
                return float(m.group(1) + (m.group(2) or ""))
    return None


def retry_after_header(seconds: float) -> str:
    """``retry-after`` takes whole seconds: round up, so a client never comes back too early."""
    return str(math.ceil(seconds))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = 0             # extra attempts after the first (GATEWAY_UPSTREAM_RETRIES)
    max_delay_s: float = 10.0    # the longest single wait (GATEWAY_UPSTREAM_RETRY_MAX_DELAY_S)
    base_delay_s: float = 0.5
    rand: Callable[[float, float], float] = field(default=random.uniform, compare=False, repr=False)

    def delay(self, attempt: int, status: int | None, headers: Mapping[str, str]) -> float | None:
        """Seconds to wait before retrying after ``attempt`` (0-based) failed with ``status``
        (``None``: the connection was refused); ``None`` means do not retry."""
        if attempt >= self.retries:
            return None
        if status is not None:
            if status not in RETRYABLE_STATUSES or headers.get("x-should-retry", "").lower() == "false":
                return None
            after = retry_after_seconds(headers)
            if after is not None:
                return after if after <= self.max_delay_s else None
        return self.rand(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** attempt))

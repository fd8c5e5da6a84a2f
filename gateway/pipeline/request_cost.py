"""What one request may cost a worker in memory (``GATEWAY_REQUEST_MEMORY_MB``), estimated from its body before it
is decoded, so that one request cannot take a replica's memory.

Measured with ``bench/peak_rss.py`` (2026-11-28, every surface): a request's peak is about 3-6 times its body's bytes
for a body of long strings (the body, its parsed values, the canonical request, what goes upstream and the turn
record each hold the text once), plus about 1 KiB for each JSON object in it (a tiny message is a dict parsed, a
canonical message and its blocks, and their encodings: 100,000 of them in a 3.9 MB body peak at 77-116 MB). So the
estimate is ``BYTE_COST`` per byte plus ``OBJECT_COST`` per ``{`` (one C-level count over the body, before any
parsing); a declared ``content-length`` whose bytes alone pass the budget is refused before the body is read.
"""

from __future__ import annotations

BYTE_COST = 6
OBJECT_COST = 1024


def byte_limit(budget: int) -> int:
    """The largest body whose bytes alone fit ``budget`` (0: no budget)."""
    return budget // BYTE_COST if budget > 0 else 0


def estimate(body: bytes) -> int:
    """The memory a request with this body is expected to need at its peak, in bytes."""
    return BYTE_COST * len(body) + OBJECT_COST * body.count(b"{")


# the most a byte can cost: a body of nothing but ``{}`` (a JSON object in every two bytes)
MOST_PER_BYTE = BYTE_COST + OBJECT_COST // 2


def too_costly(body: bytes, budget: int) -> bool:
    """Whether the estimate passes ``budget``. A body that would fit even if it were all ``{}`` is not counted (the
    count is one pass over the body at about 0.25 ns a byte: 0.1 ms for a 100-turn tool loop's 400 KB, which most
    requests need not pay)."""
    if budget <= 0 or MOST_PER_BYTE * len(body) <= budget:
        return False
    return estimate(body) > budget

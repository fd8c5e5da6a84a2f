"""The relay records a finished turn before the client sees ``message_stop``, and nothing earlier waits.

An upstream that delivers the whole answer in one read (a short answer, a fast upstream) used to have
every event held back until the turn was recorded: the first byte waited for the store round trip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gateway.protocols import anthropic
from gateway.streaming.relay import relay_sse

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sse_thinking_tool_use.sse"


class OneRead:
    """Enough of ``UpstreamResponse``: the whole stream in ``reads`` pieces."""

    def __init__(self, body: bytes, reads: int = 1) -> None:
        step = -(-len(body) // reads)
        self.pieces = [body[k:k + step] for k in range(0, len(body), step)]

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for p in self.pieces:
            yield p

    def close(self) -> None: ...

    def release(self) -> None: ...


async def _timeline(reads: int) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []

    async def on_complete(turn: Any) -> None:
        events.append(("recorded", turn.id))

    relay = relay_sse(OneRead(FIXTURE.read_bytes(), reads), anthropic.StreamEncoder(None),  # type: ignore[arg-type]
                      on_complete=on_complete)
    async for out in relay:
        events.append(("sent", out))
    return events


async def test_one_read_stream_sends_its_events_before_recording_and_message_stop_after() -> None:
    events = await _timeline(reads=1)
    kinds = [k for k, _ in events]
    assert kinds == ["sent", "recorded", "sent"]
    first, last = events[0][1], events[2][1]
    assert b"message_start" in first and b"content_block_delta" in first and b"message_stop" not in first
    assert b"message_stop" in last
    assert first + last == FIXTURE.read_bytes()  # byte-for-byte, nothing lost or reordered


async def test_many_reads_record_exactly_once_before_message_stop() -> None:
    events = await _timeline(reads=9)
    recorded = [i for i, (k, _) in enumerate(events) if k == "recorded"]
    assert len(recorded) == 1
    sent = b"".join(out for k, out in events if k == "sent")
    assert sent == FIXTURE.read_bytes()
    before = b"".join(out for k, out in events[:recorded[0]] if k == "sent")
    assert b"message_stop" not in before and b"message_delta" in before

"""The single pump that relays an upstream SSE stream to the client.

- Every upstream event is handed to the client dialect's ``StreamEncoder`` as soon as
  it is decoded. The Anthropic encoder forwards events byte-for-byte unless it changes
  them (``message_start`` gains ``_gateway``), so unknown events pass through; other
  dialects translate the canonical (Anthropic-shaped) events into their own chunks.
- The pure accumulator runs alongside; when the stream finished cleanly
  (``message_stop``, no error event) ``on_complete`` receives the finished turn.
- An upstream failure mid-stream (connection lost, idle timeout, truncated stream)
  becomes the client dialect's error event, never a silent end of stream.
- If the client goes away, the generator is closed/cancelled and the upstream
  connection is dropped in ``finally``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Protocol

import aiohttp
import orjson

from gateway import metrics
from gateway.protocols.canonical import Turn
from gateway.streaming.accumulate import Snapshot, UpstreamProtocolError, accumulate, finished_turn
from gateway.streaming.sse import SSEDecoder, SSEEvent
from gateway.upstream import UpstreamResponse

log = logging.getLogger("thinkgate.relay")

OnComplete = Callable[[Turn], Awaitable[None]]


class StreamEncoder(Protocol):
    """Canonical stream events -> the client dialect's wire bytes."""

    def event(self, data: dict[str, Any], ev: SSEEvent) -> bytes:
        """One decoded upstream event (``ev.raw`` holds its exact bytes)."""
        ...

    def passthrough(self, ev: SSEEvent) -> bytes:
        """An upstream event that is not a JSON object."""
        ...

    def error(self, error_type: str, message: str) -> bytes:
        """The dialect's in-stream error event (the upstream failed mid-stream)."""
        ...

    def end(self) -> bytes:
        """Bytes after a clean end of stream (e.g. ``data: [DONE]``)."""
        ...


async def relay_sse(
    resp: UpstreamResponse,
    encoder: StreamEncoder,
    *,
    on_complete: OnComplete | None = None,
    snapshot: Snapshot | None = None,
) -> AsyncIterator[bytes]:
    snap = snapshot if snapshot is not None else Snapshot()
    decoder = SSEDecoder()
    clean = False
    recorded = False
    try:
        try:
            async for chunk in resp.iter_chunks():
                before, after = _split(decoder.feed(chunk), snap, encoder, not recorded)
                if before:
                    yield before
                if after is not None:
                    # Record before the client sees message_stop, so its next request finds the turn.
                    recorded = True
                    await _complete(snap, on_complete)
                    yield after
            before, after = _split(decoder.flush(), snap, encoder, not recorded)
            if before:
                yield before
            if after is not None:
                recorded = True
                await _complete(snap, on_complete)
                yield after
        except TimeoutError:
            yield encoder.error("api_error", "upstream stream timed out")
            return
        except aiohttp.ClientError as e:
            yield encoder.error("api_error", f"upstream connection lost: {type(e).__name__}")
            return
        except UpstreamProtocolError as e:
            yield encoder.error("api_error", f"upstream sent an invalid stream: {e}")
            return
        if snap.error is None and not snap.stopped:
            yield encoder.error("api_error", "upstream stream ended before message_stop")
            return
        clean = True
        tail_bytes = encoder.end()
        if tail_bytes:
            yield tail_bytes
    finally:
        metrics.observe_stream_error(snap.error)
        if clean:
            resp.release()
        else:
            resp.close()


def _split(events: Iterable[SSEEvent], snap: Snapshot, encoder: StreamEncoder,
           may_record: bool) -> tuple[bytes, bytes | None]:
    """The client bytes of one upstream read: (before, after). ``after`` is None unless this read
    finished the turn (``message_stop``) and it was not recorded yet; then it holds the finishing
    event and what follows it, which the caller sends only once the turn is recorded. The events
    before it go out first, so an answer that arrives in one read (a short one, a fast upstream)
    does not wait for the store before its first byte."""
    before: list[bytes] = []
    after: list[bytes] | None = None
    for ev in events:
        stopped = snap.stopped
        out = _fold(ev, snap, encoder)
        if after is None and may_record and snap.stopped and not stopped:
            after = []
        (before if after is None else after).append(out)
    return b"".join(before), (b"".join(after) if after is not None else None)


async def _complete(snap: Snapshot, on_complete: OnComplete | None) -> None:
    turn = finished_turn(snap)
    if turn is not None and on_complete is not None:
        await on_complete(turn)


def _fold(ev: SSEEvent, snap: Snapshot, encoder: StreamEncoder) -> bytes:
    try:
        data = orjson.loads(ev.data) if ev.data else None
    except orjson.JSONDecodeError:
        return encoder.passthrough(ev)  # not JSON: nothing to accumulate
    if not isinstance(data, dict):
        return encoder.passthrough(ev)
    accumulate(data, snap)
    return encoder.event(data, ev)

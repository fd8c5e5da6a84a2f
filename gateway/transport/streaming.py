"""The stream pumps: an upstream stream translated into canonical events, and the one relay to the client.

A non-Anthropic upstream SSE stream (or another framing's) becomes canonical (Anthropic-shaped) events.

``TranslatedStream`` wraps an ``UpstreamResponse``: ``events`` decodes the upstream's SSE events, hands each
event's data to a pure ``Translator`` and yields the canonical events it returns as the objects they are, straight
to the relay: nothing is written to SSE bytes and parsed again inside the gateway. Each upstream event is also
passed on as an ``upstream_event`` event (``{"type": "upstream_event", "data": <the upstream data string>}``) for
encoders that relay the upstream's own dialect; the accumulator and the other encoders ignore that type. Framing
only: no content rules here.

The single pump that relays an upstream stream to the client (``relay_sse``):

- Every upstream event is handed to the client dialect's ``StreamEncoder`` as soon as
  it is decoded. The Anthropic encoder forwards events byte-for-byte unless it changes
  them (``message_start`` gains ``_gateway``), so unknown events pass through; other
  dialects translate the canonical (Anthropic-shaped) events into their own chunks.
- The pure accumulator runs alongside; when the stream finished cleanly
  (``message_stop``, no error event) ``on_complete`` receives the finished turn, and only then does
  the client get the end of the answer in its dialect (``StreamEncoder.ends``: ``message_stop``, the
  ``finish_reason`` chunk and ``[DONE]``, Gemini's last chunk, Augment's final node), since clients stop
  reading there and may send the conversation's next request at once.
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

from gateway.dialects.accumulate import Snapshot, UpstreamProtocolError, accumulate, finished_turn
from gateway.dialects.canonical import UPSTREAM_EVENT, Turn
from gateway.ops import metrics
from gateway.sse import SSEDecoder, SSEEvent
from gateway.transport.upstream import UpstreamResponse

# one event for the relay: its parsed data (None: not a JSON object) and its upstream bytes (None: a translator made it)
Parsed = tuple[dict[str, Any] | None, SSEEvent | None]


class Translator(Protocol):
    def feed(self, data: str) -> list[dict[str, Any]]:
        """One upstream event's data -> canonical events."""
        ...

    def end(self) -> list[dict[str, Any]]:
        """Canonical events after the upstream stream ended (none if it ended unfinished)."""
        ...


class Framed(Protocol):
    @property
    def data(self) -> str: ...


class Framing(Protocol):
    """Bytes of an upstream stream -> its events' data (``SSEDecoder``; Bedrock's event-stream reader)."""

    def feed(self, chunk: bytes) -> Iterable[Framed]: ...

    def flush(self) -> Iterable[Framed]: ...


class TranslatedStream:
    def __init__(self, resp: UpstreamResponse, translator: Translator, *, raw_events: bool = False,
                 framing: Framing | None = None) -> None:
        self._resp = resp
        self._translator = translator
        self._framing = framing
        self._raw = raw_events
        self.status = resp.status
        self.headers = resp.headers

    async def events(self) -> AsyncIterator[list[Parsed]]:
        """The canonical events of each read of the upstream's stream, then those after its end."""
        decoder = self._framing if self._framing is not None else SSEDecoder()
        async for chunk in self._resp.iter_chunks():
            out = [p for ev in decoder.feed(chunk) for p in self._translate(ev)]
            if out:
                yield out
        tail = [p for ev in decoder.flush() for p in self._translate(ev)]
        tail += [(e, None) for e in self._translator.end()]
        if tail:
            yield tail

    def _translate(self, ev: Framed) -> list[Parsed]:
        raw: list[Parsed] = [({"type": UPSTREAM_EVENT, "data": ev.data}, None)] if self._raw else []
        return raw + [(e, None) for e in self._translator.feed(ev.data)]

    def close(self) -> None:
        self._resp.close()

    def release(self) -> None:
        self._resp.release()

    async def read(self) -> bytes:
        return await self._resp.read()


log = logging.getLogger("thinkgate.relay")

OnComplete = Callable[[Turn], Awaitable[None]]


class StreamEncoder(Protocol):
    """Canonical stream events -> the client dialect's wire bytes."""

    def event(self, data: dict[str, Any], ev: SSEEvent | None) -> bytes:
        """One decoded upstream event (``ev.raw`` holds its exact bytes; None: a translator made the event)."""
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

    def ends(self, data: dict[str, Any]) -> bool:
        """Whether the client reads this event's bytes as the end of the answer (a finish reason, a stop
        event): the relay sends them, and everything after, only once the turn is recorded."""
        ...


async def _parsed(resp: UpstreamResponse) -> AsyncIterator[list[Parsed]]:
    """A canonical upstream stream's events of each read, each parsed once."""
    decoder = SSEDecoder()
    async for chunk in resp.iter_chunks():
        yield [_parse(ev) for ev in decoder.feed(chunk)]
    yield [_parse(ev) for ev in decoder.flush()]


def _parse(ev: SSEEvent) -> Parsed:
    try:
        data = orjson.loads(ev.data) if ev.data else None
    except orjson.JSONDecodeError:
        return None, ev  # not JSON: nothing to accumulate
    return (data if isinstance(data, dict) else None), ev


async def relay_sse(
    resp: UpstreamResponse | TranslatedStream,
    encoder: StreamEncoder,
    *,
    on_complete: OnComplete | None = None,
    snapshot: Snapshot | None = None,
) -> AsyncIterator[bytes]:
    snap = snapshot if snapshot is not None else Snapshot()
    pump = _Pump(snap, encoder)
    clean = False
    try:
        try:
            async for events in resp.events() if isinstance(resp, TranslatedStream) else _parsed(resp):
                before = pump.feed(events)
                if before:
                    yield before
                if pump.finished:
                    yield await pump.record(on_complete)
        except TimeoutError:
            yield pump.release() + encoder.error("api_error", "upstream stream timed out")
            return
        except aiohttp.ClientError as e:
            yield pump.release() + encoder.error("api_error", f"upstream connection lost: {type(e).__name__}")
            return
        except UpstreamProtocolError as e:
            yield pump.release() + encoder.error("api_error", f"upstream sent an invalid stream: {e}")
            return
        if snap.error is None and not snap.stopped:
            yield pump.release() + encoder.error("api_error", "upstream stream ended before message_stop")
            return
        clean = True
        tail_bytes = pump.release() + encoder.end()
        if tail_bytes:
            yield tail_bytes
    finally:
        metrics.observe_stream_error(snap.error)
        if clean:
            resp.release()
        else:
            resp.close()


class _Pump:
    """Folds events into the snapshot and the client's bytes, holding back the end of the answer.

    From the first event the client reads as the end of the answer (``StreamEncoder.ends``: a stop reason,
    ``message_stop``, Gemini's chunk with a ``finishReason``) the client's bytes are held, across reads,
    until the turn is recorded (``message_stop`` folded: ``on_complete``): a client stops reading at the
    finish marker and may send the conversation's next request at once, to any replica, which must find
    the turn. The events before it go out as they come, so an answer does not wait for the store before
    its first byte. A stream that fails after the hold began gets the held bytes, then its error."""

    def __init__(self, snap: Snapshot, encoder: StreamEncoder) -> None:
        self.snap = snap
        self.encoder = encoder
        self.held: list[bytes] | None = None
        self.recorded = False

    def feed(self, events: Iterable[Parsed]) -> bytes:
        """The bytes to send now for ``events``: those before the hold (the rest is held)."""
        before: list[bytes] = []
        for data, ev in events:
            stopped = self.snap.stopped
            out = _fold(data, ev, self.snap, self.encoder)
            if self.held is None and not self.recorded and (
                    (data is not None and self.encoder.ends(data)) or (self.snap.stopped and not stopped)):
                self.held = []
            (before if self.held is None else self.held).append(out)
        return b"".join(before)

    @property
    def finished(self) -> bool:
        """The turn is complete (``message_stop``) and not recorded yet."""
        return self.snap.stopped and not self.recorded

    async def record(self, on_complete: OnComplete | None) -> bytes:
        """Record the finished turn; then the held end of the answer may go."""
        self.recorded = True
        await _complete(self.snap, on_complete)
        return self.release()

    def release(self) -> bytes:
        held, self.held = self.held, None
        return b"".join(held) if held else b""


async def _complete(snap: Snapshot, on_complete: OnComplete | None) -> None:
    turn = finished_turn(snap)
    if turn is not None and on_complete is not None:
        await on_complete(turn)


def _fold(data: dict[str, Any] | None, ev: SSEEvent | None, snap: Snapshot, encoder: StreamEncoder) -> bytes:
    if data is None:
        return encoder.passthrough(ev) if ev is not None else b""  # not a JSON object: nothing to accumulate
    accumulate(data, snap)
    return encoder.event(data, ev)

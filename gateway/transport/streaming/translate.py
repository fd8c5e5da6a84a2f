"""A non-Anthropic upstream SSE stream (or another framing's) as canonical (Anthropic-shaped) events.

``TranslatedStream`` wraps an ``UpstreamResponse``: ``events`` decodes the upstream's SSE events, hands each
event's data to a pure ``Translator`` and yields the canonical events it returns as the objects they are, straight
to the relay: nothing is written to SSE bytes and parsed again inside the gateway. Each upstream event is also
passed on as an ``upstream_event`` event (``{"type": "upstream_event", "data": <the upstream data string>}``) for
encoders that relay the upstream's own dialect; the accumulator and the other encoders ignore that type. Framing
only: no content rules here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

from gateway.dialects.canonical import UPSTREAM_EVENT
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

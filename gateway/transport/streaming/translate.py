"""Re-framing of a non-Anthropic upstream SSE stream as canonical (Anthropic-shaped) events.

``TranslatedStream`` wraps an ``UpstreamResponse`` and looks like one to the relay: its
``iter_chunks`` decodes the upstream's SSE events, hands each event's data to a pure
``Translator`` and yields the resulting canonical events as SSE bytes, so the one relay,
the accumulator and every client ``StreamEncoder`` work unchanged. Each upstream event
is also passed on as an ``upstream_event`` event (``{"type": "upstream_event", "data":
<the upstream data string>}``) for encoders that relay the upstream's own dialect; the
accumulator and the other encoders ignore that type. Framing only: no content rules here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from gateway.transport.streaming.sse import SSEDecoder, SSEEvent, encode_event
from gateway.transport.upstream import UpstreamResponse

UPSTREAM_EVENT = "upstream_event"


class Translator(Protocol):
    def feed(self, data: str) -> list[dict[str, Any]]:
        """One upstream event's data -> canonical events."""
        ...

    def end(self) -> list[dict[str, Any]]:
        """Canonical events after the upstream stream ended (none if it ended unfinished)."""
        ...


class TranslatedStream:
    def __init__(self, resp: UpstreamResponse, translator: Translator, *, raw_events: bool = False) -> None:
        self._resp = resp
        self._translator = translator
        self._raw = raw_events
        self.status = resp.status
        self.headers = resp.headers

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        decoder = SSEDecoder()
        async for chunk in self._resp.iter_chunks():
            out = b"".join(self._frame(ev) for ev in decoder.feed(chunk))
            if out:
                yield out
        tail = b"".join(self._frame(ev) for ev in decoder.flush())
        tail += b"".join(encode_event(e["type"], e) for e in self._translator.end())
        if tail:
            yield tail

    def _frame(self, ev: SSEEvent) -> bytes:
        raw = encode_event(UPSTREAM_EVENT, {"type": UPSTREAM_EVENT, "data": ev.data}) if self._raw else b""
        return raw + b"".join(encode_event(e["type"], e) for e in self._translator.feed(ev.data))

    def close(self) -> None:
        self._resp.close()

    def release(self) -> None:
        self._resp.release()

    async def read(self) -> bytes:
        return await self._resp.read()

"""Server-sent events framing only: bytes <-> events. Knows nothing of content.

``SSEDecoder.feed(chunk)`` yields every complete event in ``chunk`` (plus what was
buffered before) as ``SSEEvent`` with the exact raw bytes of the event, so a relay
can forward an event it did not change without re-encoding it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson


@dataclass(slots=True, frozen=True)
class SSEEvent:
    event: str | None
    data: str
    raw: bytes  # the event as received, including its terminating blank line

    def json(self) -> object:
        return orjson.loads(self.data)


class SSEDecoder:
    """Incremental decoder; accepts LF, CRLF and CR line endings."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> Iterator[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        held = b""
        if buf.endswith(b"\r"):  # the CR of a CRLF the next read completes: one line end, not two
            buf, held = buf[:-1], b"\r"
        if b"\r" in buf:
            buf = _lf(buf)
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            raw = buf[start:end + 2]
            start = end + 2
            ev = _parse(raw)
            if ev is not None:
                yield ev
        self._buf = buf[start:] + held

    def flush(self) -> Iterator[SSEEvent]:
        """Events left when the stream ended without a final blank line."""
        rest = _lf(self._buf)
        if rest.strip():
            ev = _parse(rest + b"\n\n" if not rest.endswith(b"\n") else rest + b"\n")
            if ev is not None:
                yield ev
        self._buf = b""

    @property
    def pending(self) -> bytes:
        return self._buf


def _lf(buf: bytes) -> bytes:
    """Every line end (CRLF, CR, LF) as LF."""
    return buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _parse(raw: bytes) -> SSEEvent | None:
    event: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", errors="surrogateescape").split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if event is None and not data:
        return None
    return SSEEvent(event, "\n".join(data), raw)


def encode_event(event: str | None, data: object) -> bytes:
    """Frame one event; ``data`` is JSON-encoded unless it is already bytes/str."""
    if isinstance(data, bytes):
        payload = data
    elif isinstance(data, str):
        payload = data.encode()
    else:
        payload = orjson.dumps(data)
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + payload + b"\n\n"

"""The transport: one pooled aiohttp session per upstream with the one retry policy it applies, and the stream pumps
that carry an upstream's answer to the client.

Returns raw responses (status, headers, body or byte stream); knows nothing of
dialects. Connect failures raise ``UpstreamConnectError`` (rendered 502), timeouts
``UpstreamTimeout`` (504). Auth headers pass through from the client untouched.

**Retrying before the first byte** (``RetryPolicy``, default: never): ``Upstream.post`` applies it, so every surface
behaves the same. Only answers that say "try again" are retried (429, 503, 529), and connections that
were refused (nothing was sent); never a timeout (the upstream may be working on it) and never once
a stream has started (a relayed byte cannot be taken back). The delay before retry ``n`` (0-based):

- the upstream's ``retry-after`` (seconds or an HTTP date) when it gives one (Google APIs send none: the
  delay of their 429 is a ``google.rpc.RetryInfo`` in the error body, which ``Upstream.post`` turns into
  a ``retry-after`` header, ``retry_delay_in_body``, for this policy and for the client). If it asks for longer
  than ``max_delay_s`` the gateway does not wait: the answer goes to the client as is, with its
  ``retry-after``, so the client (which may have its own budget) decides;
- otherwise full-jitter exponential backoff: uniform in ``[0, min(max_delay_s, base_delay_s * 2**n)]``.

``x-should-retry: false`` from the upstream disables the retry of that answer.

**The stream pumps**: an upstream stream translated into canonical events, and the one relay to the client.

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

import asyncio
import logging
import math
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import aiohttp
import orjson
import yarl

from gateway.dialects.accumulate import Snapshot, UpstreamProtocolError, accumulate, finished_turn
from gateway.dialects.canonical import UPSTREAM_EVENT, Turn
from gateway.dialects.cloud import Auth
from gateway.dialects.urls import display_url
from gateway.errors import GatewayError
from gateway.ops import metrics
from gateway.sse import SSEDecoder, SSEEvent

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


log = logging.getLogger("thinkgate.upstream")

# Client request headers forwarded to an Anthropic upstream (lowercase). Any other
# ``anthropic-*`` header is forwarded too.
FORWARD_REQUEST_HEADERS = frozenset({"x-api-key", "authorization", "anthropic-version", "anthropic-beta"})
# Upstream response headers passed back to the client.
FORWARD_RESPONSE_HEADERS = frozenset({"request-id", "retry-after", "x-should-retry", "content-type"})
FORWARD_RESPONSE_PREFIXES = ("anthropic-ratelimit-",)


class UpstreamConnectError(GatewayError):
    pass


class UpstreamTimeout(GatewayError):
    pass


def forward_request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out = {k: v for k, v in headers.items()
           if k in FORWARD_REQUEST_HEADERS or (k.startswith("anthropic-") and k != "anthropic-version")}
    if "anthropic-version" in headers:
        out["anthropic-version"] = headers["anthropic-version"]
    return out


def forward_response_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in headers.items():
        low = k.lower()
        if low in FORWARD_RESPONSE_HEADERS or low.startswith(FORWARD_RESPONSE_PREFIXES):
            out[low] = v
    return out


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: dict[str, str]
    _resp: aiohttp.ClientResponse
    _read_timeout: float

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except TimeoutError as e:
            raise UpstreamTimeout(504, "upstream timed out while sending the response body") from e
        except aiohttp.ClientError as e:
            raise UpstreamConnectError(502, f"upstream connection failed: {type(e).__name__}") from e
        finally:
            self._resp.release()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Yield body bytes as they arrive (no buffering)."""
        async for chunk in self._resp.content.iter_any():
            yield chunk

    def close(self) -> None:
        """Abort: drop the connection (used when the client went away)."""
        self._resp.close()

    def release(self) -> None:
        self._resp.release()


async def _retry_after_from_body(resp: aiohttp.ClientResponse, out: dict[str, str]) -> None:
    """A "try again" answer without ``retry-after`` (Google's 429): the delay its error body names becomes the
    header. The body is small and aiohttp keeps it for the caller's own ``read``."""
    if "json" not in resp.headers.get("content-type", ""):
        return
    try:
        body = await resp.read()
    except (aiohttp.ClientError, TimeoutError):  # the caller's read meets (and reports) the same failure
        return
    delay = retry_delay_in_body(body)
    if delay is not None:
        out["retry-after"] = retry_after_header(delay)


class Upstream:
    """A pooled HTTP client for one upstream base URL; with ``auth``, every request (each retry too) is signed by it
    and sent to exactly the URL it signed."""

    def __init__(self, name: str, base_url: str, *, connect_timeout: float, read_timeout: float,
                 limit: int = 256, retry: RetryPolicy | None = None, auth: Auth | None = None) -> None:
        self.name = name
        self.auth = auth
        self.retry = retry or RetryPolicy()
        self.base_url = base_url.rstrip("/")
        self.shown_url = display_url(self.base_url)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=30, ttl_dns_cache=300)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout,
                                            connect=self._connect_timeout, sock_read=self._read_timeout)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                                  auto_decompress=True, skip_auto_headers=("User-Agent",))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _unreachable(self, e: Exception) -> UpstreamConnectError:
        """502 naming the upstream, its base URL and why (``Connection refused``, a DNS failure): what an operator
        needs to fix a wrong ``GATEWAY_*_BASE_URL``. The reason is the OS's, never request content."""
        reason = type(e).__name__
        os_error = getattr(e, "os_error", None) or (e if isinstance(e, OSError) else None)
        if isinstance(os_error, OSError) and os_error.strerror:
            reason += f" ({os_error.strerror})"
        return UpstreamConnectError(502, f"could not reach upstream {self.name} at {self.shown_url}: {reason}")

    async def _signed(self, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        """The platform credential's headers; a credential that cannot be had (none configured, the token endpoint
        refusing) is a 502 naming the upstream and why, never the credential."""
        assert self.auth is not None
        try:
            return await self.auth("POST", url, headers, body)
        except Exception as e:  # (google-auth and botocore raise their own kinds)
            reason = str(e)[:200] if type(e).__name__ == "MissingExtra" else type(e).__name__
            log.warning("upstream %s: no credential to sign with (%s)", self.name, reason)
            raise UpstreamConnectError(502, f"could not sign the request to upstream {self.name}: {reason}") from e

    async def get(self, path: str, headers: Mapping[str, str], query: str = "",
                  limit_s: float | None = None) -> tuple[int, bytes]:
        """A small GET (an upstream's model list): its status and body; no retries. ``limit_s`` bounds the whole call
        (default: the read timeout). Failures raise as ``post``'s do."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        url = self.base_url + path + (("?" + query) if query else "")
        try:
            async with asyncio.timeout(limit_s or self._read_timeout):
                async with self._session.get(url, headers=dict(headers)) as resp:
                    return resp.status, await resp.read()
        except TimeoutError as e:
            raise UpstreamTimeout(504, f"upstream {self.name} timed out") from e
        except aiohttp.ClientError as e:
            raise self._unreachable(e) from e

    async def post(self, path: str, body: bytes, headers: Mapping[str, str],
                   query: str = "") -> UpstreamResponse:
        if self._session is None:
            await self.start()
        assert self._session is not None
        url = self.base_url + path + (("?" + query) if query else "")
        hdrs = dict(headers)
        hdrs["content-type"] = "application/json"
        attempt = 0
        resent = False
        while True:
            try:
                if self.auth is None:
                    resp = await self._session.post(url, data=body, headers=hdrs)
                else:  # (the path exactly as signed: yarl would decode its %3A)
                    signed = {**hdrs, **await self._signed(url, hdrs, body)}
                    resp = await self._session.post(yarl.URL(url, encoded=True), data=body, headers=signed)
            except TimeoutError as e:
                raise UpstreamTimeout(504, f"upstream {self.name} at {self.shown_url} timed out") from e
            except aiohttp.ClientConnectorError as e:  # nothing was sent: safe to try again
                wait = self.retry.delay(attempt, None, {})
                if wait is None:
                    raise self._unreachable(e) from e
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                # The connection went away before any answer: almost always a pooled keep-alive connection the
                # upstream closed just as this request went out on it (the upstream's idle timeout racing ours).
                # Sent again once on a fresh connection, as the official SDKs do for a connection error.
                if resent:
                    raise self._unreachable(e) from e
                resent = True
                log.info("upstream %s: connection closed before an answer (%s); sent again", self.name,
                         type(e).__name__)
                await asyncio.sleep(0)  # (lets the loop see other pooled connections the upstream closed)
                continue
            except aiohttp.ClientError as e:
                raise self._unreachable(e) from e
            else:
                out = forward_response_headers(resp.headers)
                if resp.status in RETRYABLE_STATUSES and "retry-after" not in out:
                    await _retry_after_from_body(resp, out)
                wait = self.retry.delay(attempt, resp.status, out)
                if wait is None:
                    return UpstreamResponse(resp.status, out, resp, self._read_timeout)
                resp.close()  # the error body is not needed: drop it (and its connection)
            attempt += 1
            log.info("upstream %s: retry %d in %.2f s", self.name, attempt, wait)
            await asyncio.sleep(wait)


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

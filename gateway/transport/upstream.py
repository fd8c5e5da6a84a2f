"""Upstream HTTP clients: one pooled aiohttp session per upstream.

Returns raw responses (status, headers, body or byte stream); knows nothing of
dialects. Connect failures raise ``UpstreamConnectError`` (rendered 502), timeouts
``UpstreamTimeout`` (504). Auth headers pass through from the client untouched.
``post`` retries before the first byte as ``gateway.transport.retry.RetryPolicy`` says (default: never).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp
import yarl

from gateway.dialects.cloud import Auth
from gateway.dialects.urls import display_url
from gateway.errors import GatewayError
from gateway.transport.retry import RETRYABLE_STATUSES, RetryPolicy, retry_after_header, retry_delay_in_body

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

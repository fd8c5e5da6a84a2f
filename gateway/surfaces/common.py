"""Helpers every thin handler shares: the app's dependencies, the request body, the upstream call and the
relay of its answer (the stream branch, its headers and the record of the finished turn, written once).

The request budget (``read_body``): what one request may cost a worker in memory (``GATEWAY_REQUEST_MEMORY_MB``),
estimated from its body before it is decoded, so that one request cannot take a replica's memory.

Measured with ``bench/peak_rss.py`` (2026-11-28, every surface): a request's peak is about 3-6 times its body's bytes
for a body of long strings (the body, its parsed values, the canonical request, what goes upstream and the turn
record each hold the text once), plus about 1 KiB for each JSON object in it (a tiny message is a dict parsed, a
canonical message and its blocks, and their encodings: 100,000 of them in a 3.9 MB body peak at 77-116 MB). So the
estimate is ``BYTE_COST`` per byte plus ``OBJECT_COST`` per ``{`` (one C-level count over the body, before any
parsing); a declared ``content-length`` whose bytes alone pass the budget is refused before the body is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect
from starlette.requests import Request as HTTPRequest
from starlette.responses import StreamingResponse

from gateway.app.deps import Gateway
from gateway.continuation.replay_memo import Match
from gateway.dialects.accumulate import Snapshot
from gateway.dialects.canonical import Turn
from gateway.errors import ClientError
from gateway.ops import metrics
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import ClientRequest, Exchange
from gateway.pipeline.identify import CONFLICTING, CREDENTIAL_HEADERS, SCID_HEADER, credential_of, tenant_of
from gateway.surfaces.table import Surface
from gateway.transport.streaming import StreamEncoder, relay_sse
from gateway.transport.upstream import UpstreamResponse

T = TypeVar("T")
TOO_LARGE = "Request exceeds the maximum allowed number of bytes."
TOO_COSTLY = ("Request would need more memory than this gateway allows one request ({mb} MiB): fewer messages or "
              "smaller contents.")
log = logging.getLogger("thinkgate.endpoints")
CLIENT_CLOSED = 499  # the client went away mid-request (nginx's code): counted as a client fault
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def gateway_of(request: HTTPRequest) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


async def read_body(request: HTTPRequest, limit: int, deadline_s: float) -> bytes:
    """Read the body, refusing (413) as soon as it passes ``limit`` bytes, and (408) when it has not all arrived
    ``deadline_s`` seconds after the headers (a slow-loris client holds a connection and a worker's memory open)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ClientError(413, TOO_LARGE, "request_too_large")
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(deadline_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ClientError(413, TOO_LARGE, "request_too_large")
                parts.append(chunk)
    except TimeoutError:  # the client's doing: a 4xx, logged once at INFO
        log.info("client did not send its request body within %g s (%d bytes read)", deadline_s, size)
        raise ClientError(408, f"the request body did not arrive within {deadline_s:g} seconds",
                          "invalid_request_error", "request_timeout") from None
    except ClientDisconnect:  # the client's doing: a 4xx (499, as nginx counts it), logged once at INFO
        log.info("client closed the connection while sending its request (%d bytes read)", size)
        raise ClientError(CLIENT_CLOSED, "the client closed the connection before its request was complete",
                          "client_closed") from None
    return b"".join(parts)


def client_headers(request: HTTPRequest) -> dict[str, str]:
    """The client's headers by lowercase name. A field sent on several lines (``anthropic-beta`` from a
    raw client) is combined into one comma-separated value (RFC 9110 section 5.3), not cut to its last line.
    A value with a control character is the client's mistake (RFC 9110 5.5 allows none but HTAB): a 400, before
    anything is forwarded (the upstream client would refuse to send it)."""
    out: dict[str, str] = {}
    for name, value in request.headers.items():  # starlette lowercases names and keeps repeats
        check_header_value(name, value)
        if name in CREDENTIAL_HEADERS and name in out:  # one credential: a repeat only when it is the same
            if value.strip() != out[name].strip():
                raise ClientError(400, CONFLICTING.format(names=f"two {name} header lines"), "invalid_request_error")
            continue
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def check_header_value(name: str, value: str) -> None:
    """400 for a header value (or a value that becomes one, like Gemini's ``?key=``) with a control character."""
    if _CONTROL.search(value):
        raise ClientError(400, f"{name}: a header value must not contain control characters",
                          "invalid_request_error")


async def exchange_from(request: HTTPRequest, surface: Surface) -> Exchange:
    gw = gateway_of(request)
    budget = gw.settings.request_memory_mb << 20
    limit = min(gw.settings.max_body_bytes, byte_limit(budget) or gw.settings.max_body_bytes)
    raw = await read_body(request, limit, gw.settings.body_timeout_s)
    headers = client_headers(request)
    if surface.key_query is not None and (key := request.query_params.get(surface.key_query[0])):
        param, header = surface.key_query  # (Gemini's ?key=): the tenant comes from it, and it is forwarded
        check_header_value(param, key)
        if len(set(request.query_params.getlist(param))) > 1:  # forwarded as it is: both would reach Google
            raise ClientError(400, CONFLICTING.format(names=f"two ?{param}= query parameters"),
                              "invalid_request_error")
        cred = credential_of(headers)
        if cred is None:
            headers[header] = key
        elif cred != key:  # one credential, one tenant (``credential_of``): not billed to one, recorded under another
            raise ClientError(400, CONFLICTING.format(names=f"the ?{param}= query and the headers"),
                              "invalid_request_error")
    objects, found = None, None
    if must_count(raw, budget):  # (before anything is decoded)
        found = _replay_of(gw, surface, headers, raw)
        objects = found.objects(raw) if found is not None else raw.count(b"{")
        if too_costly(raw, budget, objects):
            raise ClientError(413, TOO_COSTLY.format(mb=gw.settings.request_memory_mb), "request_too_large")
    ex = Exchange(ClientRequest(
        endpoint=surface.label,
        dialect=surface.dialect,
        request_id=request.state.request_id,
        headers=headers,
        query=request.url.query,
        raw_body=raw,
        objects=objects,
    ))
    ex.continuation.match = found  # (``take`` starts from it)
    return ex


def _replay_of(gw: Gateway, surface: Surface, headers: dict[str, str], body: bytes) -> Match | None:
    """The replay memo's match of ``body`` for the client's tenant (None: no memo, no credential)."""
    tenant = tenant_of(gw.settings.secret, headers) if gw.replay_memo is not None else None
    if tenant is None or gw.replay_memo is None:
        return None
    return gw.replay_memo.match(tenant, surface.dialect, body)


STREAM_TYPES = ("text/event-stream", "application/vnd.amazon.eventstream")  # what a streamed answer comes as


async def call_upstream(ex: Exchange, gw: Gateway, upstream: str, path: str, headers: dict[str, str], query: str,
                        *, stream: bool, body: bytes | None = None) -> tuple[UpstreamResponse, bytes | None]:
    """Post ``body`` (default ``ex.plan.outgoing``) to ``upstream``; the answer's body, read, unless it is the stream
    the client asked for (status 200, ``STREAM_TYPES``): then None, and ``stream_answer`` relays it."""
    up = gw.upstreams[upstream]
    metrics.observe_upstream_tried(up.name)
    resp = await up.post(path, ex.plan.outgoing if body is None else body, headers, query)
    metrics.observe_upstream(up.name, resp.status)
    if resp.status == 200 and ex.identity.tenant is not None and ex.request is not None and ex.request.model:
        gw.model_lists.saw(ex.identity.tenant, up.name, ex.request.model)
    if stream and resp.status == 200 and resp.headers.get("content-type", "").startswith(STREAM_TYPES):
        return resp, None
    body = await resp.read()
    metrics.observe_upstream_body(up.name, resp.status, body)
    return resp, body


async def _client_gone(request: HTTPRequest) -> None:
    """Returns when the client has gone away (its body was read: the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def while_client_waits(request: HTTPRequest, work: Awaitable[T]) -> T:
    """``work`` (a non-stream request's upstream call), cancelled if the client goes away first: the upstream
    stops generating (and billing) an answer nobody will read, nothing is recorded, and the request is a 499."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        log.info("client closed the connection while waiting for the answer; upstream call cancelled")
        raise ClientError(CLIENT_CLOSED, "the client closed the connection before the answer", "client_closed")
    return task.result()


def relay_headers(headers: Mapping[str, str], scid: str | None, *, stream: bool = False) -> dict[str, str]:
    """The headers of an answer relayed to the client: ``headers``, the conversation id, and for a stream the
    headers that keep proxies from buffering it."""
    out = {**headers, **SSE_HEADERS} if stream else dict(headers)
    if scid:
        out[SCID_HEADER] = scid
    return out


def stream_answer(ex: Exchange, gw: Gateway, source: Any, encoder: StreamEncoder, headers: Mapping[str, str],
                  media_type: str | None, *, snapshot: Snapshot | None = None) -> StreamingResponse:
    """Relay an upstream stream (``source``: the response, or its translation into canonical events) through the
    client dialect's ``encoder``; the finished turn is recorded."""
    async def on_complete(turn: Turn) -> None:
        await pipeline.record(ex, gw, turn)

    relay = relay_sse(source, encoder, on_complete=on_complete, snapshot=snapshot)
    return StreamingResponse(relay, status_code=200, headers=relay_headers(headers, ex.identity.scid, stream=True),
                             media_type=media_type)


# --- what a request may cost ---

BYTE_COST = 6
OBJECT_COST = 1024


def byte_limit(budget: int) -> int:
    """The largest body whose bytes alone fit ``budget`` (0: no budget)."""
    return budget // BYTE_COST if budget > 0 else 0


def estimate(body: bytes, objects: int | None = None) -> int:
    """The memory a request with this body is expected to need at its peak, in bytes (``objects``: its count of
    ``{``, when known)."""
    return BYTE_COST * len(body) + OBJECT_COST * (body.count(b"{") if objects is None else objects)


# the most a byte can cost: a body of nothing but ``{}`` (a JSON object in every two bytes)
MOST_PER_BYTE = BYTE_COST + OBJECT_COST // 2


def must_count(body: bytes, budget: int) -> bool:
    """Whether ``body``'s JSON objects (its ``{``) may put the estimate over ``budget``: not for a body that would fit
    even if it were all ``{}``. The count is one pass over the body at about 0.28 ns a byte (0.35 ms for a 100-turn
    tool loop's 1.2 MB, 1.5 ms at 500 turns): of a replay of a body the worker kept, only what the replay inserted is
    counted (``replay_memo.Match.objects``)."""
    return budget > 0 and MOST_PER_BYTE * len(body) > budget


def too_costly(body: bytes, budget: int, objects: int) -> bool:
    """Whether the estimate passes ``budget`` (``objects``: the body's count of ``{``)."""
    return estimate(body, objects) > budget

"""Helpers every thin handler shares: the app's dependencies and the request body."""

from __future__ import annotations

from starlette.requests import Request as HTTPRequest

from gateway.deps import Gateway
from gateway.errors import ClientError
from gateway.exchange import Exchange
from gateway.surfaces import Surface

TOO_LARGE = "Request exceeds the maximum allowed number of bytes."


def gateway_of(request: HTTPRequest) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


async def read_body(request: HTTPRequest, limit: int) -> bytes:
    """Read the body, refusing (413) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ClientError(413, TOO_LARGE, "request_too_large")
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ClientError(413, TOO_LARGE, "request_too_large")
        parts.append(chunk)
    return b"".join(parts)


def client_headers(request: HTTPRequest) -> dict[str, str]:
    """The client's headers by lowercase name. A field sent on several lines (``anthropic-beta`` from a
    raw client) is combined into one comma-separated value (RFC 9110 section 5.3), not cut to its last line."""
    out: dict[str, str] = {}
    for name, value in request.headers.items():  # starlette lowercases names and keeps repeats
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


async def exchange_from(request: HTTPRequest, surface: Surface) -> Exchange:
    gw = gateway_of(request)
    raw = await read_body(request, gw.settings.max_body_bytes)
    return Exchange(
        endpoint=surface.label,
        dialect=surface.dialect,
        request_id=request.state.request_id,
        headers=client_headers(request),
        query=request.url.query,
        raw_body=raw,
    )

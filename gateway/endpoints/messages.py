"""Anthropic ``POST /v1/messages`` and ``/v1/messages/count_tokens`` (thin handlers)."""

from __future__ import annotations

from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import metrics, pipeline, surfaces
from gateway.deps import Gateway
from gateway.endpoints.common import call_upstream, exchange_from, gateway_of, relay_headers, stream_answer
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.protocols import anthropic
from gateway.upstream import forward_request_headers


async def messages(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    ex = await exchange_from(request, surfaces.MESSAGES)
    metrics.bind(ex)
    await pipeline.prepare(ex, gw)
    assert ex.request is not None
    resp, body = await call_upstream(ex, gw, "anthropic", "/v1/messages", forward_request_headers(ex.headers),
                                     ex.query, stream=ex.request.is_stream)
    headers = dict(resp.headers)
    if body is None:
        return stream_answer(ex, gw, resp, anthropic.StreamEncoder(ex.scid), headers, None)
    if resp.status == 200:
        await _record_body(ex, gw, body)
        body = pipeline.with_gateway_meta(body, ex.scid)
        headers.pop("content-length", None)
    return Response(body, status_code=resp.status, headers=relay_headers(headers, ex.scid))


async def count_tokens(request: HTTPRequest) -> Response:
    """Plain passthrough: body and headers forwarded, upstream answer returned."""
    gw = gateway_of(request)
    ex = await exchange_from(request, surfaces.COUNT_TOKENS)
    pipeline.parse_json(ex.raw_body)  # reject non-JSON early, in the client's dialect
    resp = await gw.upstreams["anthropic"].post("/v1/messages/count_tokens", ex.raw_body,
                                                forward_request_headers(ex.headers), ex.query)
    body = await resp.read()
    metrics.observe_upstream_body("anthropic", resp.status, body)
    return Response(body, status_code=resp.status, headers=resp.headers)


async def _record_body(ex: Exchange, gw: Gateway, body: bytes) -> None:
    try:
        turn = anthropic.decode_turn(pipeline.parse_json(body))
    except GatewayError:  # an upstream body we cannot read is relayed, just not recorded
        return
    await pipeline.record(ex, gw, turn)

"""Anthropic ``POST /v1/messages/count_tokens``: a plain passthrough (body and headers forwarded, answer returned)."""

from __future__ import annotations

from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import metrics, pipeline, surfaces
from gateway.endpoints.common import exchange_from, gateway_of
from gateway.upstream import forward_request_headers


async def count_tokens(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    ex = await exchange_from(request, surfaces.COUNT_TOKENS)
    pipeline.parse_json(ex.raw_body)  # reject non-JSON early, in the client's dialect
    metrics.observe_upstream_tried("anthropic")
    resp = await gw.upstreams["anthropic"].post("/v1/messages/count_tokens", ex.raw_body,
                                                forward_request_headers(ex.headers), ex.query)
    body = await resp.read()
    metrics.observe_upstream_body("anthropic", resp.status, body)
    return Response(body, status_code=resp.status, headers=resp.headers)

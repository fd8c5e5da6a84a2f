"""Anthropic ``POST /v1/messages/count_tokens``: a plain passthrough (body and headers forwarded, answer returned).

On a model that binds thinking to its prefix (``routing.ModelCaps.prefix_bound``) the upstream checks the binding
here too (protocols.md 1.9: "``count_tokens`` answers the same 400"): the body then goes through the same stages as
``/v1/messages`` (``pipeline.prepare``: the recorded prefix kept, or ``drop_block``), and nothing is recorded."""

from __future__ import annotations

from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import metrics, pipeline, surfaces
from gateway.endpoints.common import exchange_from, gateway_of
from gateway.protocols import anthropic
from gateway.upstream import forward_request_headers


async def count_tokens(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    ex = await exchange_from(request, surfaces.COUNT_TOKENS)
    body = pipeline.parse_json(ex.raw_body)  # reject non-JSON early, in the client's dialect
    model = body.get("model") if isinstance(body, dict) else None
    outgoing = ex.raw_body
    if isinstance(model, str) and gw.router.caps_for(model).prefix_bound:
        await pipeline.prepare(ex, gw, anthropic.decode_request)  # (not the replay memo's: nothing is kept)
        pipeline.served(ex)
        outgoing = ex.outgoing
    metrics.observe_upstream_tried("anthropic")
    resp = await gw.upstreams["anthropic"].post("/v1/messages/count_tokens", outgoing,
                                                forward_request_headers(ex.headers), ex.query)
    answer = await resp.read()
    metrics.observe_upstream_body("anthropic", resp.status, answer)
    return Response(answer, status_code=resp.status, headers=resp.headers)

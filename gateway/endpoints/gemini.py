"""Gemini native ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``
(thin handler).

The Gemini body is decoded to canonical (``gemini.decode_request``: the client's own
top-level fields are kept whole), runs the common pipeline (identify, load, repair:
signatures restored on the parts they were minted on, function responses in call order
and count; sanitize: the bypass value where no record vouches for a required signature),
is re-encoded for the Gemini upstream, and the upstream's answer is relayed as it came
(non-stream bytes, or its SSE chunks) while the turn is recorded. Errors keep Google's
envelope ``{"error": {"code", "message", "status"}}``: thinkgate's own (rendered by the
app for ``/v1beta`` paths) and the upstream's (relayed, or re-rendered when the upstream
sent something else). Credentials: ``x-goog-api-key`` (or ``x-api-key`` / a bearer token)
and ``?key=`` are forwarded.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import metrics, pipeline, surfaces
from gateway.credentials import credential_of
from gateway.dialects import gemini_headers, route
from gateway.endpoints.common import (
    call_upstream,
    check_header_value,
    exchange_from,
    gateway_of,
    relay_headers,
    stream_answer,
)
from gateway.errors import ClientError, GatewayError, render_error, upstream_error
from gateway.protocols import gemini
from gateway.protocols.canonical import Request
from gateway.protocols.gemini_parts import deterministic_ids
from gateway.protocols.gemini_stream import GeminiTranslator, NativeStreamEncoder
from gateway.records import lift_turn
from gateway.routing import origin_of
from gateway.streaming.translate import TranslatedStream

ACTIONS = ("generateContent", "streamGenerateContent")


async def generate_content(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    model, _, action = request.path_params["rest"].rpartition(":")
    if action not in ACTIONS or not model:
        raise ClientError(404, f"models/{request.path_params['rest']} is not found for API version v1beta, or "
                               "is not supported", "not_found_error")
    ex = await exchange_from(request, surfaces.GENERATE_CONTENT)
    metrics.bind(ex)
    stream = action == "streamGenerateContent"
    caps = route(gw.router, gw.upstreams, model, kinds=("gemini",))
    ex.upstream = caps.upstream
    if credential_of(ex.headers) is None and request.query_params.get("key"):
        check_header_value("key", request.query_params["key"])  # it is forwarded as x-goog-api-key
        ex.headers["x-goog-api-key"] = request.query_params["key"]  # the tenant comes from the credential

    def decode(body: Any) -> Request:
        return gemini.decode_request(body, model, stream=stream)

    await pipeline.prepare(ex, gw, decode, lambda req: orjson.dumps(gemini.encode_request(req)))
    assert ex.request is not None
    origin, mint = origin_of(caps, model), deterministic_ids(ex.request.messages)
    query = request.url.query
    sse = request.query_params.get("alt") == "sse"
    if stream and not sse:  # upstream always streams SSE; the client gets the form it asked for
        query = f"{query}&alt=sse" if query else "alt=sse"
    resp, body = await call_upstream(ex, gw, caps.upstream, f"/v1beta/models/{model}:{action}",
                                     gemini_headers(ex.headers), query, stream=stream)
    headers = relay_headers({}, ex.scid)
    if body is not None:
        if resp.status != 200:
            if not gemini.is_google_error(body):
                _, body = render_error("gemini", upstream_error(resp.status, body))
            return Response(body, status_code=resp.status, headers=headers, media_type="application/json")
        try:
            turn = gemini.decode_turn(pipeline.parse_json(body), origin=origin, mint=mint, model=model)
        except GatewayError:
            turn = None  # relayed, just not recorded
        if turn is not None:
            await pipeline.record(ex, gw, turn)
            headers = relay_headers(headers, ex.scid)
        return Response(body, status_code=200, headers=headers, media_type="application/json")

    source: Any = TranslatedStream(resp, GeminiTranslator(origin=origin, mint=mint, model=model), raw_events=True)
    return stream_answer(ex, gw, source, NativeStreamEncoder(sse=sse), {},
                         "text/event-stream" if sse else "application/json", lift=lift_turn)

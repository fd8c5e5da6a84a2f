"""Augment ``POST /gateway/chat-stream`` and the conversation export (thin handlers).

Chat-stream: the Augment request is decoded to canonical, runs the common pipeline (identify,
load, repair/sanitize, rebuild the history from the records when the client names a known
conversation and replays none), goes to the upstream the routing table names (Anthropic Messages,
Gemini or OpenAI-compatible, through ``dialects.UPSTREAM_DIALECTS``; other upstreams'
streams are translated to canonical events) as a stream, and comes back as NDJSON chunks
(``gateway.protocols.augment_stream``: every upstream's reasoning, Anthropic thinking or another
family's thought summaries, streams as THINKING nodes, never as text). The conversation id is the
body's ``conversation_id`` (or the ``X-AG-Conversation-Id`` header, which wins) when it is a valid
SCID (UUIDs are). Errors before streaming are JSON with their status; the upstream's own error
answers are relayed with the upstream status and body.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import identity, metrics, pipeline, surfaces
from gateway.dialects import UPSTREAM_DIALECTS, Call, route
from gateway.endpoints.common import call_upstream, exchange_from, gateway_of, relay_headers, stream_answer
from gateway.errors import ClientError, GatewayError, bad_request
from gateway.export import FORMATS, export_conversation
from gateway.protocols import augment, augment_stream
from gateway.protocols.canonical import Request
from gateway.records import lift_turn
from gateway.streaming.translate import TranslatedStream
from state.keys import is_valid_scid
from state.store import StoreError


async def chat_stream(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    ex = await exchange_from(request, surfaces.CHAT_STREAM)
    metrics.bind(ex)
    decoded: list[augment.ChatRequest] = []

    routed: list[Call] = []

    def decode(body: Any) -> Request:
        chat = augment.decode_chat_request(body)
        caps = route(gw.router, gw.upstreams, chat.request.model)
        if is_valid_scid(chat.conversation_id):
            ex.header_scid = chat.conversation_id  # the X-AG-Conversation-Id header still wins
        ex.upstream = caps.upstream
        chat.request.stream = True
        decoded.append(chat)
        routed.append(Call(caps, chat.request))
        return chat.request

    def encode(req: Request) -> bytes:
        return UPSTREAM_DIALECTS[routed[0].caps.kind].encode(routed[0], ex, gw)

    await pipeline.prepare(ex, gw, decode, encode)
    chat, call = decoded[0], routed[0]
    dialect = UPSTREAM_DIALECTS[call.caps.kind]
    path, _, query = dialect.path(call).partition("?")
    resp, body = await call_upstream(ex, gw, call.caps.upstream, path, dialect.headers(ex.headers), query, stream=True)
    out_headers = relay_headers({}, ex.scid)
    if body is not None:
        if resp.status == 200:
            raise GatewayError(502, "the upstream answered without streaming", "api_error")
        # request-id, and retry-after / x-should-retry so a client can honour a 429/529's advice
        out_headers.update({k: v for k, v in resp.headers.items()
                            if k in ("request-id", "retry-after", "x-should-retry")})
        return Response(body, status_code=resp.status, headers=out_headers,
                        media_type=resp.headers.get("content-type", "application/json"))

    encoder = augment_stream.StreamEncoder(chat.tool_meta, tool_use_start=chat.tool_use_start)
    source: Any = TranslatedStream(resp, dialect.translator(call)) if dialect.translator is not None else resp
    return stream_answer(ex, gw, source, encoder, {}, augment_stream.MEDIA_TYPE, lift=lift_turn)


async def conversation(request: HTTPRequest) -> Response:
    """``GET /gateway/conversations/{scid}``: the caller's own conversation, exported.

    Tenant-scoped by the credential: another tenant's SCID is indistinguishable from an unknown one
    (404). ``?format=openai`` (default) or ``anthropic``; ``?include_signatures=true``.
    """
    gw = gateway_of(request)
    tenant = identity.tenant_of(gw.settings.secret, {k.lower(): v for k, v in request.headers.items()})
    if tenant is None:
        raise ClientError(401, "an API key (x-api-key or Authorization: Bearer) is required",
                          "authentication_error")
    fmt = next((f for f in FORMATS if f == request.query_params.get("format", "openai")), None)
    if fmt is None:
        raise bad_request(f"format: Input should be one of {', '.join(FORMATS)}")
    include = request.query_params.get("include_signatures", "false").lower() in ("true", "1", "yes")
    scid = request.path_params["scid"]
    conv = None
    if gw.store is not None and is_valid_scid(scid):
        try:
            conv = await gw.store.get_conversation(tenant, scid)
        except StoreError as e:
            raise GatewayError(503, "the conversation store is unavailable", "api_error") from e
    if conv is None:
        raise ClientError(404, f"conversation {scid} not found", "not_found_error")
    return Response(orjson.dumps(export_conversation(conv, fmt, include_signatures=include)),
                    media_type="application/json")

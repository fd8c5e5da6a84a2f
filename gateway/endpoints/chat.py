"""OpenAI ``POST /v1/chat/completions`` (thin handler).

OpenAI body -> canonical (``openai_chat.decode_request``) -> the same pipeline stages
as /v1/messages -> the upstream the routing table names for the model -> the answer
re-encoded as ``chat.completion`` or ``chat.completion.chunk`` SSE.

Each kind of upstream the surface can call is one ``dialects.UpstreamDialect`` entry (path,
headers, request encoder, turn decoder, stream translator, error reader); a model
whose upstream has no entry, or is not configured, gets a 400 ``model_not_supported`` (``dialects.route``).
Streams of non-Anthropic upstreams are translated into canonical events
(``streaming.translate``) so the one relay and the one OpenAI stream encoder serve all.
The decoder is a ``pipeline.ReplayDecoder``: a tool loop's replayed history is decoded once
per worker (``gateway.replay_memo``, ``openai_chat_messages.continue_messages``).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import metrics, pipeline, surfaces
from gateway.deps import Gateway
from gateway.dialects import UPSTREAM_DIALECTS, Call, route
from gateway.endpoints.common import call_upstream, exchange_from, gateway_of, relay_headers, stream_answer
from gateway.errors import GatewayError, render_error
from gateway.exchange import Exchange
from gateway.protocols import openai_chat
from gateway.protocols.canonical import Message, Request
from gateway.protocols.openai_chat_messages import continue_messages
from gateway.protocols.openai_chat_stream import StreamEncoder
from gateway.protocols.params import DROPPED_PARAMS
from gateway.records import lift_turn
from gateway.routing import ModelCaps
from gateway.streaming.accumulate import Snapshot
from gateway.streaming.translate import TranslatedStream


def _route(ex: Exchange, gw: Gateway,
           routed: list[Call]) -> tuple[pipeline.ReplayDecoder, pipeline.Encoder]:
    def caps_of(body: Any) -> ModelCaps:
        model = body.get("model") if isinstance(body, dict) else None
        return gw.router.caps_for(model if isinstance(model, str) else "")

    def decode(body: Any, replayed: list[Message] | None) -> Request:
        caps = caps_of(body)
        req = openai_chat.decode_request(body, provider_fields=caps.kind == "openai", replayed=replayed,
                                         route=caps.kind, drop_unsupported=gw.settings.drop_unsupported_params)
        metrics.observe_dropped_params(req.surface.get(DROPPED_PARAMS), caps.kind)
        caps = route(gw.router, gw.upstreams, req.model)
        ex.upstream = caps.upstream
        routed.append(Call(caps, req))
        return req

    def resume(parsed: dict[str, Any], kept: list[Message | None], tail: list[Any]) -> list[Message] | None:
        return continue_messages(kept, tail, len(parsed["messages"]), provider_fields=caps_of(parsed).kind == "openai")

    def encode(req: Request) -> bytes:
        call = routed[0]
        return UPSTREAM_DIALECTS[call.caps.kind].encode(call, ex, gw)

    return pipeline.ReplayDecoder("openai", decode, resume), encode


async def chat_completions(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    ex = await exchange_from(request, surfaces.CHAT_COMPLETIONS)
    metrics.bind(ex)
    routed: list[Call] = []
    decode, encode = _route(ex, gw, routed)
    await pipeline.prepare(ex, gw, decode, encode)
    req = ex.request
    assert req is not None
    call = routed[0]
    dialect = UPSTREAM_DIALECTS[call.caps.kind]
    path, _, query = dialect.path(call).partition("?")
    resp, body = await call_upstream(ex, gw, ex.upstream, path, dialect.headers(ex.headers), query,
                                     stream=req.is_stream)
    headers = relay_headers({k: v for k, v in resp.headers.items() if k not in ("content-type", "content-length")},
                            ex.scid)
    created = int(time.time())
    exclude = bool(req.surface.get("exclude_reasoning"))
    if body is not None:
        if resp.status != 200:
            status, payload = render_error("openai", dialect.error(resp.status, body))
            return Response(payload, status_code=status, headers=headers, media_type="application/json")
        try:
            turn = dialect.decode_turn(pipeline.parse_json(body), call)
        except GatewayError:
            raise GatewayError(502, "the upstream answered with a message thinkgate cannot read",
                               "api_error") from None
        await pipeline.record(ex, gw, turn)
        headers = relay_headers(headers, ex.scid)  # (a new conversation's id is known once it is recorded)
        completion = openai_chat.encode_completion(turn, created=created, scid=ex.scid, exclude_reasoning=exclude)
        return Response(orjson.dumps(completion), status_code=200, headers=headers, media_type="application/json")

    snap = Snapshot()
    encoder = StreamEncoder(snap, created=created, scid=ex.scid, exclude_reasoning=exclude,
                            include_usage=bool(req.surface.get("include_usage")))
    source: Any = TranslatedStream(resp, dialect.translator(call)) if dialect.translator is not None else resp
    return stream_answer(ex, gw, source, encoder, headers, "text/event-stream", lift=lift_turn, snapshot=snap)


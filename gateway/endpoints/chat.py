"""OpenAI ``POST /v1/chat/completions`` (thin handler).

OpenAI body -> canonical (``openai_chat.decode_request``) -> the same pipeline stages
as /v1/messages -> the upstream the routing table names for the model -> the answer
re-encoded as ``chat.completion`` or ``chat.completion.chunk`` SSE.

Each kind of upstream the surface can call is one ``UpstreamDialect`` entry (path,
headers, request encoder, turn decoder, stream translator, error reader); a model
whose upstream has no entry, or is not configured, gets a 400 ``model_not_supported``.
Streams of non-Anthropic upstreams are translated into canonical events
(``streaming.translate``) so the one relay and the one OpenAI stream encoder serve all.
The decoder is a ``pipeline.ReplayDecoder``: a tool loop's replayed history is decoded once
per worker (``gateway.replay_memo``, ``openai_chat_messages.continue_messages``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response, StreamingResponse

from gateway import identity, metrics, pipeline, surfaces
from gateway.endpoints.common import exchange_from, gateway_of
from gateway.endpoints.gemini import gemini_headers
from gateway.errors import ClientError, GatewayError, render_error, upstream_error
from gateway.protocols import anthropic, gemini, openai_chat, openai_compat
from gateway.protocols.canonical import JSON, Message, Request, Turn
from gateway.protocols.gemini_stream import GeminiTranslator
from gateway.protocols.openai_chat_messages import continue_messages
from gateway.protocols.openai_chat_stream import StreamEncoder
from gateway.protocols.openai_compat_stream import CompatTranslator
from gateway.records import lift_turn
from gateway.routing import ModelCaps, origin_of
from gateway.streaming.accumulate import Snapshot
from gateway.streaming.relay import relay_sse
from gateway.streaming.translate import TranslatedStream, Translator
from gateway.upstream import forward_request_headers

if TYPE_CHECKING:
    from gateway.app import Gateway

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True, slots=True)
class Call:
    """One routed request: the model's capabilities and the origin its answer's signatures get."""

    caps: ModelCaps
    req: Request

    @property
    def origin(self) -> str:
        return origin_of(self.caps, self.req.model)


@dataclass(frozen=True, slots=True)
class UpstreamDialect:
    path: Callable[[Call], str]
    headers: Callable[[Mapping[str, str]], dict[str, str]]  # client headers -> upstream headers
    encode: Callable[[Call, pipeline.Exchange], bytes]     # the request body for this upstream
    decode_turn: Callable[[Any, Call], Turn]
    translator: Callable[[Call], Translator] | None         # None: the stream is canonical already
    error: Callable[[int, bytes], GatewayError]             # an upstream error body -> our error


def anthropic_headers(client: Mapping[str, str]) -> dict[str, str]:
    """The bearer credential becomes ``x-api-key`` (OAuth tokens stay bearer); ``anthropic-*`` pass."""
    out = {k: v for k, v in forward_request_headers(client).items() if k != "authorization"}
    cred = identity.credential_of(client)
    if cred and cred.startswith("sk-ant-oat"):
        out.pop("x-api-key", None)
        out["authorization"] = f"Bearer {cred}"
    elif cred:
        out["x-api-key"] = cred
    out.setdefault("anthropic-version", ANTHROPIC_VERSION)
    return out


def random_ids(k: int, name: str, args: JSON) -> str:
    """Gemini calls carry no id: OpenAI clients get a fresh one per call (recorded with the turn)."""
    return "call_" + secrets.token_hex(12)


def _gemini_path(call: Call) -> str:
    action = "streamGenerateContent?alt=sse" if call.req.is_stream else "generateContent"
    return f"/v1beta/models/{call.req.model}:{action}"


UPSTREAM_DIALECTS: dict[str, UpstreamDialect] = {
    "anthropic": UpstreamDialect(
        lambda c: "/v1/messages", anthropic_headers, lambda c, ex: pipeline.anthropic_body(ex, c.req),
        lambda body, c: anthropic.decode_turn(body), None, upstream_error),
    "gemini": UpstreamDialect(
        _gemini_path, gemini_headers, lambda c, ex: orjson.dumps(gemini.encode_request(c.req)),
        lambda body, c: gemini.decode_turn(body, origin=c.origin, mint=random_ids, model=c.req.model),
        lambda c: GeminiTranslator(origin=c.origin, mint=random_ids, model=c.req.model), upstream_error),
    "openai": UpstreamDialect(
        lambda c: "/chat/completions", openai_compat.upstream_headers,
        lambda c, ex: orjson.dumps(openai_compat.encode_request(c.req, c.caps)),
        lambda body, c: openai_compat.decode_turn(body, origin=c.origin, model=c.req.model),
        lambda c: CompatTranslator(origin=c.origin, model=c.req.model), upstream_error),
}


def _route(ex: pipeline.Exchange, gw: Gateway,
           routed: list[Call]) -> tuple[pipeline.ReplayDecoder, pipeline.Encoder]:
    def caps_of(body: Any) -> ModelCaps:
        model = body.get("model") if isinstance(body, dict) else None
        return gw.router.caps_for(model if isinstance(model, str) else "")

    def decode(body: Any, replayed: list[Message] | None) -> Request:
        caps = caps_of(body)
        req = openai_chat.decode_request(body, provider_fields=caps.kind == "openai", replayed=replayed)
        if caps.kind not in UPSTREAM_DIALECTS or caps.upstream not in gw.upstreams:
            raise ClientError(400, f"no upstream configured for model {req.model}", "invalid_request_error",
                              "model_not_supported")
        ex.upstream = caps.upstream
        routed.append(Call(caps, req))
        return req

    def resume(parsed: dict[str, Any], kept: list[Message | None], tail: list[Any]) -> list[Message] | None:
        return continue_messages(kept, tail, len(parsed["messages"]), provider_fields=caps_of(parsed).kind == "openai")

    def encode(req: Request) -> bytes:
        call = routed[0]
        return UPSTREAM_DIALECTS[call.caps.kind].encode(call, ex)

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
    dialect, upstream = UPSTREAM_DIALECTS[call.caps.kind], gw.upstreams[ex.upstream]
    path, _, query = dialect.path(call).partition("?")
    resp = await upstream.post(path, ex.outgoing, dialect.headers(ex.headers), query)
    metrics.observe_upstream(upstream.name, resp.status)
    headers = {k: v for k, v in resp.headers.items() if k not in ("content-type", "content-length")}
    if ex.scid:
        headers[identity.SCID_HEADER] = ex.scid
    created = int(time.time())
    exclude = bool(req.surface.get("exclude_reasoning"))
    streamed = resp.status == 200 and req.is_stream \
        and resp.headers.get("content-type", "").startswith("text/event-stream")
    if not streamed:
        body = await resp.read()
        metrics.observe_upstream_body(upstream.name, resp.status, body)
        if resp.status != 200:
            status, payload = render_error("openai", dialect.error(resp.status, body))
            return Response(payload, status_code=status, headers=headers, media_type="application/json")
        try:
            turn = dialect.decode_turn(pipeline.parse_json(body), call)
        except GatewayError:
            raise GatewayError(502, "the upstream answered with a message thinkgate cannot read",
                               "api_error") from None
        await pipeline.record(ex, gw, turn)
        if ex.scid:
            headers[identity.SCID_HEADER] = ex.scid
        completion = openai_chat.encode_completion(turn, created=created, scid=ex.scid, exclude_reasoning=exclude)
        return Response(orjson.dumps(completion), status_code=200, headers=headers, media_type="application/json")

    async def on_complete(turn: Turn) -> None:
        await pipeline.record(ex, gw, lift_turn(turn))

    snap = Snapshot()
    encoder = StreamEncoder(snap, created=created, scid=ex.scid, exclude_reasoning=exclude,
                            include_usage=bool(req.surface.get("include_usage")))
    headers.update(SSE_HEADERS)
    source: Any = TranslatedStream(resp, dialect.translator(call)) if dialect.translator is not None else resp
    relay = relay_sse(source, encoder, on_complete=on_complete, snapshot=snap)
    return StreamingResponse(relay, status_code=200, headers=headers, media_type="text/event-stream")


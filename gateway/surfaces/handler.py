"""The one handler every pipeline surface runs, and the ``Codec`` in which a surface says what differs.

    body -> Exchange -> pipeline.prepare: decode, route, identify, load, repair/sanitize, encode -> upstream
      -> an answer that is not the stream: an error relayed or rendered in the client's dialect (``error``);
         a 200's turn decoded, recorded and answered in the client's dialect (``completion``)
      -> the stream: relayed through the surface's stream encoder, the finished turn recorded (``stream_answer``)

A surface is a ``Codec`` subclass, one instance per request, in its endpoint module: its decoder, the kinds of upstream
it can call, its answers and its stream encoder; what it leaves alone comes from the upstream dialect table
(``dialects.UPSTREAM_DIALECTS``: path, headers, encoder, turn decoder, stream translator, error reader). Routing is
``dialects.route`` on the decoded request's model, once, right after the surface decoder: ``prepare`` runs the
stages as one, and an unroutable model fails before the store is asked and before any upstream body is encoded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, NoReturn

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway.access import admission
from gateway.app.deps import Gateway
from gateway.dialects import registry
from gateway.dialects.accumulate import Snapshot
from gateway.dialects.canonical import Message, Request, Turn
from gateway.dialects.gemini.parts import Mint
from gateway.dialects.routing import ModelCaps
from gateway.errors import GatewayError, render_error
from gateway.ops import metrics
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import Exchange
from gateway.surfaces.common import (
    UPSTREAM_DIALECTS,
    Call,
    call_upstream,
    exchange_from,
    gateway_of,
    relay_headers,
    route,
    stream_answer,
    while_client_waits,
)
from gateway.surfaces.table import Surface
from gateway.transport.upstream import StreamEncoder, TranslatedStream, UpstreamResponse

JSON = "application/json"
log = logging.getLogger("thinkgate.endpoints")
UNROUTED = ModelCaps("anthropic")  # what a surface that does not route calls (``Codec.kinds`` None)
Relay = tuple[StreamEncoder, str | None, Snapshot | None]  # a stream's encoder, media type, and the snapshot it reads


class Codec:
    """One client surface's side of one request. A subclass sets ``surface`` and its decoder (``decode``, or
    ``decoder`` for a ``pipeline.ReplayDecoder``) and ``stream``, and overrides what else its protocol does
    differently; the defaults call the routed upstream as its dialect entry says and answer in JSON."""

    surface: ClassVar[Surface]
    kinds: ClassVar[tuple[str, ...] | None] = tuple(UPSTREAM_DIALECTS)  # None: Anthropic's, whatever the model
    media_type: ClassVar[str | None] = JSON  # of the answers that are not a stream (None: the headers name it)
    hides: ClassVar[frozenset[str] | None] = None  # the client gets the upstream's headers but these (None: none)
    raw_events: ClassVar[bool] = False  # the stream encoder wants a translated stream's upstream events too
    may_stream: ClassVar[bool] = True  # False: the answer is read whole, whatever the request's ``stream`` says
    # a surface that does not route (``kinds`` None) calls Claude on a cloud platform when a route puts it there
    platforms: ClassVar[bool] = False
    # the request goes as it came (decoded, so that a binding 400 can be retried), not through the stages, unless the
    # model binds thinking to its prefix (then the stages keep the prefix: docs/upstream-rules.md)
    as_it_came: ClassVar[bool] = False
    ex: Exchange  # from when the body is read
    call: Call  # the routed request, once it is decoded

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self._model: str | None = None
        self.grant: admission.Grant | None = None  # the request's gateway key, once admitted
        self.fallback: str | None = None  # the model this pass sends the request as (``GATEWAY_FALLBACKS``)
        self.tried: frozenset[str] = frozenset()  # the models passes before this one tried

    def setup(self, request: HTTPRequest) -> None:
        """What the surface takes from the HTTP request besides its body and headers, before the body is read (it
        may refuse the request by its path)."""

    def decoder(self) -> pipeline.Decoder | pipeline.ReplayDecoder:
        return self.decode

    def decode(self, body: Any) -> Request:
        raise NotImplementedError

    @property
    def scid(self) -> str | None:
        """The conversation the request belongs to (sent back with the answer)."""
        return self.ex.identity.scid

    def caps_of(self, body: Any) -> ModelCaps:
        """The capabilities of a parsed body's model, for a decoder that depends on them (``caps_for``)."""
        model = body.get("model") if isinstance(body, dict) else None
        model = model if isinstance(model, str) else ""
        return self.caps_for(self.fallback or self.gw.aliases.get(model, model))

    def caps_for(self, model: str) -> ModelCaps:
        """The router's answer for ``model``, asked once per request (a decoder's lookup and the routing itself read
        the same answer)."""
        if self.ex.route.caps is None or self._model != model:
            self._model, self.ex.route.caps = model, self.gw.router.caps_for(model)
        return self.ex.route.caps

    def encoder(self) -> pipeline.Encoder | None:
        return lambda req: UPSTREAM_DIALECTS[self.call.caps.kind].encode(self.call, self.ex, self.gw)

    def routed(self, req: Request) -> Request:
        """The decoded request, routed (``dialects.route``): the upstream it goes to and how that one is called. A
        model alias (``GATEWAY_MODEL_ALIASES``) is the model it stands for from here on (routed, sent, recorded)."""
        if (model := self.fallback or self.gw.aliases.get(req.model)) is not None:
            req.model = model
            self.ex.continuation.changed = True  # (the client's bytes name the alias: the body is encoded again)
        found = self.caps_for(req.model)
        caps = self._unrouted(found) if self.kinds is None else route(found, self.gw.upstreams, req.model, self.kinds)
        self.ex.route.upstream = caps.upstream
        self.call = Call(caps, req)
        metrics.observe_dropped_params(req.surface.dropped_params, caps.kind)  # (a surface that may drop some)
        return req

    def _unrouted(self, found: ModelCaps) -> ModelCaps:
        """What a surface that does not route calls: the Anthropic upstream, or Claude where a route puts it on a
        cloud platform (Bedrock, Vertex AI), for a surface that may call those (``platforms``)."""
        if self.platforms and registry.of(found).messages_platform and found.upstream in self.gw.upstreams:
            return found
        return UNROUTED

    def outgoing(self) -> bytes:
        """The body the upstream gets: the encoded request, as its platform takes it (``UpstreamDialect.finish``)."""
        finish = UPSTREAM_DIALECTS[self.call.caps.kind].finish
        return self.ex.plan.outgoing if finish is None else finish(self.ex.plan.outgoing, self.ex.client.headers)

    async def prepare(self) -> None:
        """``pipeline.prepare`` with the surface's decoder, routed as soon as it has decoded, and its encoder."""
        if self.as_it_came and not self.caps_of(body := pipeline.parse_json(self.ex.client.raw_body)).prefix_bound:
            pipeline.identify_tenant(self.ex, self.gw)  # one credential per request, before anything is forwarded
            self.ex.request = self.routed(self.decode(body))
            self.ex.plan.outgoing = self.ex.client.raw_body
            return
        decoder = self.decoder()
        routed: pipeline.Decoder | pipeline.ReplayDecoder
        if isinstance(decoder, pipeline.ReplayDecoder):
            replay = decoder.decode

            def decode_replay(body: Any, kept: list[Message] | None) -> Request:
                self.ex.client.fields = body if isinstance(body, dict) else None  # (a decoder may read it otherwise)
                return self.routed(replay(body, kept))
            routed = pipeline.ReplayDecoder(decoder.kind, decode_replay, decoder.resume)
        else:
            plain = decoder

            def decode(body: Any) -> Request:
                self.ex.client.fields = body if isinstance(body, dict) else None
                return self.routed(plain(body))
            routed = decode
        await pipeline.prepare(self.ex, self.gw, routed, self.encoder())
        if (mint := self.ids(self.call.req.messages)) is not None:
            self.call = dataclasses.replace(self.call, mint=mint)

    def ids(self, prefix: Sequence[Message]) -> Mint | None:
        """How the answer's calls get ids when the upstream names none, for clients that replay them without (the
        request's messages as the stages left them); None: ``Call``'s."""
        return None

    def target(self) -> tuple[str, dict[str, str], str]:
        """The upstream path, headers and query (under a gateway key: the upstream credential thinkgate holds)."""
        dialect = UPSTREAM_DIALECTS[self.call.caps.kind]
        path, _, query = dialect.path(self.call).partition("?")
        return path, dialect.headers(self.client_headers()), query

    def client_headers(self) -> Mapping[str, str]:
        """The client's headers as the upstream's header rules read them (under a gateway key: its credential
        swapped for the one thinkgate holds for the upstream)."""
        return admission.upstream_headers(self.ex.client.headers, self.grant, self.call.caps.upstream, self.gw)

    def headers(self, resp: UpstreamResponse) -> dict[str, str]:
        """The upstream's answer headers the client gets."""
        return {} if self.hides is None else {k: v for k, v in resp.headers.items() if k not in self.hides}

    def respond(self, body: bytes, status: int, headers: Mapping[str, str] | None = None,
                media_type: str | None = JSON) -> Response:
        return Response(body, status_code=status, headers=relay_headers(headers or {}, self.scid),
                        media_type=media_type)

    async def answer(self, resp: UpstreamResponse, body: bytes) -> Response:
        """An upstream answer that is not the stream: an error, or a 200 whose turn is recorded and answered."""
        if resp.status != 200:
            return self.error(resp, body)
        try:
            turn: Turn | None = UPSTREAM_DIALECTS[self.call.caps.kind].decode_turn(pipeline.parse_json(body), self.call)
        except GatewayError:
            turn = None  # not recorded (and relayed as it came, by a surface that relays the upstream's body)
        if turn is not None:
            await pipeline.record(self.ex, self.gw, turn)
        return self.completion(resp, body, turn)

    def relays(self, body: bytes) -> bool:
        """An upstream error body the client can read as it is (else it is rendered in the client's dialect)."""
        return False

    def error(self, resp: UpstreamResponse, body: bytes) -> Response:
        if not self.relays(body):
            _, body = render_error(self.surface.errors, UPSTREAM_DIALECTS[self.call.caps.kind].error(resp.status, body))
        return self.respond(body, resp.status, self.headers(resp), self.media_type)

    def completion(self, resp: UpstreamResponse, body: bytes, turn: Turn | None) -> Response:
        """The client's answer to an upstream 200 (``turn``: None when it could not be read): the body as it came."""
        return self.respond(body, 200, self.headers(resp), self.media_type)

    def stream(self) -> Relay:
        raise NotImplementedError

    def source(self, resp: UpstreamResponse) -> Any:
        """The upstream stream as the relay reads it: canonical events (translated, if the dialect has a translator)."""
        dialect = UPSTREAM_DIALECTS[self.call.caps.kind]
        if dialect.translator is None:
            return resp
        return TranslatedStream(resp, dialect.translator(self.call), raw_events=self.raw_events,
                                framing=dialect.framing() if dialect.framing is not None else None)


def unreadable() -> NoReturn:
    """For a surface that re-encodes the upstream's answer: one it cannot read."""
    raise GatewayError(502, "the upstream answered with a message thinkgate cannot read", "api_error")


async def handle(request: HTTPRequest, kind: type[Codec]) -> Response:
    codec = kind(gateway_of(request))
    codec.setup(request)
    ex = codec.ex = await exchange_from(request, kind.surface)
    gw = codec.gw
    metrics.bind(ex)
    # the gateway key's round trip overlaps the decode and the load; its refusal comes before any other error
    admitting = asyncio.ensure_future(admission.admit(ex.client.headers, gw))
    try:
        response = await _handle(request, codec, admitting)
    except BaseException:
        try:
            grant = await admitting
        except GatewayError as refused:
            raise refused from None
        await admission.release(grant, None, gw)
        raise
    return response if codec.grant is None else admission.released_after(response, codec.grant, ex, gw)


async def _handle(request: HTTPRequest, codec: Codec, admitting: asyncio.Future[admission.Grant | None] | None = None
                  ) -> Response:
    ex, gw = codec.ex, codec.gw
    await codec.prepare()
    if admitting is not None:
        codec.grant = await admitting
    assert ex.request is not None
    admission.check_model(codec.grant, ex.request.model, gw.settings, ex.route.upstream,
                          bool(registry.of(codec.call.caps).platform))
    pipeline.served(ex)
    path, headers, query = codec.target()
    stream = ex.request.is_stream and codec.may_stream
    # the upstream call's span (a stream's until its headers), whose W3C traceparent the upstream gets
    with gw.tracing.span("upstream", {"thinkgate.upstream": ex.route.upstream, "url.path": path}, client=True) as span:
        gw.tracing.inject(headers)
        call = call_upstream(ex, gw, ex.route.upstream, path, headers, query, stream=stream, body=await _body(codec))
        # a client that goes away before the upstream answers (a stream's: before its first byte) cancels the call;
        # once a stream is relayed, the relay notices it and stops reading the upstream's stream
        resp, body = await while_client_waits(request, call)
        if span is not None:
            span.set_attribute("http.response.status_code", resp.status)
    retried = pipeline.retry_kind(ex, gw, registry.of(codec.call.caps), resp.status, body) if body is not None else None
    if retried is not None:
        # a binding 400 (stale blocks removed) or another thinking 400 (every replayed reasoning degraded): one retry
        retry = _retry_body(codec)
        if retry is None:  # a body forwarded as it came that cannot be written again: the upstream's 400 stands
            metrics.observe_retry(retried, False)
        else:
            ex.plan.outgoing = retry
            outgoing = await _body(codec)
            call = call_upstream(ex, gw, ex.route.upstream, path, headers, query, stream=stream, body=outgoing)
            resp, body = await while_client_waits(request, call)
            metrics.observe_retry(retried, resp.status < 400)
    if body is not None and resp.status in FALLBACK_STATUSES and (again := await _fallback(request, codec, resp)):
        return await _handle(request, again)
    if body is not None:
        return await codec.answer(resp, body)
    encoder, media_type, snapshot = codec.stream()
    return stream_answer(ex, gw, codec.source(resp), encoder, codec.headers(resp), media_type,
                         snapshot=snapshot)


async def _body(codec: Codec) -> bytes:
    """The body the upstream gets (``Codec.outgoing``); a cloud platform's rewrite of a big body off the event loop."""
    if not registry.of(codec.call.caps).platform:
        return codec.outgoing()
    return await pipeline.off_loop_if_big(codec.ex, codec.gw, codec.outgoing)


FALLBACK_STATUSES = frozenset({429, 500, 502, 503, 504, 529})  # (the upstream failed before the first byte)


async def _fallback(request: HTTPRequest, codec: Codec, resp: UpstreamResponse) -> Codec | None:
    """The next pass of a request whose upstream failed before the first byte, as its model's fallback
    (``GATEWAY_FALLBACKS``): the client's request again, every stage run for the new target (repair and sanitize
    decide what of the recorded thinking it may receive), recorded in the same conversation. None: no fallback (or
    the chain came back to a model it tried)."""
    assert codec.ex.request is not None
    model = codec.ex.request.model
    nxt = codec.gw.fallbacks.get(model)
    if nxt is None or nxt in codec.tried or nxt == model:
        return None
    again = type(codec)(codec.gw)
    again.setup(request)
    ex = codec.ex  # (the client's request as it came: its body was read once)
    again.ex = Exchange(ex.client)
    again.grant, again.fallback, again.tried = codec.grant, nxt, codec.tried | {model}
    metrics.bind(again.ex)
    metrics.observe_fallback(resp.status)
    log.info("upstream answered %d for %s: falling back to %s", resp.status, model[:100], nxt[:100])
    return again


def _retry_body(codec: Codec) -> bytes | None:
    """The request without its stale blocks, encoded for the retry; None when it cannot be encoded (nested deeper
    than orjson writes: a body the first call forwarded byte for byte)."""
    ex, gw = codec.ex, codec.gw
    assert ex.request is not None
    encode = codec.encoder()
    try:
        return encode(ex.request) if encode is not None else pipeline.anthropic_body(ex, ex.request, gw)
    except (RecursionError, orjson.JSONEncodeError):
        return None


def endpoint(kind: type[Codec]) -> Callable[[HTTPRequest], Awaitable[Response]]:
    """The starlette endpoint of a surface's codec."""
    async def run(request: HTTPRequest) -> Response:
        return await handle(request, kind)

    run.__name__ = run.__qualname__ = kind.surface.label
    return run

"""What every thin handler shares: the upstream call table and the one routing rule, the app's dependencies, the
request body, the upstream call and the relay of its answer (the stream branch, its headers and the record of the
finished turn, written once).

The request budget (``read_body``): what one request may cost a worker in memory (``GATEWAY_REQUEST_MEMORY_MB``),
estimated from its body before it is decoded, so that one request cannot take a replica's memory.

Measured with ``bench/peak_rss.py`` (2026-11-28, every surface): a request's peak is about 3-6 times its body's bytes
for a body of long strings (the body, its parsed values, the canonical request, what goes upstream and the turn
record each hold the text once), plus about 1 KiB for each JSON object in it (a tiny message is a dict parsed, a
canonical message and its blocks, and their encodings: 100,000 of them in a 3.9 MB body peak at 77-116 MB). So the
estimate is ``BYTE_COST`` per byte plus ``OBJECT_COST`` per ``{`` (one C-level count over the body, before any
parsing); a declared ``content-length`` whose bytes alone pass the budget is refused before the body is read.

**The call table**: how thinkgate calls each kind of upstream, in one table (``UPSTREAM_DIALECTS``), and the one
routing rule (``route``).

An ``UpstreamDialect`` holds what differs per upstream protocol: its path, the headers it takes from the client's,
the request encoder, the turn decoder, the stream translator (None: its stream is canonical already) and the error
reader; a cloud platform adds the body rewrite it takes after encoding (``finish``), its stream framing (Bedrock's
event stream), its answer as the Messages API's (Converse) and its token counting (``Counting``). A platform's
request signature is its ``Upstream``'s (``gateway.dialects.cloud``). ``route`` is the one place that decides
whether a model can be served from a surface: the routing table names its upstream (``gateway.dialects.routing``),
and that upstream must be configured and of a kind the surface calls. Surfaces (``gateway.surfaces``) call upstreams
through this table only; no endpoint imports another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HTTPRequest
from starlette.responses import StreamingResponse

from gateway.app.deps import Gateway
from gateway.continuation.replay_memo import Match
from gateway.dialects import client_json, registry
from gateway.dialects.accumulate import Snapshot
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.bedrock import converse
from gateway.dialects.bedrock import wire as bedrock
from gateway.dialects.canonical import JSON, Request, Turn
from gateway.dialects.gemini import wire as gemini
from gateway.dialects.gemini.parts import Mint
from gateway.dialects.gemini.wire import GeminiTranslator
from gateway.dialects.openai_compat import wire as openai_compat
from gateway.dialects.openai_compat.wire import CompatTranslator
from gateway.dialects.responses import upstream as responses_upstream
from gateway.dialects.responses.upstream import ResponsesTranslator
from gateway.dialects.routing import ModelCaps, origin_of
from gateway.dialects.vertex import wire as vertex
from gateway.errors import ClientError, GatewayError, upstream_error
from gateway.ops import metrics
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import ClientRequest, Exchange
from gateway.pipeline.identify import CONFLICTING, CREDENTIAL_HEADERS, SCID_HEADER, credential_of, tenant_of
from gateway.surfaces.table import Surface
from gateway.transport.upstream import (
    Framing,
    StreamEncoder,
    Translator,
    UpstreamResponse,
    forward_request_headers,
    relay_sse,
)
from gateway.vocab import ClientDialect

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


ANTHROPIC_VERSION = "2023-06-01"  # sent when the client names none


def random_ids(k: int, name: str, args: JSON) -> str:
    """Ids for the calls of an upstream that names none (Gemini): a fresh one per call, recorded with the turn."""
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class Call:
    """One routed request: the model's capabilities, the origin its answer's signatures get, and the ids its
    answer's calls get when the upstream names none (a surface whose clients replay without ids picks its own)."""

    caps: ModelCaps
    req: Request
    mint: Mint = random_ids

    @property
    def origin(self) -> str:
        return origin_of(self.caps, self.req.model)


@dataclass(frozen=True, slots=True)
class Counting:
    """How a cloud platform counts a Messages request's tokens (``/v1/messages/count_tokens``)."""

    path: Callable[[Call], str]
    body: Callable[[bytes, Mapping[str, str], Call], bytes]  # the count_tokens body, the client's headers
    answer: Callable[[Any], dict[str, Any]]                  # its answer as the Messages API's ``{"input_tokens"}``


@dataclass(frozen=True, slots=True)
class UpstreamDialect:
    path: Callable[[Call], str]
    headers: Callable[[Mapping[str, str]], dict[str, str]]  # client headers -> upstream headers
    encode: Callable[[Call, Exchange, Gateway], bytes]     # the request body for this upstream
    decode_turn: Callable[[Any, Call], Turn]
    translator: Callable[[Call], Translator] | None         # None: the stream is canonical already
    error: Callable[[int, bytes], GatewayError]             # an upstream error body -> our error
    models: tuple[str, str] | None = None                   # (path, query) of its own model list (None: none)
    # the encoded body as the platform takes it, given the client's headers (a cloud platform's Messages body)
    finish: Callable[[bytes, Mapping[str, str]], bytes] | None = None
    framing: Callable[[], Framing] | None = None            # its stream's framing (None: server-sent events)
    # its JSON answer as the Messages API's (for a Messages client; None: it is the Messages API's already)
    as_messages: Callable[[Any, Call], dict[str, Any]] | None = None
    counting: Counting | None = None                        # a cloud platform's token counting (None: none)


def gemini_headers(client: Mapping[str, str]) -> dict[str, str]:
    """The client's key as ``x-goog-api-key`` (a ``?key=`` query is forwarded with the query)."""
    key = credential_of(client)
    return {"x-goog-api-key": key} if key else {}


def anthropic_headers(client: Mapping[str, str]) -> dict[str, str]:
    """The bearer credential becomes ``x-api-key`` (OAuth tokens stay bearer); ``anthropic-*`` pass."""
    out = {k: v for k, v in forward_request_headers(client).items() if k != "authorization"}
    cred = credential_of(client)
    if cred and cred.startswith("sk-ant-oat"):
        out.pop("x-api-key", None)
        out["authorization"] = f"Bearer {cred}"
    elif cred:
        out["x-api-key"] = cred
    out.setdefault("anthropic-version", ANTHROPIC_VERSION)
    return out


# Client headers some OpenAI-compatible upstreams read (Copilot's integration headers, OpenRouter's
# attribution), forwarded as they are.
PASS_HEADERS = frozenset({"copilot-integration-id", "editor-version", "editor-plugin-version", "openai-intent",
                          "http-referer", "x-title", "openai-organization", "openai-project"})


def compat_headers(client: Mapping[str, str]) -> dict[str, str]:
    """The client's credential as a bearer token, plus the pass-through headers."""
    out = {k: v for k, v in client.items() if k in PASS_HEADERS}
    cred = credential_of(client)
    if cred:
        out["authorization"] = f"Bearer {cred}"
    return out


def no_headers(client: Mapping[str, str]) -> dict[str, str]:
    """None of the client's: a cloud platform's credential comes from the environment, never from the client."""
    return {}


def _anthropic_body(c: Call, ex: Exchange, gw: Gateway) -> bytes:
    return pipeline.anthropic_body(ex, c.req, gw)


def _own(c: Call, ex: Exchange, dialect: ClientDialect) -> dict[str, JSON] | None:
    """The client's top-level fields when it speaks ``dialect`` (what ``GATEWAY_DROP_UNSUPPORTED_PARAMS`` dropped
    left out); None for a client of another dialect."""
    fields = ex.client.fields
    return c.req.surface.kept(fields) if fields is not None and ex.client.dialect == dialect else None


def _gemini_body(c: Call, ex: Exchange, gw: Gateway) -> bytes:
    native = _own(c, ex, "gemini")
    return _body(gemini.encode_request(c.req, native, _own(c, ex, "openai")), ex, native is not None, "contents")


def _compat_body(c: Call, ex: Exchange, gw: Gateway) -> bytes:
    client = _own(c, ex, "openai")
    return _body(openai_compat.encode_request(c.req, c.caps, client), ex, client is not None, "messages")


def _responses_body(c: Call, ex: Exchange, gw: Gateway) -> bytes:
    client = _own(c, ex, "responses")
    return _body(responses_upstream.encode_request(c.req, c.caps, client), ex, client is not None, "input")


def _body(body: dict[str, JSON], ex: Exchange, same: bool, history: str) -> bytes:
    """A body for an upstream of the client's own dialect (``same``; ``history`` the field thinkgate always
    writes) keeps the client's bytes of every value thinkgate passed as received
    (``gateway.dialects.client_json``)."""
    if not same or ex.client.fields is None:
        return orjson.dumps(body)
    return client_json.splice(ex.client.raw_body, ex.client.fields, body, history)


def _gemini_turn(body: Any, c: Call) -> Turn:
    return gemini.decode_turn(body, origin=c.origin, mint=c.mint, model=c.req.model)


def _gemini_translator(c: Call) -> Translator:
    return GeminiTranslator(origin=c.origin, mint=c.mint, model=c.req.model)


def _gemini_path(call: Call) -> str:
    action = "streamGenerateContent?alt=sse" if call.req.is_stream else "generateContent"
    return f"/v1beta/models/{call.req.model}:{action}"


UPSTREAM_DIALECTS: dict[str, UpstreamDialect] = {
    "anthropic": UpstreamDialect(
        lambda c: "/v1/messages", anthropic_headers, _anthropic_body,
        lambda body, c: anthropic.decode_turn(body), None, upstream_error, ("/v1/models", "limit=1000")),
    "gemini": UpstreamDialect(
        _gemini_path, gemini_headers, _gemini_body, _gemini_turn, _gemini_translator, upstream_error,
        ("/v1beta/models", "pageSize=1000")),
    "bedrock": UpstreamDialect(
        lambda c: bedrock.path(c.req.model, c.req.is_stream), no_headers, _anthropic_body,
        lambda body, c: anthropic.decode_turn(body), lambda c: bedrock.Passthrough(), bedrock.error,
        finish=bedrock.finish, framing=bedrock.EventStreamFraming,
        counting=Counting(lambda c: bedrock.count_path(c.req.model), lambda b, h, c: bedrock.count_body(b, h),
                          bedrock.count_answer)),
    "bedrock-converse": UpstreamDialect(
        lambda c: converse.path(c.req.model, c.req.is_stream), no_headers, _anthropic_body,
        lambda body, c: anthropic.decode_turn(converse.as_message(body, c.req.model)),
        lambda c: converse.ConverseTranslator(c.req.model), bedrock.error, finish=converse.finish,
        framing=bedrock.EventStreamFraming, as_messages=lambda body, c: converse.as_message(body, c.req.model),
        counting=Counting(lambda c: bedrock.count_path(c.req.model), lambda b, h, c: converse.count_body(b, h),
                          bedrock.count_answer)),
    "vertex-anthropic": UpstreamDialect(
        lambda c: vertex.claude_path(c.req.model, c.req.is_stream), vertex.claude_headers, _anthropic_body,
        lambda body, c: anthropic.decode_turn(body), None, upstream_error, finish=vertex.finish,
        counting=Counting(lambda c: vertex.COUNT_PATH, lambda b, h, c: vertex.count_body(b, h, c.req.model),
                          lambda body: body)),
    "vertex-gemini": UpstreamDialect(
        lambda c: vertex.gemini_path(c.req.model, c.req.is_stream), no_headers, _gemini_body, _gemini_turn,
        _gemini_translator, upstream_error),
    "openai": UpstreamDialect(
        lambda c: "/chat/completions", compat_headers,
        _compat_body,
        lambda body, c: openai_compat.decode_turn(body, origin=c.origin, model=c.req.model),
        lambda c: CompatTranslator(origin=c.origin, model=c.req.model), upstream_error, ("/models", "")),
    "responses": UpstreamDialect(
        lambda c: "/responses", compat_headers,
        _responses_body,
        lambda body, c: responses_upstream.decode_turn(body, origin=c.origin, model=c.req.model),
        lambda c: ResponsesTranslator(origin=c.origin, model=c.req.model), upstream_error, ("/models", "")),
}


def counting_of(call: Call) -> Counting | None:
    """How ``call``'s upstream counts tokens when it is a cloud platform's (None: the Anthropic upstream's
    ``count_tokens``); a platform that cannot count is a 400."""
    if not registry.of(call.caps).platform:
        return None
    found = UPSTREAM_DIALECTS[call.caps.kind].counting
    if found is None:
        raise ClientError(400, f"token counting is not available for {call.req.model[:200]} on its upstream",
                          "invalid_request_error")
    return found


def count_target(call: Call, client: Mapping[str, str]) -> tuple[str, dict[str, str], str] | None:
    """A cloud platform's counting path, headers and query (None: the Anthropic upstream's ``count_tokens``)."""
    counting = counting_of(call)
    return None if counting is None else (counting.path(call), UPSTREAM_DIALECTS[call.caps.kind].headers(client), "")


def count_body(call: Call, body: bytes, client: Mapping[str, str]) -> bytes:
    """A count_tokens body as ``call``'s upstream counts it."""
    counting = counting_of(call)
    return body if counting is None else counting.body(body, client, call)


def count_answer(call: Call, body: Any) -> bytes | None:
    """A platform's count (parsed) as the Messages API's; None: the upstream's answer is the Messages API's."""
    counting = counting_of(call)
    return None if counting is None else orjson.dumps(counting.answer(body))


def route(caps: ModelCaps, configured: Collection[str], model: str,
          kinds: Collection[str] = tuple(UPSTREAM_DIALECTS)) -> ModelCaps:
    """``caps`` (the router's for ``model``) when a surface that calls upstreams of ``kinds`` can serve it: the
    routing table names its upstream, which is ``configured`` and of one of those kinds. Else a 400
    ``model_not_supported``."""
    if caps.kind not in kinds or caps.upstream not in configured:
        raise ClientError(400, f"no upstream configured for model {model} that this endpoint can call",
                          "invalid_request_error", "model_not_supported")
    return caps

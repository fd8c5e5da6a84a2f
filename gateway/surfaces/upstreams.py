"""The upstream dialects: how thinkgate calls each kind of upstream, in one table, and the one routing rule.

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

import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.app.deps import Gateway
from gateway.dialects import client_json, registry
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
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import Exchange
from gateway.pipeline.identify import credential_of
from gateway.transport.streaming import Framing, Translator
from gateway.transport.upstream import forward_request_headers
from gateway.vocab import ClientDialect

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

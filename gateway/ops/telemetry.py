"""What one request leaves behind besides metrics: its log line and its trace.

Logging: setup from settings (``GATEWAY_LOG_LEVEL``, ``GATEWAY_LOG_FORMAT=json|text``) and the one
structured line per client request.

The request line carries identifiers and decisions only: request id, tenant prefix (an HMAC of the
credential, never the credential), SCID, endpoint, upstream, model, status, durations, the kinds
of repair/sanitize actions with counts, whether records were consulted (``stateful``) and the
classified upstream error kind. Never an API key, a signature, thinking text or any other message
content. As a second line of defence every
formatted line passes through ``redact`` (bearer tokens, ``x-api-key`` values, ``sk-`` keys).

Traces: OpenTelemetry, optional (``pip install 'thinkgate[otel]'``), configured by the standard ``OTEL_*`` variables,
off and free otherwise. The one module that imports ``opentelemetry``, and only once traces are asked for.

One span per client request (``TraceMiddleware``: the route, the status, and at the end the conversation id, tenant
prefix, model family, repair actions and the classified upstream error kind); inside it one span per pipeline stage
(``Tracing.span``: identify, decode, load, repair, sanitize, encode, upstream, record) and one per store call
(``TracedStore``). The ``upstream`` stage is the upstream call (a ``CLIENT`` span, until a stream's headers or a
whole answer's body), whose W3C ``traceparent`` goes to the upstream (``Tracing.inject``).
A client's own ``traceparent`` makes the request span its child. Attributes are identifiers, labels and counts only:
never a key, a prompt, thinking text or a signature.

On when the extra is installed and a trace exporter is asked for: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``;
``none`` is off) or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and
not ``OTEL_SDK_DISABLED=true``. OTLP goes over ``http/protobuf`` unless ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` says
``grpc``; the exporter, the batch processor and the sampler read their own ``OTEL_*`` variables (endpoint, headers,
``OTEL_BSP_*``, ``OTEL_TRACES_SAMPLER``); ``OTEL_SERVICE_NAME`` defaults to ``thinkgate``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from gateway.pipeline.exchange import Exchange
import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.dialects import routing

if TYPE_CHECKING:
    from state.records import ConversationState
    from state.store import LoadQuery, LoadResult, RecordResult, Store, StoreHealth, TurnWrite


ACCESS_LOGGER = "thinkgate.access"
FORMATS = ("json", "text")
_MAX_MODEL = 100
_SECRETS = re.compile(
    r"(?i)((?:authorization|x-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?|bearer\s+)[^\s\"',;}]+")
_SK = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}")

access = logging.getLogger(ACCESS_LOGGER)


@dataclass(slots=True)
class Observation:
    """What is learnt about one client request on its way (``gateway.ops.metrics`` fills it in)."""

    endpoint: str
    request_id: str
    started: float
    upstream: str = "none"
    upstream_status: int | None = None  # what the upstream answered (None: not reached)
    status: int = 0
    streaming: bool = False
    ttfb: float | None = None
    duration: float = 0.0
    upstream_error: str | None = None  # the classified kind, never the text
    exchange: Exchange | None = None


current: ContextVar[Observation | None] = ContextVar("thinkgate_observation", default=None)


def redact(text: str) -> str:
    return _SK.sub("sk-<redacted>", _SECRETS.sub(r"\1<redacted>", text))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and the record's ``fields`` (if any)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # U+2028/U+2029 are valid raw in JSON but end lines for tools that split on Unicode line breaks
        return redact(orjson.dumps(out, default=str).decode()).replace("\u2028", "\\u2028").replace(
            "\u2029", "\\u2029")


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...``, one line per record: a value a client controls (a model name,
    a path in a message) can neither start a line of its own nor forge a ``key=value``. Control characters in the
    message are escaped (``\\xNN``); a field value with anything but plain identifier characters is quoted
    (JSON string escapes). A traceback keeps its own lines (the server's, indented)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_CONTROL)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line += "".join(f" {k}={_text_value(v)}" for k, v in fields.items() if v is not None)
        return redact(line)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}  # str.translate: control characters escaped
_PLAIN = re.compile(r"[A-Za-z0-9._:/@+,<>-]+")  # a value written as it is (ids, labels, numbers, action counts)


def _text_value(v: Any) -> str:
    if isinstance(v, dict):
        text = ",".join(f"{k}:{n}" for k, n in v.items()) or "-"
    else:
        text = str(v)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


def configure(level: str = "INFO", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Install thinkgate's handler on the root logger (idempotent: replaces its own handler)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "thinkgate", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.thinkgate = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())


def request_fields(obs: Observation) -> dict[str, Any]:
    """The request line's fields: only identifiers, labels, numbers and action kinds."""
    fields: dict[str, Any] = {
        "request_id": obs.request_id, "endpoint": obs.endpoint, "upstream": obs.upstream,
        "upstream_status": obs.upstream_status, "status": obs.status,
        "duration_ms": round(obs.duration * 1000, 1),
        "ttfb_ms": round(obs.ttfb * 1000, 1) if obs.ttfb is not None else None,
        "upstream_error": obs.upstream_error,
    }
    exchange = obs.exchange
    if exchange is not None:
        req = exchange.request
        fields.update({
            "tenant": exchange.identity.tenant,
            "scid": exchange.identity.scid,
            "via": exchange.identity.via,
            "model": req.model[:_MAX_MODEL] if req is not None and isinstance(req.model, str) else None,
            "stream": req.is_stream if req is not None else None,
            "actions": dict(Counter(a.kind.value for a in exchange.plan.actions)),
            "recorded": exchange.plan.recorded,
            # False: served without state (state machine off, store down, no key)
            "stateful": exchange.identity.stateful,
        })
    return fields


def log_request(obs: Observation) -> None:
    """The one line per request (INFO on ``thinkgate.access``)."""
    if access.isEnabledFor(logging.INFO):
        access.info("request", extra={"fields": request_fields(obs)})


log = logging.getLogger("thinkgate.tracing")
STAGES = ("identify", "decode", "load", "repair", "sanitize", "encode", "upstream", "record")
_OFF: AbstractContextManager[None] = contextlib.nullcontext()


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


class Tracing:
    """The app's tracer (one object the app owns: ``deps.Gateway.tracing``). ``Tracing()`` is off: every span is a
    shared no-op context and nothing is injected."""

    def __init__(self, provider: Any = None) -> None:
        self.provider = provider
        self.enabled = provider is not None
        if provider is not None:
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            self._tracer = provider.get_tracer("thinkgate")
            self._w3c = TraceContextTextMapPropagator()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tracing:
        """Off unless the ``OTEL_*`` variables ask for traces; then the extra must be installed (else off, logged)."""
        env = os.environ if env is None else env
        if not wanted(env):
            return cls()
        try:
            return cls(_provider(env))
        except ImportError:
            log.warning("OTEL_* variables ask for traces but thinkgate[otel] is not installed: tracing is off")
            return cls()

    @classmethod
    def exporting_to(cls, exporter: Any) -> Tracing:
        """Tests: every span handed to ``exporter`` as it ends (the SDK's ``InMemorySpanExporter``)."""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider = TracerProvider(resource=_resource(os.environ))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider)

    def span(self, name: str, attributes: Mapping[str, Any] | None = None, *, client: bool = False) -> \
            AbstractContextManager[Any]:
        """A child of the current span (the no-op context when off)."""
        if not self.enabled:
            return _OFF
        from opentelemetry.trace import SpanKind

        return self._tracer.start_as_current_span(name, kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
                                                  attributes=dict(attributes) if attributes else None)

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """The current span's W3C ``traceparent`` (and ``tracestate``) into an upstream request's headers."""
        if self.enabled:
            self._w3c.inject(headers)

    def shutdown(self) -> None:
        """Lifespan end: the spans not exported yet go out."""
        if self.provider is not None:
            self.provider.shutdown()


def _resource(env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource

    return Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "thinkgate"})


def _provider(env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=_resource(env))
    names = [n.strip().lower() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    for name in names:
        if name == "console":
            exporter: Any = ConsoleSpanExporter()
        elif name == "otlp":
            protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                        or "http/protobuf").strip().lower()
            if protocol == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as OverGrpc
                exporter = OverGrpc()
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as OverHttp
                exporter = OverHttp()
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s is not supported (otlp, console, none): ignored", name[:40])
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


# ------------------------------------------------------------------ the request span


class TraceMiddleware:
    """One span per client request, the parent of the stage spans (inside ``metrics.ObserveMiddleware``, whose
    observation it reads at the end)."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.tracing.enabled or scope["type"] != "http" or current.get() is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()
                   if k in (b"traceparent", b"tracestate")}
        parent = self.tracing._w3c.extract(carrier) if carrier else None
        method, path = scope.get("method", ""), scope.get("path", "")  # (never the query: ``?key=``)
        status = 0

        async def traced_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with self.tracing._tracer.start_as_current_span(
                f"{method} {current.get().endpoint}",  # type: ignore[union-attr]
                context=parent, kind=SpanKind.SERVER,
                attributes={"http.request.method": method, "url.path": path[:200]}) as span:
            try:
                await self.app(scope, receive, traced_send)
            finally:
                status = status or 500
                span.set_attribute("http.response.status_code", status)
                for key, value in request_attributes(current.get()).items():
                    span.set_attribute(key, value)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))


def request_attributes(obs: Observation | None) -> dict[str, Any]:
    """The request span's attributes at its end: identifiers, labels and counts (no key, text or signature)."""
    if obs is None:
        return {}
    out: dict[str, Any] = {"thinkgate.endpoint": obs.endpoint, "thinkgate.upstream": obs.upstream,
                           "thinkgate.request_id": obs.request_id}
    if obs.upstream_status is not None:
        out["thinkgate.upstream_status"] = obs.upstream_status
    if obs.upstream_error:
        out["thinkgate.upstream_error"] = obs.upstream_error  # the classified 400 kind, never its text
    ex = obs.exchange
    if ex is None:
        return out
    if ex.identity.scid:
        out["thinkgate.scid"] = ex.identity.scid
    if ex.identity.tenant:
        out["thinkgate.tenant"] = ex.identity.tenant
    out["thinkgate.via"] = ex.identity.via
    out["thinkgate.recorded"] = ex.plan.recorded
    if ex.plan.actions:
        kinds = Counter(a.kind.value for a in ex.plan.actions)
        out["thinkgate.actions"] = sorted(kinds)
        out["thinkgate.actions_count"] = sum(kinds.values())
    if ex.request is not None:
        out["thinkgate.model"] = routing.model_label(ex.request.model)
        out["gen_ai.request.model"] = ex.request.model[:100] if isinstance(ex.request.model, str) else ""
    if ex.plan.turn is not None:
        for key, field in (("gen_ai.usage.input_tokens", "input_tokens"), ("gen_ai.usage.output_tokens",
                                                                           "output_tokens")):
            if isinstance(n := ex.plan.turn.usage.get(field), int):
                out[key] = n
    return out


# ------------------------------------------------------------------ store calls


class TracedStore:
    """The ``Store`` protocol around another store: one span per call (``store.load``, ``store.record``, ...)."""

    def __init__(self, inner: Store, tracing: Tracing) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.tracing = tracing

    def __getattr__(self, name: str) -> Any:  # diagnostics (round_trips, breaker, ...) pass through
        return getattr(self.inner, name)

    @contextlib.contextmanager
    def _span(self, op: str) -> Iterator[Any]:
        with self.tracing.span(f"store.{op}", {"db.system.name": str(self.backend), "thinkgate.store.op": op},
                               client=True) as span:
            yield span

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def health(self) -> StoreHealth:
        with self._span("health"):
            return await self.inner.health()

    async def load(self, tenant: str, query: LoadQuery) -> LoadResult:
        with self._span("load") as span:
            result = await self.inner.load(tenant, query)
            span.set_attribute("thinkgate.store.round_trips", result.round_trips)
            return result

    async def record(self, tenant: str, write: TurnWrite) -> RecordResult:
        with self._span("record") as span:
            result = await self.inner.record(tenant, write)
            span.set_attribute("thinkgate.store.round_trips", result.round_trips)
            return result

    async def get_conversation(self, tenant: str, scid: str) -> ConversationState | None:
        with self._span("get_conversation"):
            return await self.inner.get_conversation(tenant, scid)


def trace_store(store: Store | None, tracing: Tracing) -> Store | None:
    """``store`` with a span per call when tracing is on (else itself: no wrapper, no cost)."""
    if store is None or not tracing.enabled:
        return store
    return TracedStore(store, tracing)

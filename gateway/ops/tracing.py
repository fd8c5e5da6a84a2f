"""OpenTelemetry traces: optional (``pip install 'thinkgate[otel]'``), configured by the standard ``OTEL_*`` variables,
off and free otherwise. The one module that imports ``opentelemetry`` (and only once traces are asked for).

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

import contextlib
import logging
import os
from collections import Counter
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.dialects import routing
from gateway.ops import logs

if TYPE_CHECKING:
    from state.records import ConversationState
    from state.store import LoadQuery, LoadResult, RecordResult, Store, StoreHealth, TurnWrite

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
        if not self.tracing.enabled or scope["type"] != "http" or logs.current.get() is None:
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
                f"{method} {logs.current.get().endpoint}",  # type: ignore[union-attr]
                context=parent, kind=SpanKind.SERVER,
                attributes={"http.request.method": method, "url.path": path[:200]}) as span:
            try:
                await self.app(scope, receive, traced_send)
            finally:
                status = status or 500
                span.set_attribute("http.response.status_code", status)
                for key, value in request_attributes(logs.current.get()).items():
                    span.set_attribute(key, value)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))


def request_attributes(obs: logs.Observation | None) -> dict[str, Any]:
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

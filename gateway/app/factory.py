"""The ASGI app: routes, error rendering, lifespan (upstream sessions and store)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.access import admission
from gateway.access import http as admin
from gateway.app import allocator
from gateway.app.deps import Gateway, WorkerCaches
from gateway.app.settings import Settings
from gateway.continuation.outage import RecordRetry
from gateway.continuation.replay_memo import ReplayMemo
from gateway.dialects import prices
from gateway.errors import GatewayError, dialect_headers, render_error
from gateway.ops import metrics, metrics_workers
from gateway.ops.metrics_store import instrument_store
from gateway.ops.telemetry import TraceMiddleware, Tracing, trace_store
from gateway.surfaces import (
    augment,
    chat,
    conversations,
    count_tokens,
    gemini,
    messages,
    models,
    response_get,
    responses,
)
from gateway.surfaces.table import SURFACES, dialect_for_request
from gateway.transport.upstream import RetryPolicy, Upstream
from state.store import Store

log = logging.getLogger("thinkgate")


# Each surface's handler, by its label (``gateway.surfaces.table``: the table the routes are made from)
HANDLERS = {"messages": messages.messages, "count_tokens": count_tokens.count_tokens,
            "chat_completions": chat.chat_completions, "generate_content": gemini.generate_content,
            "chat_stream": augment.chat_stream, "conversation_export": conversations.conversation_export,
            "models": models.list_models, "responses": responses.create_response,
            "response_get": response_get.response_get}


def default_upstreams(settings: Settings) -> dict[str, Upstream]:
    """``anthropic`` and ``gemini`` always; ``openai`` when ``GATEWAY_OPENAI_BASE_URL`` is set; one more per
    OpenAI-compatible flavor that ``GATEWAY_ROUTES`` names with its own base URL."""
    auths = settings.upstream_auths()
    return {
        name: Upstream(name, url, connect_timeout=settings.connect_timeout_s, read_timeout=settings.read_timeout_s,
                       retry=RetryPolicy(max(0, settings.upstream_retries),
                                         max(0.0, settings.upstream_retry_max_delay_s)), auth=auths.get(name))
        for name, url in settings.upstream_urls().items()
    }


def _error_response(request: HTTPRequest, err: GatewayError) -> Response:
    rid = getattr(request.state, "request_id", None)
    dialect = dialect_for_request(request.url.path, {k.lower(): v for k, v in request.headers.items()},
                                  request.url.query, request.method)
    status, body = render_error(dialect, err, rid)
    headers = {**dialect_headers(err.headers or {}, dialect), **({"request-id": rid} if rid else {})}
    return Response(body, status_code=status, media_type="application/json", headers=headers or None)


async def _on_gateway_error(request: HTTPRequest, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return _error_response(request, exc)


async def _on_http_error(request: HTTPRequest, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        msg = f"Not found: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        msg = f"Method {request.method} not allowed for {request.url.path}"
    else:
        msg = str(exc.detail)
    etype = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return _error_response(request, GatewayError(exc.status_code, msg, etype))


async def _on_unexpected(request: HTTPRequest, exc: Exception) -> Response:
    log.error("unhandled error on %s %s: %s", request.method, request.url.path, type(exc).__name__,
              exc_info=exc)
    return _error_response(request, GatewayError(500, "Internal gateway error", "api_error"))


async def healthz(request: HTTPRequest) -> Response:
    """Liveness. ``worker`` (the process id) tells which of ``--workers N`` answered."""
    return JSONResponse({"status": "ok", "worker": os.getpid()})


async def readyz(request: HTTPRequest) -> Response:
    """Ready unless draining, or unless the store was never reached. A store that goes down after it answered
    once degrades to stateless serving: it is reported but does not make the replica unready (every replica shares
    it; taking them all out of the load balancer at once would serve no one). One that never answered since the
    start is a deployment that is not working yet (a wrong host, a port nothing listens on): not ready, unless
    ``GATEWAY_STATELESS_START`` says a stateless start is meant."""
    gw: Gateway = request.app.state.gateway
    store: dict[str, object] = {"backend": "none"}
    if gw.store is not None:
        h = await gw.store.health()
        store = {"backend": h.backend, "ok": h.ok, "circuit": h.circuit}
        if not h.ok and h.detail:  # why (the error's class, a TLS reason: ``redis_store.failure``), never a reply
            store["detail"] = h.detail
        gw.store_reached = gw.store_reached or h.ok
    if gw.draining:
        return JSONResponse({"status": "draining", "store": store}, status_code=503)
    if gw.store is not None and not gw.store_reached and not gw.settings.stateless_start:
        return JSONResponse({"status": "store_never_reached", "store": store}, status_code=503)
    return JSONResponse({"status": "ready", "store": store})


def default_store(settings: Settings) -> Store | None:
    if not settings.state_machine_enabled:
        return None
    from state.engine import StorageLimits
    from state.factory import open_store

    if not settings.redis_url:
        log.info("no GATEWAY_REDIS_URL: using the embedded in-process store (single process only)")
    limits = StorageLimits(max(0, settings.tenant_storage_mb) << 20, max(0, settings.max_prompt_kb) << 10)
    return open_store(settings.redis_url, ttl_seconds=settings.state_ttl_seconds, limits=limits,
                      max_turns=settings.state_max_turns, timeout_ms=settings.store_timeout_ms,
                      load_cache_bytes=max(0, settings.load_cache_mb) << 20, decoded_turns=settings.decoded_turn_cache)


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               upstreams: dict[str, Upstream] | None = None, tracing: Tracing | None = None) -> Starlette:
    """``tracing``: from the ``OTEL_*`` variables when not given (``gateway.ops.telemetry``)."""
    settings = settings or Settings.from_env()
    tracing = tracing if tracing is not None else Tracing.from_env()
    gw = Gateway(settings=settings, upstreams=upstreams or default_upstreams(settings), router=settings.router(),
                 aliases=settings.aliases(), fallbacks=settings.fallback_chains(),
                 store=trace_store(instrument_store(store if store is not None else default_store(settings)),
                                   tracing),
                 tracing=tracing,
                 replay_memo=ReplayMemo(settings.replay_memo_mb << 20) if settings.replay_memo_mb > 0 else None,
                 caches=WorkerCaches.sized(settings.decoded_turn_cache),
                 tenant_labels=metrics.TenantLabels(settings.metrics_tenants),
                 key_labels=metrics.TenantLabels(settings.metrics_tenants), prices=prices.load(settings.prices_file))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for up in gw.upstreams.values():
            await up.start()
        if gw.store is not None:
            await gw.store.start()
            gw.record_retry = RecordRetry(gw.store)
            gw.record_retry.start()
        metrics_workers.worker_started(up.name for up in gw.upstreams.values())
        # Long histories allocate many short-lived dicts: keep start-up objects out of the cyclic
        # collector's way and collect young objects less often (p99 is mostly GC pauses otherwise).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        allocator.fix_mmap_threshold()  # large bodies mapped and returned, not left in the heap (gateway.app.allocator)
        try:
            yield
        finally:
            metrics_workers.worker_stopped()
            for up in gw.upstreams.values():
                await up.close()
            if gw.record_retry is not None:
                await gw.record_retry.close()
                gw.record_retry = None
            await admission.settled()  # (the gateway keys' counts in flight land before the store closes)
            if gw.store is not None:
                await gw.store.close()
            gw.tracing.shutdown()

    routes = [Route(path, HANDLERS[s.label], methods=[s.method]) for s in SURFACES for path in s.routes]
    routes += [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", admin.guarded_metrics, methods=["GET"]),
        Route("/admin/keys", admin.keys, methods=["GET", "POST"]),
        Route("/admin/keys/{name}", admin.key, methods=["PATCH", "DELETE"]),
        Route("/admin/usage", admin.usage, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # the request span only when traces are on: off, a request crosses one layer fewer
        middleware=[Middleware(metrics.ObserveMiddleware),
                    *([Middleware(TraceMiddleware, tracing=tracing)] if tracing.enabled else [])],
        exception_handlers={
            GatewayError: _on_gateway_error,
            HTTPException: _on_http_error,
            Exception: _on_unexpected,
        },
    )
    # an unknown path is answered where it was asked, in its dialect: never a redirect to another protocol's path
    app.router.redirect_slashes = False
    app.state.gateway = gw
    return app

"""Every Prometheus metric thinkgate exports, their closed label sets (``LABELS``; unknown values
become "other", so no label carries a key, SCID, tenant or model text) and the one-line calls that
feed them: ``ObserveMiddleware`` (app), ``bind`` / ``observe_upstream*`` (endpoints),
``observe_dropped_params`` (chat completions), ``observe_stream_error`` (relay), ``observe_lookup`` /
``observe_actions`` / ``observe_record`` (pipeline). No other module creates a metric: the store's are fed by
``gateway.ops.metrics_store`` (``InstrumentedStore``, app), exposition and the per-worker series by
``gateway.ops.metrics_workers`` (``metrics_endpoint``, ``worker_started`` / ``worker_stopped``, lifespan;
``multiprocess_dir``, ``thinkgate serve``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.actions import Action, ActionKind, action_kind
from gateway.dialects import classify, registry, routing
from gateway.dialects.canonical import TOKEN_KEYS, token_counts
from gateway.dialects.routing import REFUSABLE, metric_label
from gateway.errors import new_request_id
from gateway.ops import telemetry
from gateway.ops.telemetry import Observation
from gateway.pipeline import identify
from gateway.surfaces.table import SURFACES, surface_for_path
from state.store import (
    CircuitOpen,
    LoadQuery,
    LoadResult,
    RecordResult,
    StoreError,
    StoreTimeout,
)

if TYPE_CHECKING:
    from gateway.pipeline.exchange import Exchange

log = logging.getLogger("thinkgate.metrics")

# ------------------------------------------------------------------ closed label sets

INTERNAL_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})  # not counted, not logged at INFO
ENDPOINTS = frozenset({s.label for s in SURFACES} | {"other"})  # the surfaces' labels (``gateway.surfaces.table``)
UPSTREAMS = registry.UPSTREAM_LABELS  # the upstreams' names: the dialects' kinds and flavors, "none", "other"
STATUS_CLASSES = frozenset({"1xx", "2xx", "3xx", "4xx", "5xx", "other"})
DIALECTS = frozenset({s.dialect for s in SURFACES} | {"other"})  # the surfaces' client protocols
ERROR_KINDS = frozenset(classify.KINDS)
ACTIONS = frozenset({k.value for k in ActionKind} | {"other"})
TOOL_REPAIRS: dict[ActionKind, str] = {
    ActionKind.TOOL_RESULT_SYNTHESIZED: "synthesized", ActionKind.TOOL_RESULT_TEXTUALIZED: "textualized",
    ActionKind.TOOL_LOOP_TEXTUALIZED: "textualized", ActionKind.TOOL_RESULTS_REORDERED: "reordered",
    ActionKind.TOOL_ID_MAPPED: "id_mapped"}
TOOL_REPAIR_KINDS = frozenset(TOOL_REPAIRS.values()) | {"other"}
# via: the identification method that found the conversation (a hit), or the first one tried (a
# miss, ``identify.first_method``).
VIAS = frozenset({"header", "tool_id", "fingerprint", "other"})
# "foreign" = the header names a SCID this tenant does not hold but another one does (the store's
# tenant-less SCID marker, ``LoadResult.foreign``); the client just gets a miss. "expired" = the
# history's index entries point at records that are gone (trimmed or expired), which the store
# reports as ``LoadResult.unresolved``. "ambiguous" = the history's evidence named several turns or
# conversations (``LoadResult.ambiguous``: e.g. tool ids a client numbers itself), so none was picked.
LOOKUP_RESULTS = frozenset({"hit", "miss", "foreign", "ambiguous", "expired", "other"})
REBUILD_RESULTS = frozenset({"restored", "partial", "degraded", "other"})
# hit: the request replayed a kept one and only its new messages were parsed and decoded (replay_memo)
MEMO_RESULTS = frozenset({"hit", "miss", "other"})
_RESTORING = frozenset({ActionKind.RESTORED, ActionKind.SIGNATURE_RESTORED, ActionKind.HISTORY_REBUILT})
_DEGRADING = frozenset({ActionKind.DROPPED, ActionKind.DOWNGRADED_TEXT, ActionKind.TOOL_LOOP_TEXTUALIZED,
                        ActionKind.THINKING_DISABLED})
STORE_OPS = frozenset({"load", "record", "get_conversation", "health", "other"})
# a chat completions parameter GATEWAY_DROP_UNSUPPORTED_PARAMS dropped: named by the table (``dialects.routing.PARAMS``)
# or "other", and the kind of upstream it could not go to
DROPPED_PARAMS = REFUSABLE
FALLBACK_STATUSES = frozenset({"429", "500", "502", "503", "504", "529", "other"})
ADMISSION_OUTCOMES = frozenset({"ok", "invalid", "missing", "rpm", "tpm", "concurrency", "budget", "unavailable",
                                "unlimited", "other"})
PARAM_ROUTES = registry.PARAM_ROUTES  # the chat surface's routes: the dialects' kinds, "other"
STORE_ERROR_KINDS = frozenset({"circuit_open", "timeout", "unavailable", "codec", "invalid", "other"})
# Why a request was served without state (no load, no repair by record, no record): the store was slow past its
# timeout and its retry, failed, or its breaker was open; or there is no store (state machine off) or no
# credential to scope one by. The first three are the operator's concern (alerted), the last two by design.
STATELESS_REASONS = frozenset({"store_timeout", "store_unavailable", "breaker_open", "no_store", "no_credential",
                               "other"})
# queued: a turn whose record failed, handed to the background retry; recorded: the retry stored it;
# dropped: it gave up after its attempts (or at shutdown); queue_full: not queued, the queue was full
RECORD_RETRY_OUTCOMES = frozenset({"queued", "recorded", "dropped", "queue_full", "other"})
# The per-tenant storage limits (``state.engine.StorageLimits``): a turn not recorded because its tenant is over its
# budget, a turn recorded without its prompt because the prompt was too large
STORAGE_LIMITS = frozenset({"tenant_budget", "prompt_capped", "other"})
# The request's model family (``routing.model_label``: a closed table, never the client's text)
MODELS = routing.MODEL_LABELS
# The token kinds of an upstream's usage report (``dialects.usage``): reasoning is part of output, where reported
TOKEN_TYPES = frozenset(TOKEN_KEYS) | {"other"}
# Tenant prefixes are not a closed set: each worker names the first GATEWAY_METRICS_TENANTS it sees and counts every
# other one as "other" (``TenantLabels``), so this vocabulary holds only the catch-all.
TENANTS = frozenset({"other"})
# Binding models (``gateway.pipeline.repair.prefix``): how a request's prefix was kept (the recorded system with the
# client's new one as
# a mid-conversation system message, tool changes as tool_addition / tool_removal, recorded insertions put back) or,
# where it could not be, degraded (opted into drop_block; stale blocks stripped after a binding 400)
PREFIX_REWRITES: dict[ActionKind, str] = {
    ActionKind.PREFIX_SYSTEM_KEPT: "system_message", ActionKind.PREFIX_TOOLS_KEPT: "tool_changes",
    ActionKind.PREFIX_REINSERTED: "reinserted", ActionKind.BINDING_DROP_BLOCK: "drop_block",
    ActionKind.BINDING_STRIPPED: "stripped"}
PREFIX_REWRITE_KINDS = frozenset(PREFIX_REWRITES.values()) | {"other"}
# ``input_transformations`` ``thinking_dropped`` entries of upstream answers, by reason (docs/upstream-rules.md,
# "thinking-block binding")
BINDING_DROP_REASONS = frozenset({"prefix_binding_mismatch", "model_binding_mismatch",
                                  "organization_binding_mismatch", "other"})
# a binding 400 answered by one retry with the stale blocks stripped: the retry's outcome
BINDING_RETRY_OUTCOMES = frozenset({"ok", "failed", "other"})
# the last resort (``pipeline.distrust``): the other thinking 400s, each answered by one retry with every replayed
# reasoning degraded
THINKING_RETRY_KINDS = classify.DISTRUSTED_KINDS | {"other"}


def label(value: object, allowed: frozenset[str]) -> str:
    """``value`` if it is one of ``allowed``, else "other"."""
    return value if isinstance(value, str) and value in allowed else "other"


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


def endpoint_of(path: str, method: str | None = None) -> str | None:
    """The endpoint label for a request path (and method); ``None`` for the gateway's own internal endpoints."""
    if path in INTERNAL_PATHS:
        return None
    surface = surface_for_path(path, method)
    return surface.label if surface is not None else "other"


# ------------------------------------------------------------------ the metrics

_LATENCY = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
_STORE_LATENCY = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1)

# Every metric's labels and their allowed values (tests check dashboards and alerts against this).
LABELS: dict[str, dict[str, frozenset[str]]] = {
    "gateway_requests_total": {"endpoint": ENDPOINTS, "upstream": UPSTREAMS, "status": STATUS_CLASSES, "model": MODELS},
    "gateway_request_duration_seconds": {"endpoint": ENDPOINTS, "upstream": UPSTREAMS, "model": MODELS},
    "gateway_time_to_first_byte_seconds": {"endpoint": ENDPOINTS, "upstream": UPSTREAMS, "model": MODELS},
    "gateway_inflight_streams": {},
    "gateway_worker_requests": {},
    "gateway_upstream_errors_total": {"upstream": UPSTREAMS, "kind": ERROR_KINDS, "model": MODELS},
    "gateway_tokens_total": {"model": MODELS, "tenant": TENANTS, "type": TOKEN_TYPES},
    "gateway_sanitize_actions_total": {"action": ACTIONS, "dialect": DIALECTS},
    "gateway_tool_chain_repairs_total": {"kind": TOOL_REPAIR_KINDS},
    "gateway_scid_lookups_total": {"via": VIAS, "result": LOOKUP_RESULTS},
    "gateway_history_rebuilds_total": {"result": REBUILD_RESULTS},
    "gateway_conversation_forks_total": {},
    "gateway_replay_memo_total": {"result": MEMO_RESULTS},
    "gateway_store_operation_seconds": {"op": STORE_OPS},
    "gateway_store_errors_total": {"op": STORE_OPS, "kind": STORE_ERROR_KINDS},
    "gateway_store_round_trips_total": {"op": STORE_OPS},
    "gateway_store_circuit_open": {},
    "gateway_stateless_requests_total": {"reason": STATELESS_REASONS},
    "gateway_record_retries_total": {"outcome": RECORD_RETRY_OUTCOMES},
    "gateway_storage_limited_total": {"limit": STORAGE_LIMITS},
    "gateway_params_dropped_total": {"param": DROPPED_PARAMS, "route": PARAM_ROUTES},
    "gateway_prefix_rewrites_total": {"kind": PREFIX_REWRITE_KINDS},
    "gateway_binding_drops_total": {"reason": BINDING_DROP_REASONS},
    "gateway_binding_retries_total": {"outcome": BINDING_RETRY_OUTCOMES},
    "gateway_thinking_retries_total": {"kind": THINKING_RETRY_KINDS, "outcome": BINDING_RETRY_OUTCOMES},
    "gateway_key_admissions_total": {"outcome": ADMISSION_OUTCOMES},
    "gateway_fallbacks_total": {"status": FALLBACK_STATUSES},
    "gateway_key_tokens_total": {"key": TENANTS, "type": TOKEN_TYPES},
    "gateway_key_spend_usd_total": {"key": TENANTS},
}


# The labelled metrics by name, as ``_counter`` and ``_histogram`` define them: ``worker_started`` zeroes their series.
LABELLED: dict[str, Counter | Histogram] = {}


def _counter(name: str, doc: str) -> Counter:
    LABELLED[name] = metric = Counter(name, doc, list(LABELS[name]))
    return metric


def _histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
    LABELLED[name] = metric = Histogram(name, doc, list(LABELS[name]), buckets=buckets)
    return metric


REQUESTS = _counter("gateway_requests_total", "Client requests answered, by status class")
REQUEST_DURATION = _histogram("gateway_request_duration_seconds", "Request time to the last byte", _LATENCY)
TTFB = _histogram("gateway_time_to_first_byte_seconds", "Time to the first response body byte", _LATENCY)
INFLIGHT_STREAMS = Gauge("gateway_inflight_streams", "Streams being relayed now", multiprocess_mode="livesum")
WORKER_REQUESTS = Gauge("gateway_worker_requests", "Requests served by this live worker (pid label with several)",
                        multiprocess_mode="liveall")
UPSTREAM_ERRORS = _counter("gateway_upstream_errors_total", "Upstream errors (bodies, stream events) by kind")
SANITIZE_ACTIONS = _counter("gateway_sanitize_actions_total", "Repair/sanitize decisions, by action")
TOOL_CHAIN_REPAIRS = _counter("gateway_tool_chain_repairs_total", "Tool-chain repairs, by kind")
SCID_LOOKUPS = _counter("gateway_scid_lookups_total", "Conversation lookups of requests that replay history")
HISTORY_REBUILDS = _counter("gateway_history_rebuilds_total", "Replayed histories restored and/or degraded")
FORKS = _counter("gateway_conversation_forks_total", "Recorded turns that forked their conversation")
REPLAY_MEMO = _counter("gateway_replay_memo_total",
                       "Anthropic and OpenAI chat requests that replayed a kept one (hit: only new messages "
                       "decoded) or not")
STORE_OP_SECONDS = _histogram("gateway_store_operation_seconds", "Store call duration", _STORE_LATENCY)
STORE_ERRORS = _counter("gateway_store_errors_total", "Failed store calls, by kind")
STORE_ROUND_TRIPS = _counter("gateway_store_round_trips_total", "Store round trips (pipelines) of completed calls")
PARAMS_DROPPED = _counter("gateway_params_dropped_total",
                          "Chat completions parameters dropped (GATEWAY_DROP_UNSUPPORTED_PARAMS) because the "
                          "model's upstream cannot honour them")
STORE_CIRCUIT_OPEN = Gauge("gateway_store_circuit_open", "1 while the store circuit is open/half-open, else 0",
                           multiprocess_mode="livemax")
STATELESS = _counter("gateway_stateless_requests_total", "Requests served without state (no load, repair by record "
                                                         "or record), by reason; a request the gateway refused is "
                                                         "not served")
STORAGE_LIMITED = _counter("gateway_storage_limited_total", "Turns the per-tenant storage limits applied to: not "
                                                            "recorded (tenant_budget), or recorded without their "
                                                            "prompt (prompt_capped)")
TOKENS = _counter("gateway_tokens_total", "Tokens the upstreams reported using (input, output, cache_read, "
                                         "cache_write; reasoning, part of output, where reported), by model family "
                                         "and tenant")
PREFIX_REWRITES_TOTAL = _counter("gateway_prefix_rewrites_total",
                                 "Requests to binding models whose prefix thinkgate kept or degraded, by kind")
BINDING_DROPS = _counter("gateway_binding_drops_total",
                         "Thinking blocks the upstream reported dropped (input_transformations), by reason")
BINDING_RETRIES = _counter("gateway_binding_retries_total",
                           "Binding 400s answered by one retry with the stale thinking blocks removed, by outcome")
THINKING_RETRIES = _counter("gateway_thinking_retries_total",
                            "Thinking 400s other than the binding one answered by one retry with every replayed "
                            "reasoning degraded (the last resort), by the 400's kind and outcome")
RECORD_RETRIES = _counter("gateway_record_retries_total", "Turns whose record failed, retried in the background, "
                                                          "by outcome")
KEY_TOKENS = _counter("gateway_key_tokens_total", "Tokens of turns under each gateway key (its name; past "
                      "GATEWAY_METRICS_TENANTS names per worker: other), by type")
KEY_SPEND = _counter("gateway_key_spend_usd_total", "What turns under each gateway key cost, USD (the price table, "
                                                    "GATEWAY_PRICES_FILE)")
FALLBACKS = _counter("gateway_fallbacks_total", "Requests sent to their model's fallback (GATEWAY_FALLBACKS) after "
                                              "the upstream answered this status before the first byte")
KEY_ADMISSIONS = _counter("gateway_key_admissions_total",
                          "Requests checked for a gateway key (gateway.access), by outcome: ok, invalid, missing, the "
                          "limit that refused it (rpm, tpm, concurrency), unavailable (the store away), unlimited "
                          "(admitted with the store away, GATEWAY_LIMITS_FAIL_OPEN)")

# ------------------------------------------------------------------ per-request observation


class ObserveMiddleware:
    """The outermost of the app's own layers: gives every HTTP request its id (``scope['state']['request_id']``,
    which error envelopes and the access line carry), times every client request and tracks streams in flight; at
    the end counts it and logs it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = scope.setdefault("state", {})["request_id"] = new_request_id()
        endpoint = endpoint_of(scope.get("path", ""), scope.get("method"))
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        obs = Observation(endpoint, request_id, time.perf_counter())
        token = telemetry.current.set(obs)

        async def observed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                obs.status = int(message["status"])
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                if ctype.startswith(b"text/event-stream"):
                    obs.streaming = True
                    INFLIGHT_STREAMS.inc()
            elif message["type"] == "http.response.body" and obs.ttfb is None and message.get("body"):
                obs.ttfb = time.perf_counter() - obs.started
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        except BaseException:
            obs.status = obs.status or 500
            raise
        finally:
            if obs.streaming:
                INFLIGHT_STREAMS.dec()
            telemetry.current.reset(token)
            obs.duration = time.perf_counter() - obs.started
            _finish(obs)
            # contexts copied during the request (a keep-alive timer's, a background task's) may outlive it with
            # the observation in them: it lets go of the exchange (the body, the request, what went upstream)
            obs.exchange = None


def child(metric: Any, *values: str) -> Any:
    """The labelled child (every label value here comes from a bounded set: ``label``, ``status_class``, closed
    vocabularies). No cache of its own: ``labels()`` costs ~2 us against 0.5 us cached, about 20 us a request,
    well under 1% of thinkgate's added latency (measured with timeit, 2026-11-26)."""
    return metric.labels(*values)


def _model(obs: Observation | None) -> str:
    """The request's ``model`` label: its model's family once the body is decoded, else "other"."""
    req = obs.exchange.request if obs is not None and obs.exchange is not None else None
    return routing.model_label(req.model) if req is not None else "other"


def _finish(obs: Observation) -> None:
    model = _model(obs)
    child(REQUESTS, obs.endpoint, obs.upstream, status_class(obs.status), model).inc()
    child(REQUEST_DURATION, obs.endpoint, obs.upstream, model).observe(obs.duration)
    if obs.ttfb is not None:
        child(TTFB, obs.endpoint, obs.upstream, model).observe(obs.ttfb)
    WORKER_REQUESTS.inc()
    telemetry.log_request(obs)


def bind(ex: Exchange) -> None:
    """Endpoints: this request's exchange (read at the end for the log line)."""
    if (obs := telemetry.current.get()) is not None:
        obs.exchange = ex


def observe_upstream_tried(upstream: str) -> None:
    """Endpoints: the upstream is being called; its name is the request's ``upstream`` label (and the access line's)
    even when it never answers (unreachable: 502)."""
    if (obs := telemetry.current.get()) is not None:
        obs.upstream = label(upstream, UPSTREAMS)


def observe_upstream(upstream: str, status: int) -> None:
    """Endpoints: the upstream answered (its name becomes the request's ``upstream`` label)."""
    if (obs := telemetry.current.get()) is not None:
        obs.upstream, obs.upstream_status = label(upstream, UPSTREAMS), status


def observe_upstream_body(upstream: str, status: int, body: bytes) -> None:
    """Endpoints: a non-streamed upstream answer; error statuses are classified and counted."""
    observe_upstream(upstream, status)
    if status >= 400:
        _count_upstream_error(label(upstream, UPSTREAMS), classify.classify(status, body))


def observe_stream_error(error: dict[str, Any] | None) -> None:
    """Relay: the ``error`` object of an upstream's in-stream error event (``None``: there was none)."""
    if error is not None:
        obs = telemetry.current.get()
        _count_upstream_error(obs.upstream if obs else "other", classify.classify_event(error))


def _count_upstream_error(upstream: str, kind: str) -> None:
    obs = telemetry.current.get()
    child(UPSTREAM_ERRORS, upstream, label(kind, ERROR_KINDS), _model(obs)).inc()
    if obs is not None:
        obs.upstream_error = kind


class TenantLabels:
    """A worker's ``tenant`` label values: the first ``limit`` tenant prefixes it counts tokens for keep their prefix
    (an HMAC of the credential, as the request log shows it), every later one is "other"; a request without a
    credential is "other" too. At most ``limit`` series per model and token kind per worker (0: every tenant is
    "other"). One object the app owns (``deps.Gateway``), sized by ``GATEWAY_METRICS_TENANTS``."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.named: set[str] = set()

    def of(self, tenant: str | None) -> str:
        if tenant is None:
            return "other"
        if tenant in self.named:
            return tenant
        if len(self.named) < self.limit:
            self.named.add(tenant)
            return tenant
        return "other"


def observe_tokens(usage: object, model: object, tenant: str) -> None:
    """Pipeline, a finished turn: the tokens its upstream reported (canonical usage, ``dialects.usage``);
    ``tenant`` is a ``TenantLabels`` value."""
    m = routing.model_label(model)
    for kind, n in token_counts(usage).items():
        if n:
            child(TOKENS, m, tenant, kind).inc(n)


def observe_lookup(via: str, query: LoadQuery, result: LoadResult) -> None:
    """Pipeline, load stage: how the conversation was found. First turns (nothing to find) are not
    counted, so the hit ratio is over requests that replay history."""
    if via != "none":
        child(SCID_LOOKUPS, label(via, VIAS), "hit").inc()
        return
    tried = identify.first_method(query)
    if tried is None:
        return
    outcome = ("foreign" if result.foreign else "ambiguous" if result.ambiguous
               else "expired" if result.unresolved else "miss")
    child(SCID_LOOKUPS, tried, outcome).inc()


def observe_actions(actions: Iterable[Action], dialect: str) -> None:
    """Pipeline, repair/sanitize stage: every action, tool-chain repairs, history rebuilds."""
    kinds = Tally(map(action_kind, actions))  # (a long replay's actions: read at C level)
    d = label(dialect, DIALECTS)
    for kind, n in kinds.items():
        child(SANITIZE_ACTIONS, label(kind.value, ACTIONS), d).inc(n)
        if kind in TOOL_REPAIRS:
            child(TOOL_CHAIN_REPAIRS, TOOL_REPAIRS[kind]).inc(n)
    restored = any(k in _RESTORING for k in kinds)
    degraded = any(k in _DEGRADING for k in kinds) and \
        any(a.kind in _DEGRADING and a.detail != "thinking_disabled" for a in actions)
    if restored or degraded:
        child(HISTORY_REBUILDS, "partial" if restored and degraded else "restored" if restored
               else "degraded").inc()


def observe_prefix(actions: Iterable[Action]) -> None:
    """Pipeline, prefix stage (binding models): each kind of rewrite once per request."""
    for kind in {a.kind for a in actions if a.kind in PREFIX_REWRITES}:
        child(PREFIX_REWRITES_TOTAL, PREFIX_REWRITES[kind]).inc()


def observe_binding_drops(transformations: object) -> None:
    """An upstream answer's ``input_transformations``: its ``thinking_dropped`` entries, by reason."""
    for t in transformations if isinstance(transformations, list) else ():
        if isinstance(t, dict) and t.get("type") == "thinking_dropped":
            child(BINDING_DROPS, label(t.get("reason"), BINDING_DROP_REASONS)).inc()


def observe_retry(kind: str, ok: bool) -> None:
    """One retry of a changed request after an upstream's ``kind`` of 400 (``pipeline.retry_kind``)."""
    outcome = "ok" if ok else "failed"
    if kind == "binding_mismatch":
        child(BINDING_RETRIES, outcome).inc()
    else:
        child(THINKING_RETRIES, label(kind, THINKING_RETRY_KINDS), outcome).inc()


def observe_key_usage(key: str, tokens: Mapping[str, int], cost_micros: int) -> None:
    """A turn under a gateway key (``key``: a ``TenantLabels`` value of its name): its tokens and cost."""
    for kind, n in tokens.items():
        if n:
            child(KEY_TOKENS, key, kind).inc(n)
    if cost_micros:
        child(KEY_SPEND, key).inc(cost_micros / 1e6)


def observe_fallback(status: int) -> None:
    """A request sent to its model's fallback after its upstream answered ``status``."""
    child(FALLBACKS, label(str(status), FALLBACK_STATUSES)).inc()


def observe_admission(outcome: str) -> None:
    """One request checked for a gateway key (``gateway.access.admission``)."""
    child(KEY_ADMISSIONS, label(outcome, ADMISSION_OUTCOMES)).inc()


def observe_replay(hit: bool) -> None:
    """Pipeline, decode stage (Anthropic and OpenAI chat requests, with the replay memo on)."""
    child(REPLAY_MEMO, "hit" if hit else "miss").inc()


def stateless_reason(e: BaseException | None, *, credential: bool = True) -> str:
    """The ``gateway_stateless_requests_total`` reason of a request served without state: ``e`` is the store
    error its load failed with (None: there was no store, or no credential when ``credential`` is false)."""
    if e is None:
        return "no_store" if credential else "no_credential"
    if isinstance(e, StoreTimeout):
        return "store_timeout"
    if isinstance(e, CircuitOpen):
        return "breaker_open"
    return "store_unavailable" if isinstance(e, StoreError) else "other"


def observe_stateless(reason: str) -> None:
    """Pipeline, once a request that consulted no records goes upstream (``pipeline.served``): one request served
    without state."""
    child(STATELESS, label(reason, STATELESS_REASONS)).inc()


def observe_record_retry(outcome: str, n: int = 1) -> None:
    """The background record retry (``gateway.continuation.outage``)."""
    if n:
        child(RECORD_RETRIES, label(outcome, RECORD_RETRY_OUTCOMES)).inc(n)


def observe_dropped_params(names: Sequence[str], route: str) -> None:
    """Endpoints (chat completions): the parameters decoding dropped; counted, and logged by name (never a value;
    a name the table does not know is logged quoted and cut, and counted as "other")."""
    if not names:
        return
    r = label(route, PARAM_ROUTES)
    for name in names:
        child(PARAMS_DROPPED, metric_label(str(name)), r).inc()
    shown = ", ".join(n if n in DROPPED_PARAMS else repr(str(n)[:40]) for n in names[:20])
    log.info("dropped parameters the %s upstream cannot honour (GATEWAY_DROP_UNSUPPORTED_PARAMS): %s", r, shown)


def observe_record(result: RecordResult) -> None:
    """Pipeline, record stage."""
    if result.status == "forked":
        FORKS.inc()

"""The app's dependencies (``Gateway``), the one object every stage and handler is handed: a bottom module, so
the pipeline, the endpoints and the metrics name it without importing the app."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.access.admission import AdmittedKeys
from gateway.app.settings import DEFAULT_METRICS_TENANTS, Settings
from gateway.continuation.outage import Journal, RecordRetry
from gateway.continuation.replay_memo import ReplayMemo
from gateway.continuation.splice import RecordedJson
from gateway.dialects.prices import DEFAULT as DEFAULT_PRICES
from gateway.dialects.prices import Price
from gateway.dialects.routing import Router
from gateway.ops.metrics import TenantLabels
from gateway.ops.telemetry import Tracing
from gateway.pipeline.identify import ConversationHints
from gateway.pipeline.repair.records import RecordCaches
from gateway.pipeline.sanitize.core import Policy
from gateway.surfaces.model_lists import ModelLists
from gateway.transport.upstream import Upstream
from state.coherence import ObjectLru
from state.records import DEFAULT_TURN_CACHE_ENTRIES
from state.store import Store


@dataclass(frozen=True, slots=True)
class WorkerCaches:
    """The gateway's per-worker caches of stored records, in one object the app owns, sized from
    ``GATEWAY_DECODED_TURN_CACHE`` (no module-level cache anywhere). The store keeps its own (decoded turns,
    loaded conversations: ``state``); the replay memo and the conversation hints are ``Gateway``'s fields."""

    records: RecordCaches        # records as repair sees them (``records.RecordCaches``)
    recorded_json: RecordedJson  # a recorded turn's upstream JSON (``splice.message_json``)

    @classmethod
    def sized(cls, entries: int) -> WorkerCaches:
        """At most ``entries`` each; the blocks at most ``records.BLOCKS_BYTES`` and the JSON ``RECORDED_JSON_BYTES``
        of memory (measured: ``state.coherence``)."""
        return cls(RecordCaches(entries), ObjectLru(entries, RECORDED_JSON_BYTES, _json_cost))


RECORDED_JSON_BYTES = 8 << 20
# a recorded turn's JSON: its bytes (a right-sized copy: ``splice.message_json``) and the (role, bytes) tuple


def _json_cost(raw: object, kept: tuple[str, bytes]) -> int:
    return 120 + len(kept[1])


@dataclass(slots=True)
class Gateway:
    """The app's dependencies, reachable from handlers as ``request.app.state.gateway``."""

    settings: Settings
    upstreams: dict[str, Upstream]
    store: Store | None = None
    router: Router = field(default_factory=Router)
    draining: bool = False
    store_reached: bool = False  # the store answered a health check once (``/readyz``): until then not ready
    store_failed_at: float = float("-inf")  # monotonic time this worker last saw the store away (``pipeline``)
    extra: dict[str, object] = field(default_factory=dict)
    hints: ConversationHints = field(default_factory=ConversationHints)  # tool id -> conversation (a guess)
    journal: Journal = field(default_factory=Journal)  # the thinking this worker relayed
    # (``gateway.continuation.outage``)
    replay_memo: ReplayMemo | None = None  # decoded histories of untouched requests (None: off)
    caches: WorkerCaches = field(default_factory=lambda: WorkerCaches.sized(DEFAULT_TURN_CACHE_ENTRIES))
    model_lists: ModelLists = field(default_factory=ModelLists)  # upstreams' model lists (``GET /v1/models``)
    record_retry: RecordRetry | None = None  # turns whose record failed, retried in the background (lifespan)
    tenant_labels: TenantLabels = field(default_factory=lambda: TenantLabels(DEFAULT_METRICS_TENANTS))
    tracing: Tracing = field(default_factory=Tracing)  # OpenTelemetry (OTEL_*, thinkgate[otel]); off: no-op spans
    admitted: AdmittedKeys = field(default_factory=AdmittedKeys)  # gateway keys this worker admitted (fail-open)
    aliases: dict[str, str] = field(default_factory=dict)  # model aliases (``GATEWAY_MODEL_ALIASES``)
    fallbacks: dict[str, str] = field(default_factory=dict)  # model -> its fallback (``GATEWAY_FALLBACKS``)
    prices: tuple[Price, ...] = DEFAULT_PRICES  # what a turn costs, per model (``GATEWAY_PRICES_FILE``)
    key_labels: TenantLabels = field(default_factory=lambda: TenantLabels(DEFAULT_METRICS_TENANTS))  # key names
    # the one request at a time whose body is worked on off the event loop (``pipeline.off_loop``)
    offload: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    # sanitize's rules as the settings set them, built once (``stages._policy`` adds the request's tenant's seals)
    policy: Policy = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.policy = Policy(s.unverifiable_thinking, s.fix_thinking_params, s.gemini_bypass)

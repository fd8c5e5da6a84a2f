"""``gateway.ops.metrics`` in-process: label validation, the pipeline observations, the instrumented
store, and an upstream error answer through the real app counted by kind."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from gateway.actions import Action, ActionKind
from gateway.app.factory import Gateway, create_app
from gateway.app.settings import Settings
from gateway.dialects.canonical import Message, Request, TextBlock
from gateway.ops import metrics, metrics_store, metrics_workers
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import ClientRequest, Exchange, Identity
from state.breaker import CircuitBreaker
from state.memory_store import MemoryStore
from state.store import LoadQuery, LoadResult, RecordResult, StoreHealth, StoreUnavailable, TurnWrite
from tests.support.observability.fake_upstream import serving
from tests.support.state.factories import TENANT_A, turn

E2 = "messages.1.content.0: Invalid `signature` in `thinking` block"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# ------------------------------------------------------------------ labels


def test_label_values_are_validated_against_closed_sets() -> None:
    assert metrics.label("anthropic", metrics.UPSTREAMS) == "anthropic"
    assert metrics.label("sk-ant-secret", metrics.UPSTREAMS) == "other"
    assert metrics.label(None, metrics.VIAS) == "other"
    assert metrics.status_class(529) == "5xx" and metrics.status_class(200) == "2xx"
    assert metrics.status_class(42) == "other"
    assert metrics.endpoint_of("/v1/messages") == "messages"
    assert metrics.endpoint_of("/v1/messages/count_tokens") == "count_tokens"
    assert metrics.endpoint_of("/v1/anything/else") == "other"
    assert metrics.endpoint_of("/metrics") is None and metrics.endpoint_of("/healthz") is None
    for name, labels in metrics.LABELS.items():
        for allowed in labels.values():
            assert "other" in allowed, name
    assert set(metrics.ACTIONS) == {k.value for k in ActionKind} | {"other"}


def test_unknown_label_values_become_other() -> None:
    before = value("gateway_upstream_errors_total", upstream="other", kind="invalid_signature", model="other")
    metrics.observe_upstream_body("my-secret-upstream-name", 400, E2.encode())
    after = value("gateway_upstream_errors_total", upstream="other", kind="invalid_signature", model="other")
    assert after == before + 1


# ------------------------------------------------------------------ pipeline observations


def test_observe_actions_counts_every_action_tool_repairs_and_rebuilds() -> None:
    def snapshot() -> dict[str, float]:
        return {
            "restored": value("gateway_sanitize_actions_total", action="restored", dialect="anthropic"),
            "kept": value("gateway_sanitize_actions_total", action="kept_verified", dialect="anthropic"),
            "synth": value("gateway_tool_chain_repairs_total", kind="synthesized"),
            "idmap": value("gateway_tool_chain_repairs_total", kind="id_mapped"),
            "textual": value("gateway_tool_chain_repairs_total", kind="textualized"),
            "r_restored": value("gateway_history_rebuilds_total", result="restored"),
            "r_partial": value("gateway_history_rebuilds_total", result="partial"),
            "r_degraded": value("gateway_history_rebuilds_total", result="degraded"),
        }

    before = snapshot()
    metrics.observe_actions([Action(ActionKind.RESTORED, 1), Action(ActionKind.RESTORED, 3),
                             Action(ActionKind.KEPT_VERIFIED, 1), Action(ActionKind.TOOL_RESULT_SYNTHESIZED, 2),
                             Action(ActionKind.TOOL_ID_MAPPED, 4)], "anthropic")
    metrics.observe_actions([Action(ActionKind.DROPPED, 1, "thinking")], "anthropic")
    metrics.observe_actions([Action(ActionKind.SIGNATURE_RESTORED, 1), Action(ActionKind.TOOL_LOOP_TEXTUALIZED, 1)],
                            "anthropic")
    metrics.observe_actions([Action(ActionKind.DROPPED, 1, "thinking_disabled")], "anthropic")  # not a degradation
    metrics.observe_actions([], "anthropic")
    after = snapshot()
    assert {k: after[k] - before[k] for k in after} == {
        "restored": 2, "kept": 1, "synth": 1, "idmap": 1, "textual": 1,
        "r_restored": 1, "r_partial": 1, "r_degraded": 1,
    }


def test_observe_lookup_hits_misses_and_first_turns() -> None:
    def lookups(via: str, result: str) -> float:
        return value("gateway_scid_lookups_total", via=via, result=result)

    keys = [(v, r) for v in ("header", "tool_id", "fingerprint", "other")
            for r in ("hit", "miss", "foreign", "ambiguous", "expired", "other")]
    before = {k: lookups(*k) for k in keys}
    scid = "s" * 22
    history = LoadQuery(tool_ids=["toolu_1"], fingerprints=["fp"])
    metrics.observe_lookup("tool_id", history, LoadResult())
    metrics.observe_lookup("header", LoadQuery(scid=scid), LoadResult())
    # a miss is labelled by the first method tried: header, tool ids, fingerprint (text never picks one)
    metrics.observe_lookup("none", LoadQuery(scid=scid, tool_ids=["toolu_1"]), LoadResult())
    metrics.observe_lookup("none", history, LoadResult())
    metrics.observe_lookup("none", history, LoadResult(unresolved=2))
    metrics.observe_lookup("none", LoadQuery(exact_hashes=["x"], fingerprints=["fp"]), LoadResult())
    metrics.observe_lookup("none", LoadQuery(exact_hashes=["x"]), LoadResult())
    metrics.observe_lookup("none", LoadQuery(fingerprints=["fp"]), LoadResult(unresolved=1))
    # the evidence named several conversations (tool ids a client numbers itself): ambiguous
    metrics.observe_lookup("none", LoadQuery(tool_ids=["call_0"], fingerprints=["fp"]), LoadResult(ambiguous=2))
    # the header names another tenant's conversation: foreign (wins over expired index entries)
    metrics.observe_lookup("none", LoadQuery(scid=scid, tool_ids=["toolu_1"]), LoadResult(foreign=True, unresolved=1))
    metrics.observe_lookup("none", LoadQuery(), LoadResult())  # a first turn: nothing to find, not counted
    after = {k: lookups(*k) for k in keys}
    assert {k: after[k] - before[k] for k in keys if after[k] != before[k]} == {
        ("tool_id", "hit"): 1, ("header", "hit"): 1, ("header", "miss"): 1, ("tool_id", "miss"): 1,
        ("tool_id", "expired"): 1, ("fingerprint", "miss"): 1, ("fingerprint", "expired"): 1, ("header", "foreign"): 1,
        ("tool_id", "ambiguous"): 1}


async def test_load_stage_counts_another_tenants_scid_as_foreign_and_serves_a_miss() -> None:
    """The pipeline's load stage over a real store: tenant B naming tenant A's SCID is a miss for B
    (nothing of A's loaded) counted as result="foreign"; A naming it is a hit."""
    store = MemoryStore()
    gw = Gateway(Settings(), {}, store=store)
    a = await store.record("tenant-a", TurnWrite(turn(0)))

    def exchange(tenant: str) -> Exchange:
        ex = Exchange(ClientRequest("messages", "anthropic", "req_1", {}, "", b""),
                      identity=Identity(tenant=tenant, header_scid=a.scid))
        ex.request = Request(model="m", messages=[Message("user", [TextBlock("hi")])])
        return ex

    before = {r: value("gateway_scid_lookups_total", via="header", result=r) for r in ("hit", "foreign", "miss")}
    ex_b = exchange("tenant-b")
    result = await pipeline.load(ex_b, gw, pipeline.load_query(ex_b, gw))
    assert result is not None and result.foreign and not result.conversations
    assert ex_b.identity.via == "none" and ex_b.identity.scid is None
    ex_a = exchange("tenant-a")
    await pipeline.load(ex_a, gw, pipeline.load_query(ex_a, gw))
    assert ex_a.identity.via == "header" and ex_a.identity.scid == a.scid
    after = {r: value("gateway_scid_lookups_total", via="header", result=r) for r in before}
    assert {r: after[r] - before[r] for r in before} == {"hit": 1, "foreign": 1, "miss": 0}


def test_observe_record_counts_forks_only() -> None:
    before = value("gateway_conversation_forks_total")
    for status in ("appended", "duplicate", "forked"):
        metrics.observe_record(RecordResult(scid="x", position=1, turn_id="t", status=status, version=1))  # type: ignore[arg-type]
    assert value("gateway_conversation_forks_total") == before + 1


# ------------------------------------------------------------------ instrumented store


async def test_instrumented_store_times_calls_and_passes_results_through() -> None:
    store = metrics_store.InstrumentedStore(MemoryStore())
    assert metrics_store.instrument_store(store) is store and metrics_store.instrument_store(None) is None
    await store.start()
    before = {op: value("gateway_store_operation_seconds_count", op=op) for op in ("load", "record", "health",
                                                                                   "get_conversation")}
    res = await store.record(TENANT_A, TurnWrite(record=turn(0)))
    assert res.status == "appended"
    loaded = await store.load(TENANT_A, LoadQuery(scid=res.scid))
    assert loaded.conversation is not None
    assert await store.get_conversation(TENANT_A, res.scid) is not None
    assert (await store.health()).ok
    assert store.backend == "memory"
    for op, n in before.items():
        assert value("gateway_store_operation_seconds_count", op=op) == n + 1, op
    await store.close()


class FailingStore:
    """A store whose calls fail the way RedisStore's do, with a real breaker."""

    backend = "redis"

    def __init__(self) -> None:
        self.breaker = CircuitBreaker(failure_threshold=2, cooldown_seconds=60)

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def health(self) -> StoreHealth:
        return StoreHealth(False, self.backend, self.breaker.state, "TimeoutError")

    async def load(self, tenant: str, query: LoadQuery) -> LoadResult:
        if not self.breaker.acquire():
            raise StoreUnavailable("redis: circuit open")
        self.breaker.on_failure()
        raise StoreUnavailable("redis: timeout") from TimeoutError()

    async def record(self, tenant: str, write: TurnWrite) -> RecordResult:
        raise ValueError("malformed scid")

    async def get_conversation(self, tenant: str, scid: str) -> Any:
        raise StoreUnavailable("redis: ConnectionError") from ConnectionError()


async def test_instrumented_store_counts_error_kinds_and_circuit_state() -> None:
    store = metrics_store.InstrumentedStore(FailingStore())  # type: ignore[arg-type]
    kinds = [("load", "timeout"), ("load", "circuit_open"), ("record", "invalid"),
             ("get_conversation", "unavailable"), ("health", "timeout")]
    before = {k: value("gateway_store_errors_total", op=k[0], kind=k[1]) for k in kinds}
    with pytest.raises(StoreUnavailable):
        await store.load(TENANT_A, LoadQuery())
    assert value("gateway_store_circuit_open") == 0
    with pytest.raises(StoreUnavailable):
        await store.load(TENANT_A, LoadQuery())  # second failure opens the breaker
    assert value("gateway_store_circuit_open") == 1
    with pytest.raises(StoreUnavailable):
        await store.load(TENANT_A, LoadQuery())  # refused by the open breaker
    with pytest.raises(ValueError):
        await store.record(TENANT_A, TurnWrite(record=turn(0)))
    with pytest.raises(StoreUnavailable):
        await store.get_conversation(TENANT_A, "x")
    assert not (await store.health()).ok
    after = {k: value("gateway_store_errors_total", op=k[0], kind=k[1]) for k in kinds}
    assert {k: after[k] - before[k] for k in kinds} == {
        ("load", "timeout"): 2, ("load", "circuit_open"): 1, ("record", "invalid"): 1,
        ("get_conversation", "unavailable"): 1, ("health", "timeout"): 1}
    metrics.STORE_CIRCUIT_OPEN.set(0)


# ------------------------------------------------------------------ through the app


@pytest.fixture
async def fake_upstream() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """An Anthropic-shaped upstream whose next answer the test sets (status, body, content type)."""
    answer: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=answer["status"], body=answer["body"],
                            content_type=answer.get("ctype", "application/json"))

    async with serving(handler) as url:
        yield url, answer


OPUS = {"model": "claude-opus"}  # the model label of REQUEST's model (``routing.model_label``)
REQUEST = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
           "messages": [{"role": "user", "content": "hi"}]}


async def _post(url: str, body: dict[str, Any]) -> tuple[httpx.Response, str]:
    app = create_app(Settings(anthropic_base_url=url))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            resp = await client.post("/v1/messages", json=body, headers={"x-api-key": "sk-test-metrics"})
            scrape = (await client.get("/metrics")).text
    return resp, scrape


@pytest.mark.process
async def test_upstream_400_with_e2_text_counts_invalid_signature(
        fake_upstream: tuple[str, dict[str, Any]]) -> None:
    url, answer = fake_upstream
    body = b'{"type":"error","error":{"type":"invalid_request_error","message":"' + \
        E2.encode() + b'"},"request_id":"req_011CWkB65DcNzK2MiofhXx8b"}'
    answer.update(status=400, body=body)
    before = value("gateway_upstream_errors_total", upstream="anthropic", kind="invalid_signature", **OPUS)
    before_4xx = value("gateway_requests_total", endpoint="messages", upstream="anthropic", status="4xx", **OPUS)
    resp, scrape = await _post(url, REQUEST)
    assert resp.status_code == 400 and resp.content == body  # relayed unchanged
    assert value("gateway_upstream_errors_total", upstream="anthropic", kind="invalid_signature", **OPUS) == before + 1
    assert value("gateway_requests_total", endpoint="messages", upstream="anthropic", status="4xx", **OPUS) \
        == before_4xx + 1
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(scrape) for s in fam.samples}
    assert samples[("gateway_upstream_errors_total", (("kind", "invalid_signature"), ("model", "claude-opus"),
                                                        ("upstream", "anthropic")))] \
        == before + 1


@pytest.mark.process
async def test_in_stream_error_event_is_classified(fake_upstream: tuple[str, dict[str, Any]]) -> None:
    url, answer = fake_upstream
    answer.update(status=200, ctype="text/event-stream", body=(
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
        b'"role":"assistant","model":"claude-opus-4-5","content":[],"stop_reason":null,"usage":{}}}\n\n'
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'))
    before = value("gateway_upstream_errors_total", upstream="anthropic", kind="overloaded", **OPUS)
    ttfb = value("gateway_time_to_first_byte_seconds_count", endpoint="messages", upstream="anthropic", **OPUS)
    resp, _ = await _post(url, {**REQUEST, "stream": True})
    assert resp.status_code == 200 and b"overloaded_error" in resp.content
    assert value("gateway_upstream_errors_total", upstream="anthropic", kind="overloaded", **OPUS) == before + 1
    assert value("gateway_time_to_first_byte_seconds_count", endpoint="messages", upstream="anthropic", **OPUS) \
        == ttfb + 1
    assert value("gateway_inflight_streams") == 0


@pytest.mark.process
async def test_gateway_own_errors_and_internal_endpoints(fake_upstream: tuple[str, dict[str, Any]]) -> None:
    url, _ = fake_upstream
    before = value("gateway_requests_total", endpoint="messages", upstream="none", status="4xx", model="other")
    app = create_app(Settings(anthropic_base_url=url))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            bad = await client.post("/v1/messages", content=b"{not json", headers={"x-api-key": "k"})
            assert bad.status_code == 400
            scrape = await client.get("/metrics")
            assert (await client.get("/healthz")).status_code == 200
    assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain")
    assert "gateway_requests_total" in scrape.text
    assert value("gateway_requests_total", endpoint="messages", upstream="none", status="4xx", model="other") \
        == before + 1


# ------------------------------------------------------------------ multiprocess directory


def test_multiprocess_dir_is_created_for_several_workers_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(metrics_workers.MULTIPROC_ENV, raising=False)
    with metrics_workers.multiprocess_dir(1) as path:
        assert path is None and metrics_workers.MULTIPROC_ENV not in os.environ
    with metrics_workers.multiprocess_dir(2) as path:
        assert path is not None and os.path.isdir(path) and os.environ[metrics_workers.MULTIPROC_ENV] == path
    assert not os.path.exists(path) and metrics_workers.MULTIPROC_ENV not in os.environ


def test_operator_multiprocess_dir_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv(metrics_workers.MULTIPROC_ENV, str(tmp_path))
    with metrics_workers.multiprocess_dir(4) as path:
        assert path == str(tmp_path)
    assert tmp_path.is_dir() and os.environ[metrics_workers.MULTIPROC_ENV] == str(tmp_path)


# ------------------------------------------------------------------ model, tokens, tenants, series at zero


def test_every_labelled_metric_is_zeroed_from_its_declared_vocabularies() -> None:
    """Generic: a labelled metric defined the module's way (``_counter``/``_histogram``, labels in ``LABELS``) gets
    its known series at start without a line of its own; traffic labels start at "other", upstreams as configured."""
    labelled = {obj._name for obj in vars(metrics).values() if isinstance(obj, MetricWrapperBase) and obj._labelnames}
    assert labelled == {m._name for n, m in metrics.LABELLED.items() if metrics.LABELS[n]}
    series = list(metrics_workers.zero_series(["anthropic", "gemini", "my-secret-upstream"]))
    names = {name for name, _ in series}
    assert names == {n for n, labels in metrics.LABELS.items() if labels}
    assert ("gateway_tool_chain_repairs_total", ("reordered",)) in series
    assert ("gateway_upstream_errors_total", ("anthropic", "invalid_signature", "other")) in series
    assert ("gateway_tokens_total", ("other", "other", "reasoning")) in series
    for name, values in series:
        for lab, v in zip(metrics.LABELS[name], values, strict=True):
            traffic = lab in metrics_workers.TRAFFIC_LABELS
            assert v in metrics.LABELS[name][lab] and (v != "other") == (not traffic), (name, lab)
            assert lab != "upstream" or v in ("anthropic", "gemini")
    assert len(series) < 1000  # (histograms: ~20 lines a series)


def test_worker_started_creates_the_zero_series() -> None:
    metrics_workers.worker_started(["anthropic"])
    assert REGISTRY.get_sample_value("gateway_tool_chain_repairs_total", {"kind": "id_mapped"}) is not None
    assert REGISTRY.get_sample_value("gateway_tokens_total", {"model": "other", "tenant": "other",
                                                              "type": "cache_write"}) is not None


def test_tenant_labels_name_the_first_n_prefixes_then_other() -> None:
    tenants = metrics.TenantLabels(2)
    assert [tenants.of(t) for t in ("t-a", "t-b", "t-c", "t-a", None, "t-b")] == \
        ["t-a", "t-b", "other", "t-a", "other", "t-b"]
    assert metrics.TenantLabels(0).of("t-a") == "other"


def test_observe_tokens_counts_each_reported_kind_by_model_family() -> None:
    labels = {"model": "gemini-pro", "tenant": "t-tokens"}
    kinds = ("input", "output", "reasoning", "cache_write")
    before = {k: value("gateway_tokens_total", **labels, type=k) for k in kinds}
    metrics.observe_tokens({"input_tokens": 20, "output_tokens": 39, "cache_read_input_tokens": 0,
                            "_reasoning_tokens": 17}, "gemini-3-pro-preview", "t-tokens")
    after = {k: value("gateway_tokens_total", **labels, type=k) - before[k] for k in before}
    assert after == {"input": 20, "output": 39, "reasoning": 17, "cache_write": 0}

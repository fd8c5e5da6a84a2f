"""OpenTelemetry traces (``gateway.ops.telemetry``, the ``otel`` extra) with the SDK's in-memory exporter, the app in
process in front of a loopback upstream: the request span with a child per stage, per store call and for the
upstream call, its attributes (never a key, a prompt or thinking text), the W3C ``traceparent`` the upstream gets;
off without ``OTEL_*`` and without the extra."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from aiohttp import web

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from gateway.ops.telemetry import STAGES, Tracing, wanted
from tests.process_fixtures import GatewayFactory, Sim
from tests.support.observability.fake_upstream import serving

otel = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")

ROOT = Path(__file__).resolve().parents[3]
KEY = "sk-ant-api03-tracing-test-key-0123456789"
PROMPT = "a prompt nobody may see in a trace"
THINKING = "thinking text nobody may see in a trace"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"
E2 = "messages.1.content.0: Invalid `signature` in `thinking` block"
ANSWER = {"id": "msg_01Trace", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
          "content": [{"type": "thinking", "thinking": THINKING, "signature": "c2lnbmF0dXJlLXRyYWNpbmc="},
                      {"type": "text", "text": "hello"}],
          "stop_reason": "end_turn", "stop_sequence": None,
          "usage": {"input_tokens": 12, "output_tokens": 7}}


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """An Anthropic-shaped upstream that answers ``state["answer"]`` (status, body) and keeps the headers it got."""
    state: dict[str, Any] = {"answer": (200, orjson.dumps(ANSWER)), "headers": []}

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        state["headers"].append(dict(request.headers))
        status, body = state["answer"]
        return web.Response(status=status, body=body, content_type="application/json")

    async with serving(handler) as url:
        yield url, state


REQUEST = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
           "messages": [{"role": "user", "content": PROMPT}]}


async def post(url: str, bodies: list[dict[str, Any]], exporter: Any) -> list[httpx.Response]:
    app = create_app(Settings(anthropic_base_url=url), tracing=Tracing.exporting_to(exporter))
    out = []
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            for body in bodies:
                out.append(await client.post("/v1/messages", json=body, headers={
                    "x-api-key": KEY, "traceparent": TRACEPARENT, "anthropic-version": "2023-06-01"}))
    return out


def by_trace(spans: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for s in spans:
        out.setdefault(s.context.trace_id, []).append(s)
    return out


@pytest.mark.process
async def test_a_request_is_one_trace_with_a_span_per_stage_store_call_and_upstream_call(
        upstream: tuple[str, dict[str, Any]]) -> None:
    url, state = upstream
    exporter = otel.InMemorySpanExporter()
    first, = await post(url, [REQUEST], exporter)
    assert first.status_code == 200
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {int(CLIENT_TRACE, 16)}, "the client's trace continues"
    by_name = {s.name: s for s in spans}
    root = by_name["POST messages"]
    assert root.parent is not None and root.parent.span_id == int("b7ad6b7169203331", 16)
    for stage in STAGES:
        assert by_name[stage].parent.span_id == root.context.span_id, stage
    assert by_name["store.load"].parent.span_id == by_name["load"].context.span_id
    assert by_name["store.record"].parent.span_id == by_name["record"].context.span_id
    call = by_name["upstream"]  # the upstream call
    assert call.kind.name == "CLIENT" and call.attributes["thinkgate.upstream"] == "anthropic"
    assert call.attributes["http.response.status_code"] == 200
    # the upstream got the upstream call span as its parent (W3C traceparent)
    sent = state["headers"][0]["traceparent"]
    assert sent == f"00-{CLIENT_TRACE}-{call.context.span_id:016x}-01"
    attrs = root.attributes
    assert attrs["thinkgate.scid"] == first.headers["x-ag-conversation-id"]
    assert len(attrs["thinkgate.tenant"]) >= 8 and attrs["thinkgate.model"] == "claude-opus"
    assert attrs["http.response.status_code"] == 200 and attrs["gen_ai.usage.output_tokens"] == 7
    assert attrs["thinkgate.recorded"] is True


@pytest.mark.process
async def test_attributes_name_actions_and_the_400_kind_never_keys_prompts_or_thinking(
        upstream: tuple[str, dict[str, Any]]) -> None:
    url, state = upstream
    exporter = otel.InMemorySpanExporter()
    replay = {**REQUEST, "messages": [*REQUEST["messages"], {"role": "assistant", "content": ANSWER["content"]},
                                       {"role": "user", "content": "and then?"}]}
    app = create_app(Settings(anthropic_base_url=url), tracing=Tracing.exporting_to(exporter))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
            assert (await client.post("/v1/messages", json=REQUEST, headers=headers)).status_code == 200
            state["answer"] = (400, orjson.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                                              "message": E2}}))
            assert (await client.post("/v1/messages", json=replay, headers=headers)).status_code == 400
    traces = list(by_trace(exporter.get_finished_spans()).values())
    assert len(traces) == 2 and all(s.context.trace_id != int(CLIENT_TRACE, 16) for t in traces for s in t)
    second = next(s for s in traces[1] if s.name == "POST messages").attributes
    assert second["thinkgate.upstream_error"] == "invalid_signature"
    assert "kept_verified" in second["thinkgate.actions"] and second["thinkgate.actions_count"] >= 1
    assert second["thinkgate.via"] != "none"
    for span in exporter.get_finished_spans():
        text = repr(dict(span.attributes)) + span.name + repr([e.attributes for e in span.events])
        for secret in (KEY, PROMPT, THINKING, "c2lnbmF0dXJl", "and then?"):
            assert secret not in text, (span.name, secret)


def test_tracing_is_on_only_when_the_otel_variables_ask_for_it() -> None:
    assert not wanted({})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    off = Tracing.from_env({})
    assert not off.enabled and off.span("decode") is off.span("load")  # one shared no-op context
    headers: dict[str, str] = {}
    off.inject(headers)
    assert headers == {}
    on = Tracing.from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert on.enabled
    on.shutdown()


def test_only_the_telemetry_module_imports_opentelemetry_and_only_inside_functions() -> None:
    for path in [*ROOT.joinpath("gateway").rglob("*.py"), *ROOT.joinpath("state").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "opentelemetry" for n in names):
                assert path.name == "telemetry.py" and path.parent.name == "ops", path
                assert id(node) not in top, f"{path}: a module-level opentelemetry import"


BLOCKED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError("no module named " + name)
sys.meta_path.insert(0, Block())
"""


@pytest.mark.process
def test_without_the_extra_tracing_is_off_and_requests_are_served() -> None:
    """As if ``thinkgate[otel]`` were not installed, with ``OTEL_*`` asking for traces: one warning, no spans, and
    the app serves (and no opentelemetry module is loaded)."""
    code = BLOCKED + """
import asyncio, logging, httpx
from gateway.app.factory import create_app
from gateway.app.settings import Settings
logging.basicConfig(level=logging.WARNING)
async def main():
    app = create_app(Settings())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            r = await c.post("/v1/messages", content=b"{not json", headers={"x-api-key": "k"})
            assert r.status_code == 400, r.text
    assert not app.state.gateway.tracing.enabled
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
    print("served")
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "console"})
    assert out.returncode == 0 and "served" in out.stdout, out.stderr
    assert "thinkgate[otel] is not installed: tracing is off" in out.stderr


def test_a_served_gateway_sends_its_traceparent_to_the_simulator_and_exports_its_spans(
        sim: Sim, gateways: GatewayFactory) -> None:
    """``thinkgate serve`` with ``OTEL_TRACES_EXPORTER=console`` (spans to its log): the simulator receives a W3C
    ``traceparent`` in the client's trace whose parent is the gateway's upstream call span, exported at shutdown."""
    gw = gateways.start(sim.url, {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "thinkgate-test"})
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        client.messages.create(model="claude-opus-4-5", max_tokens=1024, messages=[{"role": "user", "content": PROMPT}],
                               extra_headers={"traceparent": TRACEPARENT})
    got = sim.last()["headers"].get("traceparent", "")
    m = re.fullmatch(rf"00-{CLIENT_TRACE}-([0-9a-f]{{16}})-01", got)
    assert m and m[1] != TRACEPARENT.split("-")[2], got
    gw.stop()  # the lifespan's end exports what the batch processor still holds
    spans = re.findall(r'"name": "([^"]+)",\s*"context": \{\s*"trace_id": "0x([0-9a-f]+)",\s*'
                       r'"span_id": "0x([0-9a-f]+)"', gw.log())
    assert ("upstream", CLIENT_TRACE, m[1]) in spans, spans
    assert {"POST messages", "load", "repair", "sanitize", "upstream", "record", "store.load"} <= {s[0] for s in spans}
    assert '"service.name": "thinkgate-test"' in gw.log()
    assert KEY not in gw.log() and PROMPT not in gw.log()

"""The chart's ``tracing`` values: the pod's ``OTEL_*`` environment, the NetworkPolicy's egress to the collector,
the schema's and the chart's refusals, and, end to end, that a gateway started with exactly the environment the
chart renders exports its spans over OTLP (http/protobuf) to a collector (a loopback receiver here)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest

from gateway.ops.telemetry import wanted
from tests.process_fixtures import GatewayFactory, Sim
from tests.support.deploy.chart_tests import SECRET, container_env_resolved, helm, one, render

KEY = "sk-ant-api03-chart-tracing-key-0123456789"
PROMPT = "a prompt no collector may see"


def otel_env(values: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in container_env_resolved(render({**SECRET, **values})).items() if k.startswith("OTEL_")}


def egress_ports(values: dict[str, Any]) -> list[int]:
    policy = one(render({**SECRET, "networkPolicy": {"enabled": True, "egress": {"enabled": True}}, **values}),
                 "NetworkPolicy")
    return [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]


def test_tracing_is_off_by_default() -> None:
    assert otel_env({}) == {}
    assert not wanted(otel_env({}))
    assert egress_ports({}) == [53, 53, 443]


def test_tracing_values_become_the_sdks_variables() -> None:
    env = otel_env({"tracing": {"enabled": True, "endpoint": "http://otel-collector.obs:4318",
                                "sampler": "parentbased_traceidratio", "samplerArg": "0.25",
                                "headersSecret": {"name": "collector-auth", "key": "headers"}}})
    assert env.pop("OTEL_EXPORTER_OTLP_HEADERS")  # from the Secret key (not the chart's: a placeholder here)
    assert env == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.obs:4318",
                   "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "thinkgate",
                   "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    assert wanted(env)
    ctr = one(render({**SECRET, "tracing": {"enabled": True, "endpoint": "http://c:4318",
                                            "headersSecret": {"name": "collector-auth", "key": "headers"}}}),
              "Deployment")["spec"]["template"]["spec"]["containers"][0]
    (headers,) = [v for v in ctr["env"] if v["name"] == "OTEL_EXPORTER_OTLP_HEADERS"]
    assert headers["valueFrom"] == {"secretKeyRef": {"name": "collector-auth", "key": "headers"}}


@pytest.mark.parametrize(("endpoint", "port"), [
    ("http://otel-collector.obs:4318", 4318), ("https://otlp.example.com", 443), ("http://collector", 80),
    ("http://[fd00::1]:4317", 4317), ("https://otlp.example.com:8443/otlp", 8443),
])
def test_the_network_policy_lets_the_gateway_reach_the_collector(endpoint: str, port: int) -> None:
    assert egress_ports({"tracing": {"enabled": True, "endpoint": endpoint, "protocol": "grpc"}}) == [53, 53, 443, port]


@pytest.mark.parametrize("tracing", [
    {"endpoint": "otel-collector:4318"}, {"endpoint": "http://c:4318", "protocol": "http/json"},
    {"samplerArg": "2"}, {"sampler": "ratio"}, {"serviceName": ""}, {"headers": "authorization=x"},
])
def test_the_schema_refuses_mistakes(tracing: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render({**SECRET, "tracing": {"enabled": True, "endpoint": "http://c:4318", **tracing}})


@pytest.mark.parametrize(("tracing", "says"), [
    ({"enabled": True}, "tracing.enabled needs tracing.endpoint"),
    ({"enabled": True, "endpoint": "http://c:4318", "headersSecret": {"name": "auth"}},
     "tracing.headersSecret.name needs tracing.headersSecret.key"),
])
def test_the_chart_refuses_tracing_it_cannot_send(tracing: dict[str, Any], says: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=says):
        render({**SECRET, "tracing": tracing})


# ------------------------------------------------------------------ end to end


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]]
    got: threading.Event

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).received.append((self.path, self.headers.get("content-type", ""), body))
        type(self).got.set()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, type[_Collector]]]:
    handler = type("Collector", (_Collector,), {"received": [], "got": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_gateway_with_the_charts_environment_exports_its_spans_to_the_collector(
        sim: Sim, gateways: GatewayFactory, collector: tuple[str, type[_Collector]]) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                        reason="the otel extra: pip install -e '.[otel]'")
    url, received = collector
    env = otel_env({"tracing": {"enabled": True, "endpoint": url, "serviceName": "thinkgate-chart-test"}})
    gw = gateways.start(sim.url, env)
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        client.messages.create(model="claude-opus-4-5", max_tokens=1024,
                               messages=[{"role": "user", "content": PROMPT}])
    gw.stop()  # the lifespan's end flushes the batch processor
    assert received.got.wait(10), "no OTLP export reached the collector"
    paths = {(path, ctype) for path, ctype, _ in received.received}
    assert paths == {("/v1/traces", "application/x-protobuf")}, paths
    body = b"".join(b for _, _, b in received.received)
    for name in (b"thinkgate-chart-test", b"POST messages", b"upstream", b"store.load"):
        assert name in body, name
    assert KEY.encode() not in body and PROMPT.encode() not in body

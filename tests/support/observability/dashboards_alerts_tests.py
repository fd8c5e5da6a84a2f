"""The Grafana dashboard and the Prometheus alert rules against ``gateway.ops.metrics``: every metric a
panel or rule queries exists with the labels (and label values) it is queried by; the dashboard is
valid for provisioning; every alert links to its runbook section; promtool accepts the rules and
they fire (and stay silent) on synthetic series."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from gateway.dialects.classify import SIGNATURE_KINDS
from gateway.ops import metrics

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "grafana" / "dashboards" / "thinkgate.json"
PROVISIONING = ROOT / "grafana" / "provisioning"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
SCRAPE_LABELS = {"job", "instance"}

_METRIC = re.compile(r"\b(gateway_[a-z0-9_]+)\b(\s*\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_BY = re.compile(r"\bby\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_LABEL_VALUES = re.compile(r"^label_values\((gateway_\w+)(?:\{[^}]*\})?,\s*(\w+)\)$")
_TEMPLATE_LABEL = re.compile(r"\$labels\.(\w+)")


def exported() -> dict[str, tuple[str, set[str]]]:
    """sample name -> (metric name as defined, labels it can carry)."""
    out: dict[str, tuple[str, set[str]]] = {}
    for obj in vars(metrics).values():
        if not isinstance(obj, MetricWrapperBase):
            continue
        name, labels = obj._name, set(obj._labelnames)
        if obj._type == "counter":
            out[name + "_total"] = (name + "_total", labels)
        elif obj._type == "histogram":
            out[name + "_bucket"] = (name, labels | {"le"})
            out[name + "_sum"] = out[name + "_count"] = (name, labels)
        else:
            extra = {"pid"} if getattr(obj, "_multiprocess_mode", "") in ("all", "liveall") else set()
            out[name] = (name, labels | extra)
    return out


EXPORTED = exported()


def check_promql(expr: str, where: str) -> list[str]:
    """Problems in ``expr``: unknown metrics, unknown labels, label values outside the closed sets."""
    problems: list[str] = []
    known_labels = set(SCRAPE_LABELS)
    for m in _METRIC.finditer(expr):
        sample = m[1]
        if sample not in EXPORTED:
            problems.append(f"{where}: {sample} is not exported by gateway/ops/metrics.py")
            continue
        defined, labels = EXPORTED[sample]
        known_labels |= labels
        for label, op, value in _MATCHER.findall(m[3] or ""):
            if label not in labels | SCRAPE_LABELS:
                problems.append(f"{where}: {sample} has no label {label!r}")
                continue
            allowed = metrics.LABELS.get(defined, {}).get(label)
            if allowed is None or "$" in value or op.startswith("!"):
                continue
            values = value.split("|") if op == "=~" else [value]
            problems += [f"{where}: {sample}{{{label}={v!r}}} is never exported" for v in values if v not in allowed]
    for group in _GROUPING.findall(expr):
        for label in (g.strip() for g in group.split(",") if g.strip()):
            if label not in known_labels:
                problems.append(f"{where}: grouping by unknown label {label!r}")
    return problems


# ------------------------------------------------------------------ dashboard


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def targets() -> list[tuple[str, str]]:
    return [(f"panel {p['id']} ({p['title']})", t["expr"]) for p in dashboard()["panels"]
            for t in p.get("targets", [])]


def test_every_panel_query_uses_exported_metrics_and_labels() -> None:
    assert targets()
    problems = [p for where, expr in targets() for p in check_promql(expr, where)]
    assert not problems, "\n".join(problems)


def result_labels(expr: str) -> set[str]:
    """The labels an expression's result series carry: its outermost ``by (...)`` grouping where it aggregates,
    else the labels of the metrics it selects."""
    groups = [{g.strip() for g in grp.split(",") if g.strip()} for grp in _BY.findall(expr)]
    if groups:
        return set.intersection(*groups) - {"le"}
    return set.union(SCRAPE_LABELS, *(EXPORTED[m[1]][1] for m in _METRIC.finditer(expr) if m[1] in EXPORTED))


# metric families the dashboard leaves out on purpose, and why (issue 34 item 9: every other one has a panel)
NOT_ON_THE_DASHBOARD: dict[str, str] = {}


def test_every_exported_family_is_on_the_dashboard_or_said_not_to_be() -> None:
    on = {EXPORTED[m[1]][0] for _, expr in targets() for m in _METRIC.finditer(expr) if m[1] in EXPORTED}
    families = {defined for defined, _ in EXPORTED.values()}
    assert families - on - set(NOT_ON_THE_DASHBOARD) == set()
    assert set(NOT_ON_THE_DASHBOARD) <= families - on, "listed as absent but on the dashboard (or not exported)"


def test_every_legend_names_labels_its_query_returns() -> None:
    problems = [f"{where}: legend {{{{{name}}}}} is not a label of {expr}" for p in dashboard()["panels"]
                for t in p.get("targets", []) for where, expr in [(p["title"], t["expr"])]
                for name in _LEGEND.findall(t.get("legendFormat", "")) if name not in result_labels(expr)]
    assert not problems, "\n".join(problems)


def test_every_query_variable_reads_an_exported_label() -> None:
    for v in dashboard()["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = _LABEL_VALUES.match(v["definition"])
        assert m and m[1] in EXPORTED and m[2] in EXPORTED[m[1]][1] | SCRAPE_LABELS, v["definition"]
        assert not check_promql(v["definition"], f"variable {v['name']}")


def test_dashboard_covers_every_surface_model_and_the_token_counters() -> None:
    """No panel is tied to one surface: the endpoint variable (every surface's series exists from the start,
    ``metrics_workers.zero_series``) picks them, the latency and time-to-first-byte panels read it, and the token
    counters are shown by model family and by tenant."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name, metric in (("endpoint", "gateway_requests_total"), ("model", "gateway_requests_total"),
                         ("tenant", "gateway_tokens_total")):
        assert variables[name]["includeAll"] and variables[name]["multi"], name
        assert _LABEL_VALUES.match(variables[name]["definition"]).groups() == (metric, name)  # type: ignore[union-attr]
    for where, expr in targets():
        for m in _METRIC.finditer(expr):
            matchers = set(_MATCHER.findall(m[3] or ""))
            assert not {x for x in matchers if x[0] == "endpoint"} - {("endpoint", "=~", "$endpoint")}, where
            if m[1].startswith(("gateway_request_duration_seconds", "gateway_time_to_first_byte_seconds")):
                assert ("endpoint", "=~", "$endpoint") in matchers, where
    tokens = [expr for _, expr in targets() if "gateway_tokens_total" in expr]
    assert any("model" in result_labels(e) and "type" in result_labels(e) for e in tokens)
    assert any(result_labels(e) == {"tenant"} for e in tokens)
    assert any("gateway_stateless_requests_total" in e and result_labels(e) == {"reason"} for _, e in targets())


def test_every_panel_selects_by_job_and_instance_on_the_datasource_variable() -> None:
    for where, expr in targets():
        for m in _METRIC.finditer(expr):
            assert 'job=~"$job"' in (m[3] or "") and 'instance=~"$instance"' in (m[3] or ""), (where, m[0])
    for p in dashboard()["panels"]:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"]
        assert not check_promql(variables[name]["definition"], f"variable {name}")


def test_panel_ids_are_unique_and_grid_positions_valid() -> None:
    d = dashboard()
    panels = d["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("h", "w", "x", "y")), p["title"]
        assert g["h"] > 0 and 0 < g["w"] <= 24 and g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["y"] >= 0
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['id']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = p["id"]
    rows = [p["title"].lower() for p in panels if p["type"] == "row"]
    for topic in ("signature", "traffic", "repair", "store", "replica"):
        assert any(topic in r for r in rows), topic


def test_headline_panel_counts_every_signature_kind() -> None:
    first = next(p for p in dashboard()["panels"] if p["type"] != "row")
    assert "signature" in first["title"].lower()
    expr = first["targets"][0]["expr"]
    assert "gateway_upstream_errors_total" in expr and "or vector(0)" in expr
    kinds = set(re.search(r'kind=~"([^"]+)"', expr)[1].split("|"))  # type: ignore[index]
    assert kinds == SIGNATURE_KINDS


def scid_hit_ratio_denominators(expr: str) -> list[set[tuple[str, str, str]]]:
    """The label matchers of every ``gateway_scid_lookups_total`` selector of a hit-ratio expression
    (one that selects ``result="hit"``) other than the hits themselves; [] for other expressions."""
    selectors = [set(_MATCHER.findall(m[3] or "")) for m in _METRIC.finditer(expr)
                 if m[1] == "gateway_scid_lookups_total"]
    if not any(("result", "=", "hit") in s for s in selectors):
        return []
    return [s for s in selectors if ("result", "=", "hit") not in s]


def test_scid_hit_ratio_panels_and_alert_leave_foreign_lookups_out() -> None:
    """A foreign lookup (a header naming another tenant's conversation) is refused by design and says
    nothing about the store: every SCID hit ratio, on the dashboard and in the alert, divides by the
    lookups that are not foreign (the "SCID lookups" breakdown still shows them)."""
    ratios = [(where, expr) for where, expr in targets() if scid_hit_ratio_denominators(expr)]
    ratios += [(r["alert"], r["expr"]) for r in rules() if scid_hit_ratio_denominators(r["expr"])]
    assert len(ratios) >= 4, ratios  # three panels and the alert
    for where, expr in ratios:
        for matchers in scid_hit_ratio_denominators(expr):
            assert {m for m in matchers if m[0] == "result"} == {("result", "!=", "foreign")}, f"{where}: {expr}"


def test_provisioning_files() -> None:
    ds = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    prov = yaml.safe_load((PROVISIONING / "dashboards" / "thinkgate.yaml").read_text())
    assert prov["apiVersion"] == 1 and prov["providers"][0]["type"] == "file"
    assert prov["providers"][0]["options"]["path"]


# ------------------------------------------------------------------ alert rules


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def anchors() -> set[str]:
    """GitHub's heading anchors of the runbook."""
    out = set()
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def test_every_rule_queries_exported_metrics_and_links_its_runbook_section() -> None:
    problems = [p for r in rules() for p in check_promql(r["expr"], r["alert"])]
    assert not problems, "\n".join(problems)
    sections = anchors()
    for r in rules():
        url = r["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path.endswith("docs/runbook.md") and anchor in sections, url
        assert r["labels"]["severity"] in ("warning", "critical") and r["annotations"]["summary"]
        assert "for" in r
        text = " ".join(str(v) for v in r["annotations"].values())
        for name in _TEMPLATE_LABEL.findall(text):  # a label the alert does not carry renders empty
            assert name in result_labels(r["expr"]), (r["alert"], name)


def test_the_runbooks_documented_rewrite_makes_every_runbook_link_absolute() -> None:
    """docs/runbook.md tells operators of plain Prometheus to rewrite the relative ``runbook_url``
    prefix with sed; the command it shows must turn every link into ``<base>#<its section>``."""
    doc = RUNBOOK.read_text()
    base = re.search(r"^\s*RUNBOOK=(\S+)$", doc, re.M)
    sub = re.search(r'sed "s#([^#]+)#([^#]+)#"', doc)
    assert base and sub, "the runbook no longer shows the rewrite"
    old, new = sub[1], sub[2].replace("${RUNBOOK}", base[1])
    rewritten = yaml.safe_load(ALERTS.read_text().replace(old, new))
    urls = [r["annotations"]["runbook_url"] for g in rewritten["groups"] for r in g["rules"]]
    assert len(urls) == len(rules())
    sections = anchors()
    for url in urls:
        page, _, anchor = url.partition("#")
        assert page == base[1] and page.startswith("https://") and anchor in sections, url


def test_required_alerts() -> None:
    by_name = {r["alert"]: r for r in rules()}
    sig = by_name["ThinkgateSignatureErrors"]
    assert sig["for"] == "5m" and set(re.search(r'kind=~"([^"]+)"', sig["expr"])[1].split("|")) == SIGNATURE_KINDS  # type: ignore[index]
    assert 'result="hit"' in by_name["ThinkgateScidHitRatioCollapse"]["expr"]
    assert "gateway_store_circuit_open" in by_name["ThinkgateStoreCircuitOpen"]["expr"]
    assert "histogram_quantile(0.99" in by_name["ThinkgateHighLatencyP99"]["expr"]
    assert 'status="5xx"' in by_name["ThinkgateHighErrorRate"]["expr"]
    assert "gateway_stateless_requests_total" in by_name["ThinkgateStatelessRequests"]["expr"]


PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")


@needs_promtool
@pytest.mark.process
def test_promtool_check_rules() -> None:
    out = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=30)  # type: ignore[list-item]
    assert out.returncode == 0, out.stdout + out.stderr


MSG = {"endpoint": "messages", "upstream": "anthropic", "model": "claude-opus"}  # a /v1/messages request's labels


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    """A synthetic input series, with exactly the labels ``gateway.ops.metrics`` exports for ``metric`` (and the
    scrape's): a rule tested on series the gateway never exports would prove nothing."""
    assert set(labels) | SCRAPE_LABELS == EXPORTED[metric][1] | SCRAPE_LABELS, (metric, set(labels))
    sel = ",".join(f'{k}="{v}"' for k, v in {"job": "tg", "instance": "a", **labels}.items())
    return {"series": f"{metric}{{{sel}}}", "values": values}


def _alert(name: str, at: str, *expected: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": e} for e in expected]}


def _promtool_test(tmp_path: Path, tests: list[dict[str, Any]]) -> None:
    """``promtool test rules`` of ``tests`` on a copy of the rules without annotations (the
    expressions are tested)."""
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for r in group["rules"]:
            r.pop("annotations")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                       "tests": tests}))
    out = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,  # type: ignore[list-item]
                         timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
@pytest.mark.process
def test_rules_fire_on_synthetic_series(tmp_path: Path) -> None:
    up, bucket = "gateway_upstream_errors_total", "gateway_time_to_first_byte_seconds_bucket"
    store = "gateway_store_operation_seconds_bucket"
    tests = [{
        "interval": "1m",
        "input_series": [
            _series(up, "0+1x40", upstream="anthropic", kind="invalid_signature", model="claude-opus"),
            _series(up, "0+5x40", upstream="anthropic", kind="overloaded", model="claude-opus"),
            _series(up, "0x40", upstream="anthropic", kind="thinking_modified", model="claude-opus"),
            _series("gateway_scid_lookups_total", "0+1x60", via="tool_id", result="hit"),
            _series("gateway_scid_lookups_total", "0+3x60", via="tool_id", result="miss"),
            _series("gateway_store_circuit_open", "0 0 1x10 0x30", instance="b"),
            _series("gateway_requests_total", "0+1x40", status="5xx", **MSG),
            _series("gateway_requests_total", "0+9x40", status="2xx", **MSG),
            _series(bucket, "0x40", le="30", **MSG),
            _series(bucket, "0+10x40", le="120", **MSG),
            _series(bucket, "0+10x40", le="+Inf", **MSG),
            _series(store, "0+100x40", op="load", le="0.05"),
            _series(store, "0+100x40", op="load", le="+Inf"),
        ],
        "alert_rule_test": [
            _alert("ThinkgateSignatureErrors", "3m"),  # not yet 5 minutes
            _alert("ThinkgateSignatureErrors", "12m", {"severity": "warning", "job": "tg", "upstream": "anthropic",
                                                       "kind": "invalid_signature"}),
            _alert("ThinkgateScidHitRatioCollapse", "10m"),
            _alert("ThinkgateScidHitRatioCollapse", "40m", {"severity": "warning", "job": "tg"}),
            _alert("ThinkgateStoreCircuitOpen", "6m", {"severity": "critical", "job": "tg", "instance": "b"}),
            _alert("ThinkgateStoreCircuitOpen", "30m"),
            _alert("ThinkgateHighErrorRate", "25m", {"severity": "critical", "job": "tg"}),
            _alert("ThinkgateHighLatencyP99", "25m", {"severity": "warning", "job": "tg", "endpoint": "messages"}),
            _alert("ThinkgateStoreSlow", "25m"),  # every call under 50 ms
        ],
    }]
    _promtool_test(tmp_path, tests)


@needs_promtool
@pytest.mark.process
def test_scid_hit_ratio_alert_ignores_foreign_lookups(tmp_path: Path) -> None:
    """A "foreign" lookup (a header naming a conversation of another tenant) is refused as it should
    be; it says nothing about the store. Neither the ratio nor the traffic floor counts it: a client
    replaying foreign ids pages nobody, while genuine misses (``miss``, ``expired``) still fire."""
    lookups = "gateway_scid_lookups_total"
    tests = [{
        "interval": "1m",
        "input_series": [
            # every lookup that fails is foreign: no alert (with foreign counted the ratio was 25%)
            _series(lookups, "0+1x60", job="foreign", via="header", result="hit"),
            _series(lookups, "0x60", job="foreign", via="header", result="miss"),
            _series(lookups, "0+3x60", job="foreign", via="header", result="foreign"),
            # genuine misses next to the same foreign traffic: 25% hits, fires
            _series(lookups, "0+1x60", job="genuine", via="header", result="hit"),
            _series(lookups, "0+3x60", job="genuine", via="header", result="miss"),
            _series(lookups, "0+3x60", job="genuine", via="header", result="foreign"),
            # records gone are genuine misses too
            _series(lookups, "0+1x60", job="expired", via="tool_id", result="hit"),
            _series(lookups, "0+3x60", job="expired", via="tool_id", result="expired"),
            # below the traffic floor (1 genuine lookup a minute) once foreign lookups are left out
            _series(lookups, "0x60", job="quiet", via="header", result="hit"),
            _series(lookups, "0+1x60", job="quiet", via="header", result="miss"),
            _series(lookups, "0+5x60", job="quiet", via="header", result="foreign"),
        ],
        "alert_rule_test": [
            _alert("ThinkgateScidHitRatioCollapse", "10m"),
            _alert("ThinkgateScidHitRatioCollapse", "40m", {"severity": "warning", "job": "genuine"},
                   {"severity": "warning", "job": "expired"}),
        ],
    }]
    _promtool_test(tmp_path, tests)


@needs_promtool
@pytest.mark.process
def test_stateless_requests_alert_counts_store_reasons_only(tmp_path: Path) -> None:
    """``ThinkgateStatelessRequests`` fires when more than 1% of requests go stateless because of the store
    (timeouts, errors, an open breaker), not for requests stateless by design (no store, no credential)."""
    stateless, requests = "gateway_stateless_requests_total", "gateway_requests_total"
    tests = [{
        "interval": "1m",
        "input_series": [
            _series(requests, "0+100x40", job="slow", status="2xx", **MSG),
            _series(stateless, "0+5x40", job="slow", reason="store_timeout"),
            _series(stateless, "0x40", job="slow", reason="breaker_open"),
            _series(requests, "0+100x40", job="design", status="2xx", **MSG),
            _series(stateless, "0+100x40", job="design", reason="no_store"),
            _series(stateless, "0+50x40", job="design", reason="no_credential"),
            _series(requests, "0+1000x40", job="rare", status="2xx", **MSG),
            _series(stateless, "0+1x40", job="rare", reason="store_unavailable"),
        ],
        "alert_rule_test": [
            _alert("ThinkgateStatelessRequests", "4m"),  # not yet 5 minutes
            _alert("ThinkgateStatelessRequests", "20m", {"severity": "warning", "job": "slow"}),
        ],
    }]
    _promtool_test(tmp_path, tests)


GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$job": ".*", "$instance": ".*", "$endpoint": ".*",
                     "$model": ".*", "$tenant": ".*"}


@needs_promtool
@pytest.mark.process
def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    """Each panel's query, Grafana's variables filled in as "All" would, parses as a PromQL expression (promtool
    checks it as a recording rule)."""
    exprs = []
    for _, expr in targets():
        for var, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(var, value)
        assert "$" not in expr, expr
        exprs.append(expr)
    rules_file = tmp_path / "panels.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    out = subprocess.run([PROMTOOL, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=30)  # type: ignore[list-item]
    assert out.returncode == 0, out.stdout + out.stderr

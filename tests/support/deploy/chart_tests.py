"""helm/thinkgate, checked offline (no Kubernetes cluster here).

Tools (the ``deploy`` extra): ``helm-python-sdk`` (the Helm v4 Go SDK: render and ``lint --strict``),
``kubernetes-validate`` (every built-in resource against the Kubernetes 1.30 OpenAPI schemas,
strict: unknown fields fail). The ServiceMonitor and PrometheusRule (no CRD schema offline) are
checked field by field, and the rule groups with ``promtool check rules`` when it is installed.

Every ``ci/*-values.yaml`` scenario is rendered, validated and linted. The bitnami/redis dependency
is not vendored and cannot be fetched here (its OCI registry is out of reach), so lint runs on a
copy of the chart with an empty stand-in chart named ``redis`` in ``charts/``; the pristine chart
lints with exactly one finding, that missing dependency.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.app.settings import BYPASS_OFF, Settings
from gateway.dialects.gemini.parts import BYPASS_VALUES
from gateway.dialects.routing import FLAVORS
from state.factory import open_store

helm = pytest.importorskip("helm_python", reason="Helm SDK: pip install -e '.[deploy]' (helm-python-sdk)")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[deploy]'")

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "thinkgate"
SCENARIOS = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
KUBE = "1.30.0"
RELEASE, NAMESPACE = "tg", "ai"
PASSWORD = "pa55word"
## Offline renders (no cluster to read a generated GATEWAY_SECRET back from) need one given.
SECRET: dict[str, Any] = {"auth": {"secret": "test-only-secret-0123456789abcdef"}}


def load_values(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "ci" / name).read_text()) or {}


def render_text(values: dict[str, Any], chart_dir: Path = CHART) -> dict[str, str]:
    """Template path -> rendered text, NOTES.txt included."""
    chart = helm.Chart.load(str(chart_dir))
    try:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    finally:
        chart.close()


def render(values: dict[str, Any], chart_dir: Path = CHART) -> dict[str, list[dict[str, Any]]]:
    """Template path -> its documents (NOTES.txt left out)."""
    return {path: [d for d in yaml.safe_load_all(text) if d] for path, text in render_text(values, chart_dir).items()
            if not path.endswith("NOTES.txt")}


def docs(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [d for ds in rendered.values() for d in ds]


def one(rendered: dict[str, list[dict[str, Any]]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs(rendered) if d["kind"] == kind and "helm.sh/hook" not in
              d["metadata"].get("annotations", {})]
    return doc


@pytest.fixture(scope="module", params=SCENARIOS)
def scenario(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], dict[str, list[dict[str, Any]]]]:
    values = load_values(request.param)
    return request.param, values, render(values)


@pytest.fixture(scope="module")
def linted_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The chart with an empty stand-in for the bitnami/redis dependency in charts/."""
    copy = tmp_path_factory.mktemp("chart") / "thinkgate"
    shutil.copytree(CHART, copy)
    dep = next(d for d in yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"] if d["name"] == "redis")
    stub = copy / "charts" / "redis"
    (stub / "templates").mkdir(parents=True)
    (stub / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "redis", "version": dep["version"].replace("x", "0"),
        "description": "stand-in for bitnami/redis in tests", "icon": "https://example.invalid/redis.png"}))
    (stub / "values.yaml").write_text("{}\n")
    yield copy


# ------------------------------------------------------------------ lint


def findings(report: dict[str, Any], min_severity: int = 2) -> list[str]:
    return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= min_severity]


def test_pristine_chart_lints_with_only_the_unvendored_dependency() -> None:
    report = helm.lint(str(CHART), strict=True, kube_version="v" + KUBE)
    assert findings(report) == [f"{CHART}: chart directory is missing these dependencies: redis"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_helm_lint_strict(linted_copy: Path, name: str) -> None:
    report = helm.lint(str(linted_copy), load_values(name), strict=True, kube_version="v" + KUBE)
    assert report["total_charts_linted"] == 1
    assert not findings(report), findings(report)


# ------------------------------------------------------------------ schemas


def check_custom_resource(doc: dict[str, Any]) -> None:
    """No offline schema for the prometheus-operator CRDs here: their shape is checked field by
    field (the PrometheusRule's rules by promtool, below)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"} and doc["metadata"]["name"]
    if doc["kind"] == "ServiceMonitor":
        spec = doc["spec"]
        assert set(spec) <= {"jobLabel", "namespaceSelector", "selector", "endpoints"}
        for ep in spec["endpoints"]:
            assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "relabelings", "metricRelabelings",
                               "authorization"}
            if "authorization" in ep:  # GATEWAY_METRICS_TOKEN: scraped with it, from the chart's Secret
                assert ep["authorization"]["type"] == "Bearer" and set(ep["authorization"]["credentials"]) == {
                    "name", "key"}
            for key in ("interval", "scrapeTimeout"):
                assert re.fullmatch(r"(\d+(ms|s|m|h))+", ep[key]), ep[key]
    elif doc["kind"] == "PrometheusRule":
        assert set(doc["spec"]) == {"groups"}
        for group in doc["spec"]["groups"]:
            assert set(group) <= {"name", "interval", "rules"}
            for rule in group["rules"]:
                assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}
    else:
        raise AssertionError(f"unexpected custom resource {doc['kind']}")


def test_every_resource_validates_against_kubernetes_1_30(scenario: tuple[str, Any, Any]) -> None:
    _, _, rendered = scenario
    for path, documents in rendered.items():
        assert len(documents) <= 1, f"{path}: one resource per template"
        for doc in documents:
            if doc["apiVersion"].startswith("monitoring.coreos.com/"):
                check_custom_resource(doc)
            else:
                kubernetes_validate.validate(doc, KUBE, strict=True)


@pytest.mark.process
def test_kubernetes_validate_cli_strict(scenario: tuple[str, Any, Any], tmp_path: Path) -> None:
    """The same through the command line the README names (one multi-document file)."""
    cli = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    _, _, rendered = scenario
    builtin = [d for d in docs(rendered) if not d["apiVersion"].startswith("monitoring.coreos.com/")]
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(builtin))
    done = subprocess.run([cli, "--strict", "-k", KUBE, "--quiet", str(manifest)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_values_schema_rejects_mistakes() -> None:
    for bad in ({"replicas": 3}, {"gateway": {"logFormat": "xml"}}, {"redis": {"url": "redis://:pw@h:6379/0"}},
                {"redis": {"url": "memcached://h:11211"}}, {"image": {"pullPolicy": "Sometimes"}}):
        with pytest.raises(helm.HelmValuesError):
            render(bad)
    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds"):
        render({"terminationGracePeriodSeconds": 60, **SECRET})  # shorter than drain delay + timeout
    with pytest.raises(helm.HelmRenderError, match=r"existingSecretPassword needs auth\.existingSecret"):
        render({"redis": {"url": "redis://h:6379/0", "existingSecretPassword": True}, **SECRET})


# ------------------------------------------------------------------ what every scenario must keep


def test_deployment_is_hardened_and_drains(scenario: tuple[str, Any, Any]) -> None:
    _, values, rendered = scenario
    dep = one(rendered, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    sc, psc = ctr["securityContext"], pod["securityContext"]
    assert psc["runAsNonRoot"] and psc["runAsUser"] >= 1000 and psc["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"] and sc["runAsNonRoot"]
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert pod["automountServiceAccountToken"] is False
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert ctr["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["resources"]["requests"] and ctr["resources"]["limits"]["memory"]
    (tmp,) = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} >= {"kubernetes.io/hostname"}
    config = one(rendered, "ConfigMap")["data"]
    drain = float(config["GATEWAY_DRAIN_DELAY_S"]) + float(config["GATEWAY_DRAIN_TIMEOUT_S"])
    assert pod["terminationGracePeriodSeconds"] > drain
    assert ctr["args"] == ["--host", "0.0.0.0", "--port", str(ctr["ports"][0]["containerPort"]), "--workers",
                           str(values.get("gateway", {}).get("workers", 1))]
    # the Service reaches these pods on that port
    svc = one(rendered, "Service")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert svc["spec"]["ports"][0]["targetPort"] == ctr["ports"][0]["name"] == "http"


def _secret_values(rendered: dict[str, list[dict[str, Any]]], ref: dict[str, Any]) -> str | None:
    secrets = [d for d in docs(rendered) if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]]
    if not secrets:  # not ours: a value of the key's form
        if ref["key"] == "upstream-api-keys":
            return "anthropic=sk-ant-from-an-existing-secret"
        return PASSWORD if ref["key"].endswith("password") else "from-an-existing-secret-0123456789"
    value = secrets[0].get("data", {}).get(ref["key"])
    return base64.b64decode(value).decode() if value is not None else None


def test_gateway_environment_is_what_the_app_reads(scenario: tuple[str, Any, Any]) -> None:
    """The pod's environment, resolved as Kubernetes would (ConfigMap, secretKeyRefs, $(VAR)), is
    accepted by ``Settings.from_env`` and ``check_production``, and its Redis URL by the store."""
    _, values, rendered = scenario
    ctr = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = dict(one(rendered, "ConfigMap")["data"])
    known = set(re.findall(r'get\("([A-Z0-9_]+)"\)', (ROOT / "gateway" / "app" / "settings.py").read_text()))
    assert {k.removeprefix("GATEWAY_") for k in env} <= known, "a ConfigMap key the gateway does not read"
    for var in ctr["env"]:
        if "valueFrom" in var:
            ref = var["valueFrom"]["secretKeyRef"]
            value = _secret_values(rendered, ref)
            if value is None:
                assert ref.get("optional"), f"{var['name']}: {ref} is missing"
                continue
            env[var["name"]] = value
        else:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], var["value"])
    if prices := env.get("GATEWAY_PRICES_FILE"):  # a mounted file: under a mount of the container, read from here
        assert any(prices.startswith(m["mountPath"] + "/") for m in ctr["volumeMounts"]), prices
        env["GATEWAY_PRICES_FILE"] = str(ROOT / "tests" / "fixtures" / "prices.json")
    settings = Settings.from_env(env)
    if settings.redis_url:
        settings.check_production()
        assert "$(" not in settings.redis_url
        # parses (no connection is made); the TLS files it names are the mounted Secret's, not here
        # (tests/support/deploy/chart_redis_tls_tests.py starts a gateway on them)
        tls = values.get("redis", {}).get("tls", {})
        files = re.findall(r"[?&]ssl_(?:ca_certs|certfile|keyfile)=([^&]*)", settings.redis_url)
        assert all(f.startswith(tls.get("mountPath", "/etc/thinkgate/redis-tls") + "/") for f in files), files
        assert bool(files) == bool(tls.get("existingSecret"))
        url = re.sub(r"[?&]ssl_(?:ca_certs|certfile|keyfile)=[^&]*", "", settings.redis_url)
        open_store(url)
        wanted = values.get("redis", {}).get("url")
        if wanted:
            assert url.split("://", 1)[1].split("@")[-1] == wanted.split("://", 1)[1]
            assert url.split("://")[0] == wanted.split("://")[0]
        if values.get("redis", {}).get("password") or values.get("redis", {}).get("existingSecretPassword"):
            assert f":{env['THINKGATE_REDIS_PASSWORD']}@" in settings.redis_url
    assert settings.secret and settings.secret != "thinkgate-dev-secret"


## Set by the Deployment from the Secret (or from redis.url / bundledRedis), not by the ConfigMap: the values
## that set them.
FROM_SECRET_OR_REDIS = {"SECRET": {"auth": {"secret": "from-a-value-0123456789abcdef0123456789"}},
                        "PREVIOUS_SECRET": {"auth": {**SECRET["auth"],
                                                     "previousSecret": "the-previous-one-0123456789abcdef0123"}},
                        "REDIS_URL": {"redis": {"url": "redis://redis.example:6379/0"}},
                        "UPSTREAM_API_KEYS": {"auth": {**SECRET["auth"], "upstreamApiKeys": "anthropic=sk-ant-x"}},
                        "ADMIN_TOKEN": {"auth": {**SECRET["auth"], "adminToken": "admin-token-0123456789"}},
                        "METRICS_TOKEN": {"auth": {**SECRET["auth"], "metricsToken": "metrics-token-0123456789"}}}
## Where the chart's defaults deliberately differ from the gateway's: JSON lines for log collectors,
## a drain that covers endpoint removal and long streams (terminationGracePeriodSeconds is 150).
CHART_DEFAULTS = {"log_format": "json", "drain_delay_s": 10.0, "drain_timeout_s": 120.0}


def container_env(rendered: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """The gateway container's plain environment: its ConfigMap (envFrom) and literal env values."""
    ctr = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    config = one(rendered, "ConfigMap")
    assert ctr["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
    return {**config["data"], **{v["name"]: v["value"] for v in ctr.get("env", []) if "value" in v}}


def test_chart_sets_every_gateway_setting_with_the_gateways_defaults() -> None:
    """Every GATEWAY_* variable gateway/app/settings.py reads is in the ConfigMap (or comes from the
    Secret), and the chart's defaults are the gateway's, apart from the documented CHART_DEFAULTS."""
    known = set(re.findall(r'get\("([A-Z0-9_]+)"\)', (ROOT / "gateway" / "app" / "settings.py").read_text()))
    config = one(render(SECRET), "ConfigMap")["data"]
    assert {k.removeprefix("GATEWAY_") for k in config} == known - set(FROM_SECRET_OR_REDIS)
    assert Settings.from_env(config) == dataclasses.replace(Settings(), **CHART_DEFAULTS)
    # every ConfigMap key comes from a gateway value the schema describes
    template = (CHART / "templates" / "configmap.yaml").read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["gateway"]["properties"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())["gateway"]
    for key, value in re.findall(r"^  (GATEWAY_[A-Z0-9_]+): \{\{ \.(\w+) ", template, re.M):
        assert value in schema and value in values, f"{key}: gateway.{value} is not a documented value"
    assert len(re.findall(r"^  GATEWAY_", template, re.M)) == len(config)
    # the others are set by values too
    for name, values_for in FROM_SECRET_OR_REDIS.items():
        env = container_env_resolved(render({**SECRET, **values_for}))
        assert env.get("GATEWAY_" + name), f"GATEWAY_{name} is not set by {values_for}"
    assert config["GATEWAY_GEMINI_SIGNATURE_BYPASS"] == "skip_thought_signature_validator"
    assert config["GATEWAY_FIX_THINKING_PARAMS"] == "true"


def container_env_resolved(rendered: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """The container's environment with secretKeyRefs read from the chart's own Secret."""
    ctr = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = dict(one(rendered, "ConfigMap")["data"])
    for var in ctr["env"]:
        if "valueFrom" in var:
            value = _secret_values(rendered, var["valueFrom"]["secretKeyRef"])
            if value is not None:
                env[var["name"]] = value
        else:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], ""), var["value"])
    return env


@pytest.mark.parametrize("bypass", ["off", "context_engineering_is_the_way_to_go"])
def test_gateway_values_reach_the_container(bypass: str) -> None:
    overrides = {
        "geminiSignatureBypass": bypass, "fixThinkingParams": False,
        "geminiBaseUrl": "https://gemini.example.com", "openaiBaseUrl": "https://openrouter.ai/api/v1",
        "openaiFlavor": "openrouter", "routes": "deepseek-=deepseek@https://api.deepseek.com/v1",
        "upstreamRetries": 2, "upstreamRetryMaxDelaySeconds": 2.5, "decodedTurnCache": 0,
        "loadCacheMb": 0, "replayMemoMb": 8, "continuationsOff": "splice, carried_repair",
    }
    settings = Settings.from_env(container_env(render({"gateway": overrides, **SECRET})))
    assert settings.gemini_signature_bypass == bypass and settings.fix_thinking_params is False
    assert settings.gemini_bypass == (None if bypass == "off" else bypass)
    assert (settings.gemini_base_url, settings.openai_base_url, settings.openai_flavor) == (
        "https://gemini.example.com", "https://openrouter.ai/api/v1", "openrouter")
    assert settings.routes == overrides["routes"] and settings.router()
    assert (settings.upstream_retries, settings.upstream_retry_max_delay_s, settings.decoded_turn_cache) == (2, 2.5, 0)
    assert (settings.load_cache_mb, settings.replay_memo_mb) == (0, 8)
    assert settings.continuations_off == {"splice", "carried_repair"}


def test_values_schema_rejects_settings_the_gateway_refuses() -> None:
    gateway = json.loads((CHART / "values.schema.json").read_text())["properties"]["gateway"]["properties"]
    assert tuple(gateway["openaiFlavor"]["enum"]) == FLAVORS
    assert tuple(gateway["geminiSignatureBypass"]["enum"]) == (*BYPASS_VALUES, BYPASS_OFF)
    for bad in ({"geminiSignatureBypass": "none"}, {"openaiFlavor": "azure"}, {"openaiBaseUrl": "openrouter.ai"},
                {"upstreamRetries": -1}, {"decodedTurnCache": -1}, {"replayMemoMb": -1}, {"fixThinkingParams": "yes"},
                {"continuationsOff": "splice,cache"}):
        with pytest.raises(helm.HelmValuesError):
            render({"gateway": bad, **SECRET})


# ------------------------------------------------------------------ optional features


def kinds(rendered: dict[str, list[dict[str, Any]]]) -> set[str]:
    return {d["kind"] for d in docs(rendered)}


def test_optional_features_default_off() -> None:
    rendered = render(SECRET)
    assert kinds(rendered) == {"Deployment", "Service", "ConfigMap", "Secret", "ServiceAccount", "Pod"}
    assert one(rendered, "Deployment")["spec"]["replicas"] == 1  # no shared store by default: one pod


@pytest.mark.parametrize("values", [
    {"replicaCount": 2},
    {"autoscaling": {"enabled": True}},
    {"autoscaling": {"enabled": True, "minReplicas": 1}},
], ids=["replicas", "hpa", "hpa-min-1"])
def test_no_replicas_without_a_shared_store_unless_accepted(values: dict[str, Any]) -> None:
    """Pods with embedded stores each keep their own records: a conversation whose requests land on different
    pods loses its thinking. The chart refuses to render that unless the operator says so."""
    with pytest.raises(helm.HelmRenderError, match=r"without a shared store.*allowEmbeddedStoreWithReplicas"):
        render({**SECRET, **values})
    accepted = render_text({**SECRET, **values, "allowEmbeddedStoreWithReplicas": True})
    assert "WARNING: no shared store" in accepted["thinkgate/templates/NOTES.txt"]
    for store in ({"redis": {"url": "redis://redis.example:6379/0"}}, {"bundledRedis": {"enabled": True}}):
        assert "Deployment" in kinds(render({**SECRET, **values, **store}))
    assert "NOTE: one pod with its embedded store" in render_text(SECRET)["thinkgate/templates/NOTES.txt"]


def test_no_workers_without_a_shared_store() -> None:
    """Issue 34 item 8: ``thinkgate serve`` refuses several workers without Redis; the chart says so before a pod
    would crash-loop on it, whatever ``allowEmbeddedStoreWithReplicas`` says."""
    workers = {"gateway": {"workers": 2}}
    for accepted in ({}, {"allowEmbeddedStoreWithReplicas": True}):
        with pytest.raises(helm.HelmRenderError, match=r"gateway.workers 2 without a shared store"):
            render({**SECRET, **workers, **accepted})
    assert "Deployment" in kinds(render({**SECRET, **workers, "bundledRedis": {"enabled": True}}))


def test_autoscaling_and_pdb() -> None:
    rendered = render(load_values("autoscaling-pdb-values.yaml"))
    hpa, pdb = one(rendered, "HorizontalPodAutoscaler"), one(rendered, "PodDisruptionBudget")
    assert hpa["apiVersion"] == "autoscaling/v2" and pdb["apiVersion"] == "policy/v1"
    assert "replicas" not in one(rendered, "Deployment")["spec"]  # the HPA owns it
    assert hpa["spec"]["scaleTargetRef"]["name"] == one(rendered, "Deployment")["metadata"]["name"]
    assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu", "memory"}
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]


def test_ingress_streams_and_monitoring() -> None:
    rendered = render(load_values("ingress-servicemonitor-values.yaml"))
    ann = one(rendered, "Ingress")["metadata"]["annotations"]
    assert ann["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert ann["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "off"
    assert int(ann["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 600
    assert int(ann["nginx.ingress.kubernetes.io/proxy-body-size"].rstrip("m")) * 2**20 >= 33554432
    sm = one(rendered, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "http" and sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= one(rendered, "Service")["metadata"]["labels"].items()
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    netpol = one(rendered, "NetworkPolicy")
    assert netpol["spec"]["policyTypes"] == ["Ingress", "Egress"]


@pytest.mark.process
def test_prometheus_rule_embeds_the_alert_rules(tmp_path: Path) -> None:
    source = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    values = load_values("ingress-servicemonitor-values.yaml")
    groups = one(render(values), "PrometheusRule")["spec"]["groups"]
    base = values["prometheusRule"]["runbookBaseUrl"]
    for group in source["groups"]:
        for rule in group["rules"]:
            rule["annotations"]["runbook_url"] = rule["annotations"]["runbook_url"].replace("docs/runbook.md", base)
    assert groups == source["groups"]
    untouched = one(render({"prometheusRule": {"enabled": True}, **SECRET}), "PrometheusRule")["spec"]["groups"]
    assert untouched == yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())["groups"]
    if shutil.which("promtool"):
        rules = tmp_path / "rules.yml"
        rules.write_text(yaml.safe_dump({"groups": groups}))
        done = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_chart_alerts_file_is_a_copy_of_deploy_alerts() -> None:
    """helm/thinkgate/files/alerts.yml must be byte-identical to deploy/prometheus/alerts.yml
    (after editing the rules: cp deploy/prometheus/alerts.yml helm/thinkgate/files/alerts.yml)."""
    assert (CHART / "files" / "alerts.yml").read_bytes() == (ROOT / "deploy" / "prometheus" / "alerts.yml").read_bytes()


def test_bundled_redis_wiring() -> None:
    rendered = render(load_values("bundled-redis-values.yaml"))
    env = {v["name"]: v for v in one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GATEWAY_REDIS_URL"]["value"] == \
        f"redis://:$(THINKGATE_REDIS_PASSWORD)@{RELEASE}-redis-master.{NAMESPACE}.svc:6379/0"
    assert env["THINKGATE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": f"{RELEASE}-redis",
                                                                            "key": "redis-password"}
    deps = yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"]
    assert deps == [{"name": "redis", "alias": "bundledRedis", "version": deps[0]["version"],
                     "repository": "oci://registry-1.docker.io/bitnamicharts", "condition": "bundledRedis.enabled"}]
    assert not (CHART / "charts").exists(), "the dependency is not vendored"


# ------------------------------------------------------------------ NetworkPolicy

CLIENTS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
SCRAPERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
HTTP = [{"port": "http", "protocol": "TCP"}]


def network_policy(values: dict[str, Any]) -> dict[str, Any]:
    doc = one(render({**SECRET, **values}), "NetworkPolicy")
    kubernetes_validate.validate(doc, KUBE, strict=True)
    return doc


@pytest.mark.parametrize("metrics_from", [[], SCRAPERS], ids=["no-metricsFrom", "metricsFrom"])
@pytest.mark.parametrize("ingress_from", [[], CLIENTS], ids=["any-source", "ingressFrom"])
def test_network_policy_ingress(ingress_from: list[Any], metrics_from: list[Any]) -> None:
    """/metrics shares the gateway port: an empty ingressFrom leaves that port open to any source
    (metricsFrom cannot narrow it, and must not close it to clients); a set ingressFrom admits
    exactly its peers and the scrapers."""
    rendered_text = render_text({**SECRET, "networkPolicy": {
        "enabled": True, "ingressFrom": ingress_from, "metricsFrom": metrics_from}})["thinkgate/templates/NOTES.txt"]
    spec = network_policy({"networkPolicy": {"enabled": True, "ingressFrom": ingress_from,
                                             "metricsFrom": metrics_from}})["spec"]
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    assert all(rule["ports"] == HTTP for rule in spec["ingress"])
    if not ingress_from:
        assert spec["ingress"] == [{"ports": HTTP}]  # no `from`: any source
    else:
        assert [rule["from"] for rule in spec["ingress"]] == [ingress_from] + ([metrics_from] if metrics_from else [])
    assert ("metricsFrom has no effect" in rendered_text) == bool(metrics_from and not ingress_from)


def redis_egress_ports(values: dict[str, Any]) -> list[int] | None:
    """The Redis rule's ports, between the DNS rule and the upstream rule (None: no Redis rule)."""
    np = {"enabled": True, "egress": {"enabled": True, **values.pop("egress", {})}}
    egress = network_policy({**values, "networkPolicy": np})["spec"]["egress"]
    assert egress[0]["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert egress[-1]["ports"] == [{"port": 443, "protocol": "TCP"}]
    assert all(set(rule) == {"ports"} for rule in egress)
    if len(egress) == 2:
        return None
    (redis_rule,) = egress[1:-1]
    assert all(p["protocol"] == "TCP" for p in redis_rule["ports"])
    return [p["port"] for p in redis_rule["ports"]]


@pytest.mark.parametrize(("values", "ports"), [
    ({"redis": {"url": "redis://redis.redis.svc:6379/0"}}, [6379]),
    ({"redis": {"url": "redis://redis.redis.svc/0"}}, [6379]),  # redis-py's default port
    ({"redis": {"url": "rediss://redis.example.internal:6380/0"}}, [6380]),
    ({"redis": {"url": "redis+cluster://a:7000,b:7001,c:7000"}}, [7000, 7001]),
    ({"redis": {"url": "rediss+cluster://[fd00::1]:6390,[fd00::2]:6390"}}, [6390]),
    ({"redis": {"url": "redis+sentinel://s1:26379,s2:26380/mymaster/0"}, "egress": {"redisPorts": [6379]}},
     [26379, 26380, 6379]),
    ({"redis": {"url": "rediss://h:6380/0"}, "egress": {"redisPorts": [6380, 6381]}}, [6380, 6381]),
    ({"bundledRedis": {"enabled": True}}, [6379]),
    ({}, None),  # no Redis: no Redis rule
], ids=["single", "default-port", "tls", "cluster", "cluster-ipv6", "sentinel", "extra", "bundled", "embedded"])
def test_network_policy_egress_reaches_the_configured_redis(values: dict[str, Any], ports: list[int] | None) -> None:
    assert redis_egress_ports(values) == ports


def test_network_policy_egress_needs_the_sentinel_master_ports() -> None:
    """A Sentinel URL names the sentinels only; the master's port is Sentinel's to say."""
    with pytest.raises(helm.HelmRenderError, match=r"redis\+sentinel.*networkPolicy\.egress\.redisPorts"):
        render({**SECRET, "redis": {"url": "redis+sentinel://s1:26379/mymaster"},
                "networkPolicy": {"enabled": True, "egress": {"enabled": True}}})
    # without egress rules, nothing to list
    assert one(render({**SECRET, "redis": {"url": "redis+sentinel://s1:26379/mymaster"},
                       "networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]["policyTypes"] == ["Ingress"]


# ------------------------------------------------------------------ GATEWAY_SECRET


def gateway_secret(rendered: dict[str, list[dict[str, Any]]]) -> str:
    return base64.b64decode(one(rendered, "Secret")["data"]["gateway-secret"]).decode()


def test_offline_render_refuses_to_make_up_a_gateway_secret() -> None:
    """helm template / Argo CD cannot read a generated secret back: a random one would rotate on
    every render and orphan every stored conversation, so the render fails and says what to set."""
    with pytest.raises(helm.HelmRenderError, match=r"auth\.secret is empty and the cluster cannot be read.*"
                                                   r"auth\.existingSecret"):
        render({"redis": {"url": "redis://h:6379/0"}})
    assert gateway_secret(render(SECRET)) == SECRET["auth"]["secret"]
    rendered = render({"auth": {"existingSecret": "mine"}})
    assert "Secret" not in kinds(rendered)
    env = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "GATEWAY_SECRET",
                      "valueFrom": {"secretKeyRef": {"name": "mine", "key": "gateway-secret"}}}


def test_scenarios_render_the_same_every_time(scenario: tuple[str, Any, Any]) -> None:
    """What a GitOps controller relies on: no value (nor checksum annotation) changes between renders."""
    _, values, rendered = scenario
    assert render(values) == rendered


LOOKUP_ONE = 'lookup "v1" "Secret" .Release.Namespace $name'
LOOKUP_ALL = 'lookup "v1" "Secret" .Release.Namespace ""'


@pytest.fixture
def live_chart(tmp_path: Path) -> Any:
    """The chart with the helper's two lookups answered as a cluster would: the release's Secret
    (or nothing) and the namespace's SecretList (never empty when the API answers)."""
    def make(current: dict[str, Any] | None) -> Path:
        copy = tmp_path / f"chart-{len(list(tmp_path.iterdir()))}" / "thinkgate"
        shutil.copytree(CHART, copy)
        helpers = copy / "templates" / "_helpers.tpl"
        text = helpers.read_text()
        assert text.count(LOOKUP_ONE) == text.count(LOOKUP_ALL) == 1, "the helper's lookups changed"
        found = f"(fromJson `{json.dumps(current or {})}`)"
        secret_list = '(dict "apiVersion" "v1" "kind" "SecretList" "items" list)'
        helpers.write_text(text.replace(LOOKUP_ONE, found).replace(LOOKUP_ALL, secret_list))
        return copy
    return make


def test_live_install_generates_and_upgrade_keeps_the_gateway_secret(live_chart: Any) -> None:
    first = gateway_secret(render({}, live_chart(None)))
    assert len(first) == 48 and first.isalnum()
    assert gateway_secret(render({}, live_chart(None))) != first  # why offline renders must not do this
    kept = {"data": {"gateway-secret": base64.b64encode(first.encode()).decode()}}
    assert gateway_secret(render({}, live_chart(kept))) == first
    assert gateway_secret(render(SECRET, live_chart(kept))) == SECRET["auth"]["secret"]  # explicit wins
    with pytest.raises(helm.HelmRenderError, match=r'has no key "gateway-secret"'):
        render({}, live_chart({"data": {"other": "eA=="}}))

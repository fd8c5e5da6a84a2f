"""deploy/compose.yaml, deploy/haproxy.cfg and deploy/prometheus/prometheus.yml, checked statically
(no Docker engine here): the compose file against the Compose specification (``compose-spec``, in
the ``deploy`` extra), its references (services, mounted files, ports, settings), the load
balancer's backend list and streaming options, the scrape targets; ``haproxy -c`` and
``promtool check config`` when those tools are installed. tests/process/deploy/test_haproxy.py runs the
same HAProxy configuration live in front of real gateway processes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.app.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
GATEWAYS = ["gateway-1", "gateway-2", "gateway-3"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())  # type: ignore[no-any-return]


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR:?error} (enough for this file)."""
    def sub(m: re.Match[str]) -> str:
        name, op, arg = m[1], m[2] or "", m[3] or ""
        if op == ":-":
            return env.get(name) or arg
        if op == ":?":
            if not env.get(name):
                raise KeyError(f"{name}: {arg}")
            return env[name]
        return env.get(name, "")
    return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", sub, value)


def service_port(svc: dict[str, Any]) -> int:
    cmd = list(svc["command"])
    return int(cmd[cmd.index("--port") + 1])


def haproxy_backend(text: str) -> list[str]:
    """Lines of the `backend gateways` section."""
    lines, inside = [], False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if re.match(r"^(global|defaults|frontend|backend|listen|resolvers)\b", line):
            inside = line == "backend gateways"
            continue
        if inside:
            lines.append(line)
    return lines


def test_valid_compose_specification() -> None:
    compose_spec = pytest.importorskip("compose_spec", reason="Compose spec validator: pip install -e '.[deploy]'")
    # as compose reads it: interpolated first (a published port's host address is ${THINKGATE_BIND:-127.0.0.1})
    text = interpolate((DEPLOY / "compose.yaml").read_text(),
                       {"THINKGATE_SECRET": "s3cret" * 6, "GRAFANA_ADMIN_PASSWORD": "p4ss"})
    parsed = compose_spec.PyCompose.from_yaml(text)
    spec = parsed.to_spec()  # every key and type against the Compose specification
    assert set(spec.services or {}) >= {*GATEWAYS, "lb", "redis", "prometheus", "grafana", "sim"}


def test_three_identical_hardened_gateway_replicas(compose: dict[str, Any]) -> None:
    services = compose["services"]
    gateways = [s for s in services if s.startswith("gateway-")]
    assert gateways == GATEWAYS
    first = services[GATEWAYS[0]]
    for name in GATEWAYS:
        svc = services[name]
        assert svc == first, f"{name} differs from {GATEWAYS[0]}"
    assert first["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert (DEPLOY / first["build"]["context"] / first["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert first["read_only"] is True and any(t.startswith("/tmp") for t in first["tmpfs"])
    assert int(first["user"].split(":")[0]) >= 1000
    assert first["cap_drop"] == ["ALL"] and "no-new-privileges:true" in first["security_opt"]
    assert first["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "/readyz" in " ".join(first["healthcheck"]["test"])
    assert first["stop_signal"] == "SIGTERM"


def test_gateway_environment_is_real_settings(compose: dict[str, Any]) -> None:
    svc = compose["services"][GATEWAYS[0]]
    env = {k: interpolate(str(v), {"THINKGATE_SECRET": "s3cret" * 6}) for k, v in svc["environment"].items()}
    known = set(re.findall(r'get\("([A-Z0-9_]+)"\)', (ROOT / "gateway" / "app" / "settings.py").read_text()))
    assert {k.removeprefix("GATEWAY_") for k in env if k.startswith("GATEWAY_")} <= known
    settings = Settings.from_env(env)
    settings.check_production()  # a private secret is required once Redis is shared
    assert settings.redis_url == "redis://redis:6379/0" and "redis" in compose["services"]
    assert settings.anthropic_base_url == "https://api.anthropic.com"
    with pytest.raises(KeyError, match="THINKGATE_SECRET"):  # no silent default secret
        interpolate(str(svc["environment"]["GATEWAY_SECRET"]), {})
    # the simulator profile as the upstream
    sim_env = {"THINKGATE_SECRET": "s", "THINKGATE_UPSTREAM": "http://sim:8090"}
    upstream = interpolate(str(svc["environment"]["GATEWAY_ANTHROPIC_BASE_URL"]), sim_env)
    sim = compose["services"]["sim"]
    assert upstream == f"http://sim:{service_port(sim)}" and sim["profiles"] == ["sim"]
    assert sim["entrypoint"] == ["thinkgate", "sim"]
    # stop_grace_period covers the drain (delay + timeout)
    grace = int(svc["stop_grace_period"].removesuffix("s"))
    assert grace > settings.drain_delay_s + settings.drain_timeout_s


def test_load_balancer_round_robin_over_every_replica_streaming_friendly(compose: dict[str, Any]) -> None:
    lb = compose["services"]["lb"]
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in lb["volumes"]
    text = (DEPLOY / "haproxy.cfg").read_text()
    backend = haproxy_backend(text)
    servers = [line.split()[1:3] for line in backend if line.startswith("server ")]
    port = service_port(compose["services"][GATEWAYS[0]])
    assert servers == [[g, f"{g}:{port}"] for g in GATEWAYS]
    assert "balance roundrobin" in backend
    assert "option httpchk GET /readyz" in backend and "http-check expect status 200" in backend
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert "http-buffer-request" not in code and "compression" not in code  # nothing buffers a stream
    assert re.search(r"^\s*option http-no-delay", code, re.M)
    for side in ("client", "server"):
        m = re.search(rf"^\s*timeout {side} (\d+)m\s*$", code, re.M)
        assert m and int(m[1]) >= 10, f"timeout {side} must allow long silent thinking"
    assert re.search(r"^\s*retry-on conn-failure\s*$", code, re.M)  # never replays a request that was sent
    published = {p.split(":")[-1] for p in lb["ports"]}
    assert re.search(r"^\s*bind :(\d+)", code, re.M)[1] in published  # type: ignore[index]


def test_prometheus_scrapes_every_replica_with_the_alert_rules(compose: dict[str, Any]) -> None:
    prom = compose["services"]["prometheus"]
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    port = service_port(compose["services"][GATEWAYS[0]])
    targets = [t for sc in jobs["thinkgate"]["static_configs"] for t in sc["targets"]]
    assert targets == [f"{g}:{port}" for g in GATEWAYS]
    assert jobs["thinkgate"].get("metrics_path", "/metrics") == "/metrics"
    assert config["rule_files"] == ["alerts.yml"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in prom["volumes"])
    assert mounts["./prometheus/alerts.yml"] == "/etc/prometheus/alerts.yml"
    assert mounts["./prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]


def test_grafana_provisioned_with_the_dashboard(compose: dict[str, Any]) -> None:
    graf = compose["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in graf["volumes"])
    providers = yaml.safe_load((ROOT / "grafana" / "provisioning" / "dashboards" / "thinkgate.yaml").read_text())
    path = providers["providers"][0]["options"]["path"]
    assert mounts["../grafana/dashboards"] == path
    assert list((ROOT / "grafana" / "dashboards").glob("*.json"))
    datasources = yaml.safe_load((ROOT / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    url = datasources["datasources"][0]["url"]
    assert re.fullmatch(r"http://prometheus:9090", url) and "prometheus" in compose["services"]


def test_every_bind_mount_source_exists(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
        for dep in svc.get("depends_on", []):
            assert dep in compose["services"], f"{name} depends on unknown {dep}"


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (Debian package haproxy)")
@pytest.mark.process
def test_haproxy_accepts_the_configuration() -> None:
    done = subprocess.run(["haproxy", "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    warnings = [w for w in done.stderr.splitlines() if "[WARNING]" in w and "could not resolve address" not in w]
    assert not warnings, warnings  # only the compose service names are unknown outside compose


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package prometheus)")
@pytest.mark.process
def test_promtool_accepts_the_scrape_configuration() -> None:
    done = subprocess.run(["promtool", "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def env_file(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))  # type: ignore[misc]


def upstream_families() -> dict[str, str]:
    """Every family of upstream thinkgate calls (``gateway.dialects``: its upstream kinds, the OpenAI-compatible one
    once per flavor but the generic one) -> a model the compose routing sends there."""
    from gateway.dialects import registry
    from gateway.dialects.routing import FLAVORS
    from gateway.surfaces.common import UPSTREAM_DIALECTS

    # (the cloud platforms, Bedrock and Vertex AI, are opt-in routes: they need the pod's cloud identity and the
    # [aws]/[gcp] extras, so compose leaves them to GATEWAY_ROUTES; tests/*/cloud run them)
    families = [k for k in UPSTREAM_DIALECTS if k != "openai" and not registry.dialect(k).platform] + [
        f for f in FLAVORS if f != "generic"]
    models = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-3-pro-preview", "openrouter": "x-ai/grok-4",
              "copilot": "gpt-5", "deepseek": "deepseek-reasoner", "responses": "o4-mini"}
    assert set(families) == set(models), "a new upstream family: wire it in deploy/compose.yaml and here"
    return models


@pytest.mark.parametrize("with_sim", [False, True], ids=["real-upstreams", "sim-env-file"])
def test_compose_wires_every_upstream_family(compose: dict[str, Any], with_sim: bool) -> None:
    """Each family's model routes to an upstream of that family; with deploy/sim.env every one is the compose
    simulator, at a path the simulator serves; without it, the public service."""
    from thinkgate_sim.app import SimConfig, create_sim_app

    svc = compose["services"][GATEWAYS[0]]
    env_vars = {"THINKGATE_SECRET": "s3cret" * 6, **(env_file(DEPLOY / "sim.env") if with_sim else {})}
    settings = Settings.from_env({k: interpolate(str(v), env_vars) for k, v in svc["environment"].items()})
    router, urls = settings.router(), settings.upstream_urls()
    sim = compose["services"]["sim"]
    sim_paths = {route.path for route in create_sim_app(SimConfig()).routes}  # type: ignore[attr-defined]
    for family, model in upstream_families().items():
        caps = router.caps_for(model)
        assert (caps.kind if caps.kind != "openai" else caps.flavor) == family, (family, caps)
        url = urls[caps.upstream]
        if with_sim:
            prefix = f"http://sim:{service_port(sim)}"
            assert url.startswith(prefix), (family, url)
            path = url.removeprefix(prefix)
            served = {"anthropic": path + "/v1/messages", "gemini": path + "/v1beta/models/{rest:path}",
                      "responses": path + "/responses"}.get(
                family, path + "/chat/completions")
            assert served in sim_paths, (family, served)
        else:
            assert url.startswith("https://") and "sim" not in url, (family, url)
    assert "--tools" in sim["command"]  # a first tool loop against the simulator calls its tools


def test_every_published_port_is_on_loopback_unless_asked_and_grafana_has_no_default_password(
        compose: dict[str, Any]) -> None:
    """Issue 34 item 7: Grafana (admin/admin), Prometheus and the load balancer were published on every interface."""
    published = [str(p) for svc in compose["services"].values() for p in svc.get("ports") or ()]
    assert published and all(interpolate(p, {}).startswith("127.0.0.1:") for p in published), published
    assert all(interpolate(p, {"THINKGATE_BIND": "0.0.0.0"}).startswith("0.0.0.0:") for p in published)
    password = str(compose["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"])
    with pytest.raises(KeyError, match="GRAFANA_ADMIN_PASSWORD"):
        interpolate(password, {})
    assert interpolate(password, {"GRAFANA_ADMIN_PASSWORD": "p4ss"}) == "p4ss"

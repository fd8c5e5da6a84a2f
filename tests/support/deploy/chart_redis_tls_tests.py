"""The chart's ``redis.tls`` values: a Secret with the CA bundle (and a client certificate) mounted read-only, the
Redis URL naming the files, the chart's refusals, and, end to end, a gateway started with exactly the URL the chart
renders (the Secret's files where the chart mounts them) recording into a redis-server that speaks TLS only and asks
for client certificates."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.process_fixtures import GatewayFactory, Sim
from tests.redis_fixtures import start_tls
from tests.support.deploy.chart_tests import SECRET, container_env_resolved, helm, one, render
from tests.tls_certs import TlsFiles

KEY = "sk-ant-api03-chart-redis-tls-key-0123456789"
TLS = {"existingSecret": "redis-tls"}


def rendered(redis: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(the container's environment, its pod spec) for these ``redis`` values."""
    out = render({**SECRET, "redis": redis})
    pod = one(out, "Deployment")["spec"]["template"]["spec"]
    return container_env_resolved(out), pod


def test_the_secret_is_mounted_read_only_and_the_url_names_its_files() -> None:
    env, pod = rendered({"url": "rediss://redis.example:6380/0", "tls": TLS})
    assert env["GATEWAY_REDIS_URL"] == "rediss://redis.example:6380/0?ssl_ca_certs=/etc/thinkgate/redis-tls/ca.crt"
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "redis-tls"]
    assert mount == {"name": "redis-tls", "mountPath": "/etc/thinkgate/redis-tls", "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "redis-tls"]
    assert volume["secret"] == {"secretName": "redis-tls", "defaultMode": 0o440}  # the group (fsGroup) reads the key


def test_client_certificates_a_password_and_a_query_of_its_own() -> None:
    env, _ = rendered({"url": "rediss://redis.example:6380/0?ssl_check_hostname=true", "password": "pa55word",
                       "tls": {**TLS, "certKey": "tls.crt", "keyKey": "tls.key", "mountPath": "/var/run/redis"}})
    assert env["GATEWAY_REDIS_URL"] == (
        "rediss://:pa55word@redis.example:6380/0?ssl_check_hostname=true&ssl_ca_certs=/var/run/redis/ca.crt"
        "&ssl_certfile=/var/run/redis/tls.crt&ssl_keyfile=/var/run/redis/tls.key")


def test_without_tls_values_nothing_is_mounted() -> None:
    env, pod = rendered({"url": "rediss://redis.example:6380/0"})
    assert env["GATEWAY_REDIS_URL"] == "rediss://redis.example:6380/0"  # the system CAs
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]


@pytest.mark.parametrize(("redis", "says"), [
    ({"url": "redis://redis.example:6379/0", "tls": TLS}, "needs a rediss:// or rediss\\+cluster:// redis.url"),
    ({"url": "", "tls": TLS}, "needs a rediss://"),
    ({"url": "rediss://r:6380/0", "tls": {**TLS, "certKey": "tls.crt"}}, "both .* or neither"),
])
def test_the_chart_refuses_tls_it_cannot_use(redis: dict[str, Any], says: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=says):
        render({**SECRET, "redis": redis, "allowEmbeddedStoreWithReplicas": True})


@pytest.mark.parametrize("tls", [{"caKey": "../ca.crt"}, {"mountPath": "relative"}, {"mountPath": "/x?y=1"}])
def test_the_schema_refuses_keys_and_paths_that_would_break_the_url(tls: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render({**SECRET, "redis": {"url": "rediss://r:6380/0", "tls": {**TLS, **tls}}})


def test_a_gateway_with_the_charts_url_records_into_a_redis_that_asks_for_client_certificates(
        sim: Sim, gateways: GatewayFactory, tls_files: TlsFiles, tmp_path: Path) -> None:
    mounted = tmp_path / "redis-tls"  # what Kubernetes makes of the Secret
    mounted.mkdir()
    secret = {"ca.crt": tls_files.ca, "tls.crt": tls_files.client_cert, "tls.key": tls_files.client_key}
    for key, source in secret.items():
        shutil.copy(source, mounted / key)
    server = start_tls(tls_files, auth_clients=True)
    try:
        env, _ = rendered({"url": f"rediss://127.0.0.1:{server.port}/0",
                           "tls": {**TLS, "certKey": "tls.crt", "keyKey": "tls.key", "mountPath": str(mounted)}})
        gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": env["GATEWAY_REDIS_URL"], "GATEWAY_SECRET": env[
            "GATEWAY_SECRET"], "GATEWAY_LOG_LEVEL": "INFO"})
        with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
            client.messages.create(model="claude-opus-4-5", max_tokens=1024,
                                   messages=[{"role": "user", "content": "recorded over TLS"}])
        gw.stop()
        with server.client() as admin:
            assert admin.dbsize() > 0, "the turn did not reach the TLS Redis"
        assert "not reachable" not in gw.log() and "SSL" not in gw.log(), gw.log()[-2000:]
    finally:
        server.cleanup()

"""What real ``thinkgate`` processes say: the startup banner (store and upstreams), one "Running on" line per
listener, ``--version``, and an unreachable upstream named with its URL in the answer and in the access line."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import anthropic
import openai
import pytest

from tests.process_fixtures import GatewayFactory, Sim, free_port

SECRET = "startup-test-secret-0123456789abcdef"  # >= 32 bytes


def banner(log: str) -> str:
    return next(line for line in log.splitlines() if "starting thinkgate" in line)


def test_banner_names_the_redis_store_and_every_upstream(gateways: GatewayFactory, redis_url: str, sim: Sim) -> None:
    gw = gateways.start(sim.url, {
        "GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": SECRET,
        "GATEWAY_GEMINI_BASE_URL": sim.url + "/vertex",
        "GATEWAY_ROUTES": f"deepseek-=deepseek@{sim.url}/deepseek/v1"})
    line = banner(gw.log())
    host, port, db = re.fullmatch(r"redis://([^:/]+):(\d+)/(\d+)", redis_url).groups()  # type: ignore[union-attr]
    assert f"store: backend=redis scheme=redis host={host} port={port} db={db};" in line
    assert line.endswith(f"upstreams: anthropic={sim.url}, gemini={sim.url}/vertex, deepseek={sim.url}/deepseek/v1")
    assert f"thinkgate {metadata.version('thinkgate')} on http://127.0.0.1:{gw.port}" in line
    # issue 34 item 11: the banner is the few facts an operator needs, not the whole settings dump (~1,500 chars)
    assert len(line) < 400 and "redis_url" not in line and "settings:" not in gw.log()
    assert SECRET not in gw.log()
    assert gw.log().count("Running on") == 1


def test_every_setting_is_logged_at_debug_level_without_secrets(gateways: GatewayFactory, redis_url: str,
                                                                 sim: Sim) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_LOG_LEVEL": "DEBUG", "GATEWAY_REDIS_URL": redis_url,
                                  "GATEWAY_SECRET": SECRET})
    line = next(line for line in gw.log().splitlines() if "settings: Settings(" in line)
    assert "redis_url=<set>" in line and "max_body_bytes=" in line
    assert SECRET not in gw.log()


def test_the_simulator_says_running_once(sim: Sim) -> None:
    lines = [line for line in sim.sp.log().splitlines() if "Running on" in line]
    assert len(lines) == 1 and f"http://127.0.0.1:{sim.sp.port}" in lines[0]


@pytest.mark.process
def test_version_of_the_installed_command() -> None:
    thinkgate = Path(sys.executable).parent / "thinkgate"
    done = subprocess.run([str(thinkgate), "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"thinkgate {metadata.version('thinkgate')}"


def test_unreachable_upstream_is_named_with_its_url(gateways: GatewayFactory) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = gateways.start(closed, {"GATEWAY_LOG_LEVEL": "INFO",
                                 "GATEWAY_ROUTES": f"deepseek-=deepseek@{closed}/deepseek/v1"})
    with anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test-key", max_retries=0) as client, \
            pytest.raises(anthropic.APIStatusError) as err:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=16,
                               messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 502
    assert f"could not reach upstream anthropic at {closed}: ClientConnectorError" in err.value.message
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test-key", max_retries=0) as chat, \
            pytest.raises(openai.APIStatusError) as err2:
        chat.chat.completions.create(model="deepseek-reasoner", messages=[{"role": "user", "content": "hi"}])
    assert err2.value.status_code == 502
    assert f"could not reach upstream deepseek at {closed}/deepseek/v1" in err2.value.message
    gw.stop()  # each access line is written just after its answer went out: once drained, all are there
    access = [line for line in gw.log_lines() if "thinkgate.access" in line]
    assert [re.search(r" upstream=(\w+) ", line)[1] for line in access] == ["anthropic", "deepseek"]  # type: ignore[index]
    assert all(" status=502 " in line for line in access)

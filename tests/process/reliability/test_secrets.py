"""Key material: no default secret with shared state; rotation keeps running conversations alive."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from gateway.app.settings import DEFAULT_SECRET
from tests.process_fixtures import GatewayFactory, Sim, free_port
from tests.redis_fixtures import RedisServer

KEY = {"x-api-key": "sk-rotation", "anthropic-beta": "interleaved-thinking-2025-05-14"}


@pytest.mark.parametrize("secret", [None, DEFAULT_SECRET], ids=["unset", "explicit dev default"])
def test_refuses_default_secret_with_redis(redis_server: RedisServer, secret: str | None) -> None:
    """Unset or spelled out, the development default is refused once state is shared: exit 2 with a
    message naming both settings, and the default itself never echoed."""
    env = {**os.environ, "GATEWAY_REDIS_URL": redis_server.url}
    env.pop("GATEWAY_SECRET", None)
    if secret is not None:
        env["GATEWAY_SECRET"] = secret
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", str(free_port())], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, (out.returncode, out.stderr[-500:])
    assert "GATEWAY_SECRET must be set to a private value when GATEWAY_REDIS_URL is set" in out.stderr
    assert DEFAULT_SECRET not in out.stderr + out.stdout and "Traceback" not in out.stderr


def test_a_private_secret_with_redis_starts(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> None:
    """The refusal above is about the default only: the same command with a private secret serves."""
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                  "GATEWAY_SECRET": DEFAULT_SECRET + "-private-value"})
    assert httpx.get(gw.url + "/readyz").json()["store"]["ok"] is True


def _body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "messages": messages}


def _step(url: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    # The client strips signatures: only records can bring them back.
    sent = [{**m, "content": [{k: v for k, v in b.items() if k != "signature"} for b in m["content"]]}
            if m["role"] == "assistant" else m for m in history]
    r = httpx.post(url + "/v1/messages", json=_body(sent), headers=KEY)
    assert r.status_code == 200, r.text
    answer = r.json()
    history += [{"role": "assistant", "content": answer["content"]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}
                                             for b in answer["content"] if b["type"] == "tool_use"]}]
    return answer


def test_rotation_continues_conversations_recorded_under_the_previous_secret(
        sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> None:
    redis_server.flush()
    old = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                   "GATEWAY_SECRET": "old-secret-0001-0123456789abcdef"})
    rotated = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                       "GATEWAY_SECRET": "new-secret-0002-0123456789abcdef",
                                       "GATEWAY_PREVIOUS_SECRET": "old-secret-0001-0123456789abcdef"})
    new_only = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url,
                                        "GATEWAY_SECRET": "new-secret-0002-0123456789abcdef"})
    before = sum(sim.stats()["rejections"].values())

    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=3]] rotate me"}]
    _step(old.url, history)                       # recorded under the old prefix
    answer = _step(rotated.url, history)           # found under the previous secret: thinking kept
    assert answer["content"][0]["type"] == "thinking"
    assert "thinking" in sim.last()["body"]

    # Without the previous secret the same replay cannot be verified: served, but thinking is off.
    fresh: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=3]] rotate me too"}]
    _step(old.url, fresh)
    _step(new_only.url, fresh)
    assert "thinking" not in sim.last()["body"]
    assert sum(sim.stats()["rejections"].values()) == before

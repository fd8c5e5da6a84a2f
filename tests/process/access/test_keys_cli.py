"""``thinkgate keys`` and ``thinkgate usage`` against a real redis-server (issue 35 item 1): a key is created (shown
once), listed (never shown), updated, revoked; without GATEWAY_REDIS_URL the command says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

ENV = {"GATEWAY_SECRET": "keys-cli-secret-0123456789abcdef01"}


def thinkgate(redis_url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENV}
    env.pop("GATEWAY_REDIS_URL", None)
    if redis_url:
        env["GATEWAY_REDIS_URL"] = redis_url
    return subprocess.run([sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def _json(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_keys_are_created_listed_updated_and_revoked(redis_url: str) -> None:
    made = _json(thinkgate(redis_url, "keys", "create", "--name", "cli-alice", "--models", "claude-*,gemini-*",
                           "--rpm", "60", "--budget-usd", "50/month"))
    assert made["key"].startswith("tgk_") and made["models"] == ["claude-*", "gemini-*"] and made["rpm"] == 60
    assert made["budget_micros"] == 50_000_000 and made["budget_period"] == "month"
    listed = thinkgate(redis_url, "keys", "list")
    assert made["key"] not in listed.stdout and "cli-alice" in [k["name"] for k in _json(listed)["keys"]]
    assert _json(thinkgate(redis_url, "keys", "update", "--name", "cli-alice", "--rpm", "5"))["rpm"] == 5
    assert _json(thinkgate(redis_url, "keys", "revoke", "--name", "cli-alice"))["revoked"] is True
    again = thinkgate(redis_url, "keys", "create", "--name", "cli-alice")
    assert again.returncode == 1 and "a key named cli-alice exists" in again.stderr
    assert _json(thinkgate(redis_url, "usage", "--days", "3", "--name", "cli-alice")) == {
        "days": 3, "usage": {"cli-alice": {}}}


@pytest.mark.process
def test_without_a_shared_store_the_command_says_so() -> None:
    out = thinkgate(None, "keys", "list")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "GATEWAY_REDIS_URL" in out.stderr

"""Issue 36's real client: Claude Code itself (npm ``@anthropic-ai/claude-code``, ``claude -p``) pointed at thinkgate
with a Bedrock route (``us.anthropic.=bedrock@us-east-1``): its tool loop runs on Bedrock (InvokeModel, signed with
the gateway's AWS credentials, answered in event-stream framing by the strict simulator) and completes with zero
4xx; every replayed turn reaches Bedrock with its thinking. Claude Code is found as in
``tests/process/e2e/test_claude_code.py``
(without it the test skips and says so)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.process.e2e.test_claude_code import claude  # noqa: F401  (the fixture)
from tests.process_fixtures import GatewayFactory, Sim, metric_sum
from tests.support.cloud.helpers import BEDROCK_CLAUDE, KEY_ID, cloud_env


@pytest.mark.timeout(300)
def test_claude_code_tool_loop_on_a_bedrock_route(claude: list[str], sim: Sim,  # noqa: F811
                                                   gateways: GatewayFactory, tmp_path: Path) -> None:
    gw = gateways.start(sim.url, cloud_env(sim, tmp_path))
    before = sim.stats()
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "ANTHROPIC_BASE_URL": gw.url,
               "ANTHROPIC_API_KEY": "sk-ant-claude-code-bedrock-0123456789", "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "ANTHROPIC_SMALL_FAST_MODEL": BEDROCK_CLAUDE}
        run = subprocess.run([*claude, "-p", "Check the build [[sim:tools=2]] [[sim:conv=claude-code-bedrock]]",
                              "--model", BEDROCK_CLAUDE, "--disallowedTools", "Agent", "--max-turns", "6",
                              "--output-format", "json"],
                             cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    out = json.loads(run.stdout)
    assert out["is_error"] is False and out["subtype"] == "success", out
    assert out["result"].startswith("Final answer after 2 tool rounds"), out["result"]
    after = sim.stats()
    assert after["rejections"] == before["rejections"] and after["unauthorized"] == before["unauthorized"]
    assert metric_sum(gw, "gateway_requests_total", status="4xx") == 0
    assert metric_sum(gw, "gateway_requests_total", upstream="bedrock", status="2xx") >= 3
    last = sim.last()
    assert last["path"].startswith("/model/us.anthropic.claude-sonnet-4-5") and "model" not in last["body"]
    assert last["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
    assert all(m["content"][0]["type"] == "thinking" for m in last["body"]["messages"] if m["role"] == "assistant")

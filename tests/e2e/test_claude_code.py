"""Claude Code itself (npm ``@anthropic-ai/claude-code``, ``claude -p``) through thinkgate to the strict simulator, on a
model that binds its thinking blocks to their prefix (``claude-opus-5-5``).

The simulator's scenario marker in the prompt makes the model call a tool for two rounds (the first tool Claude Code
offers: ``Agent`` is disallowed, so it is ``Bash``, whose call Claude Code refuses in ``-p`` mode without a permission:
the refusal is the tool result), then answer. The run must end in success with no 4xx anywhere: Claude Code's own
mid-conversation ``role: "system"`` message and betas pass, and every replayed block keeps its binding. Run against
one gateway, and against the deployment's HAProxy round-robin over three replicas on one real redis-server (each
replica serves a request of the loop, so each turn is restored from what another replica recorded).

Claude Code is found as ``$THINKGATE_CLAUDE_CODE`` (a path to its ``claude`` binary), ``claude`` on ``PATH``, or the
platform binary under ``npm root -g`` (a global ``npm install -g @anthropic-ai/claude-code`` whose postinstall did not
run); without it the test skips and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from tests.deploy.test_haproxy import HAProxy, _all_up, wait_for
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer

MODEL = "claude-opus-5-5"
KEY = "sk-ant-claude-code-test-0123456789abcdef"


def _candidates() -> Iterator[list[str]]:
    if path := os.environ.get("THINKGATE_CLAUDE_CODE"):
        yield [path]
    if path := shutil.which("claude"):
        yield [path]
    npm = shutil.which("npm")
    if npm:
        try:
            root = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return
        for arch in ("linux-x64", "linux-arm64", "linux-x64-musl", "linux-arm64-musl", "darwin-arm64", "darwin-x64"):
            yield [os.path.join(root, "@anthropic-ai", f"claude-code-{arch}", "claude")]


@pytest.fixture(scope="module")
def claude() -> list[str]:
    for cmd in _candidates():
        try:
            out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and "Claude Code" in out.stdout:
            return cmd
    pytest.skip("Claude Code is not installed (npm install -g @anthropic-ai/claude-code, or set THINKGATE_CLAUDE_CODE "
                "to its claude binary)")


@pytest.fixture(params=["one-gateway", "haproxy-3-replicas-redis"])
def served_by(request: pytest.FixtureRequest, sim: Sim, gateways: GatewayFactory,
              redis_server: RedisServer) -> Iterator[tuple[str, list[ServerProcess]]]:
    """The URL Claude Code is pointed at and the gateways behind it: one gateway (embedded store), or the deployment's
    HAProxy (``deploy/haproxy.cfg``, as ``tests/deploy/test_haproxy.py`` runs it) round-robin over three replicas on
    one real redis-server."""
    if request.param == "one-gateway":
        sp = gateways.start(sim.url)
        yield sp.url, [sp]
        sp.stop()
        return
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (Debian package haproxy)")
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "claude-code-test-secret-0123456789ab"}
    replicas = [gateways.start(sim.url, env) for _ in range(3)]
    lb = HAProxy(replicas)
    try:
        wait_for(lambda: lb.proc.poll() is None and _all_up(lb), "every replica UP in HAProxy")
        yield lb.url, replicas
    finally:
        lb.close()
        for sp in replicas:
            sp.stop()


def test_claude_code_tool_loop_completes_without_4xx(claude: list[str], sim: Sim,
                                                     served_by: tuple[str, list[ServerProcess]]) -> None:
    url, gateways = served_by
    before = sim.stats()
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "ANTHROPIC_BASE_URL": url,
               "ANTHROPIC_API_KEY": KEY, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
        run = subprocess.run([*claude, "-p", "Check the build [[sim:tools=2]]", "--model", MODEL,
                              "--disallowedTools", "Agent", "--max-turns", "6", "--output-format", "json"],
                             cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["is_error"] is False and out["subtype"] == "success"
    assert out["result"].startswith("Final answer after 2 tool rounds"), out["result"]
    after = sim.stats()
    assert after["rejections"] == before["rejections"]
    assert after["accepted"] - before["accepted"] >= 3  # two tool rounds and the answer
    assert sum(metric_sum(sp, "gateway_requests_total", status="4xx") for sp in gateways) == 0
    served = [metric_sum(sp, "gateway_requests_total", status="2xx") for sp in gateways]
    assert sum(served) >= 3 and sum(1 for n in served if n) == min(len(gateways), 3)  # round robin: each replica
    last = sim.last()["body"]
    assert last["model"] == MODEL and all(m["content"][0]["type"] == "thinking"
                                          for m in last["messages"] if m["role"] == "assistant")

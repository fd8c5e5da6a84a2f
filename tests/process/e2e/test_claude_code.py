"""Claude Code itself (npm ``@anthropic-ai/claude-code``, ``claude -p``) through thinkgate to the strict simulator, on a
model that binds its thinking blocks to their prefix (``claude-opus-5-5``).

The simulator's scenario marker in the prompt makes the model call a tool for two rounds (the first tool Claude Code
offers: ``Agent`` is disallowed, so it is ``Bash``, whose call Claude Code refuses in ``-p`` mode without a permission:
the refusal is the tool result), then answer. The run must end in success with no 4xx anywhere: Claude Code's own
mid-conversation ``role: "system"`` message and betas pass, and every replayed block keeps its binding. Run against
one gateway, and against the deployment's HAProxy round-robin over three replicas on one real redis-server (each
replica serves a request of the loop, so each turn is restored from what another replica recorded).

Then issue 24's two IDE-style clients, made of Claude Code itself: one conversation over two ``claude -p`` invocations
(the second ``--continue``s the first), each invocation sending another system prompt, or the second adding an MCP
server's tool (see the comment above ``CLOCK_MCP`` for how Claude Code is made to send the change as such). Straight
to the simulator the first request after the change is the binding 400; through two gateway replicas on one real
redis-server (one invocation each) there is no 4xx, with the prefix kept (every earlier thinking block reaches the
upstream on every turn) and with ``GATEWAY_KEEP_PREFIX=false`` (only the thinking produced under the old prefix is
dropped).

Claude Code is found as ``$THINKGATE_CLAUDE_CODE`` (a path to its ``claude`` binary), ``claude`` on ``PATH``, or the
platform binary under ``npm root -g`` (a global ``npm install -g @anthropic-ai/claude-code`` whose postinstall did not
run); without it the test skips and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.process.deploy.test_haproxy import HAProxy, _all_up, wait_for
from tests.process.e2e.test_binding_gateway import thinking_blocks
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.reliability.recording_proxy import Exchange, RecordingProxy, recording_proxy

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
    HAProxy (``deploy/haproxy.cfg``, as ``tests/process/deploy/test_haproxy.py`` runs it) round-robin over three
    replicas on
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


# --- One conversation across ``claude -p`` invocations whose system prompt or tool set changes (issue 24's clients,
# for real) ---
#
# Claude Code 2.1.332 keeps a bound model's prefix stable on its own by default: a resumed session (``--continue``) is
# sent with the system prompt recorded on its first request (``systemPromptSnapshot``, on by default: a new
# ``--append-system-prompt`` / ``--system-prompt`` on the resumed run is not sent), and a tool that appears later
# (``--tools``, an MCP server from ``--mcp-config``) goes as ``defer_loading`` plus a ``tool_addition`` system message.
# Made to behave as the IDE clients of the issue: ``--system-prompt-snapshot off`` (rendered fresh on every request,
# so each invocation's ``--append-system-prompt`` is sent as the top-level system), and told the model takes neither
# mid-conversation form (its capability override ``CLAUDE_CODE_MODEL_CAPABILITIES``), so a new tool goes straight into
# ``tools``. Either way the prefix of every earlier thinking block changes, which is the case under test.

CLOCK_MCP = '''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"].get("protocolVersion", "2024-11-05"), "capabilities": {"tools": {}},
                  "serverInfo": {"name": "clock", "version": "1.0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "now", "description": "The current time.",
                             "inputSchema": {"type": "object", "properties": {}}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "12:00"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''
ADDED = "mcp__clock__now"  # the MCP server's tool as Claude Code names it
NO_MID_CONVERSATION_FORMS = f"{MODEL}=-mid_conv_system,-mid_conv_tool_change"
SECRET = "claude-code-test-secret-0123456789ab"


def _converse(claude: list[str], urls: list[str], change: str) -> list[dict[str, Any]]:
    """Two ``claude -p`` invocations of one conversation (the second ``--continue``s the first in the same HOME and
    project dir), invocation n pointed at ``urls[n]``; ``change``: ``system`` (each invocation appends its own line,
    the current time, to the system prompt) or ``tools`` (the second adds an MCP server's tool). Each asks for two
    tool rounds (Bash, refused in ``-p`` mode: the refusal is the tool result), then an answer.
    Claude Code's JSON results."""
    results = []
    with tempfile.TemporaryDirectory() as home:
        server = os.path.join(home, "clock_mcp.py")
        with open(server, "w") as f:
            f.write(CLOCK_MCP)
        mcp = json.dumps({"mcpServers": {"clock": {"command": sys.executable, "args": [server]}}})
        invocations = [["-p", "Check the build [[sim:tools=2]]"], ["--continue", "-p", "Check it again"]]
        for n, args in enumerate(invocations):
            if change == "system":
                args += ["--system-prompt-snapshot", "off", "--append-system-prompt", f"Current time: 12:0{n}."]
            elif n:
                args += ["--mcp-config", mcp]
        for url, args in zip(urls, invocations, strict=True):
            env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "ANTHROPIC_BASE_URL": url,
                   "ANTHROPIC_API_KEY": KEY, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                   "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MODEL_CAPABILITIES": NO_MID_CONVERSATION_FORMS}
            run = subprocess.run([*claude, *args, "--model", MODEL, "--tools", "Bash", "--max-turns", "6",
                                  "--output-format", "json"],
                                 cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=240)
            assert run.returncode == 0, run.stderr[-2000:]
            results.append(json.loads(run.stdout))
    return results


def _messages_requests(proxy: RecordingProxy) -> list[Exchange]:
    return [e for e in proxy.exchanges if e.path.startswith("/v1/messages") and "count_tokens" not in e.path]


def _tool_names(body: dict[str, Any], *, deferred: bool = False) -> list[str]:
    return [t["name"] for t in body["tools"] if bool(t.get("defer_loading")) == deferred]


def _turn_start(body: dict[str, Any]) -> int:
    """Index just after the last user message that opens a turn (one without tool results)."""
    opens = [i for i, m in enumerate(body["messages"]) if m["role"] == "user" and not (
        isinstance(m["content"], list) and any(b["type"] == "tool_result" for b in m["content"]))]
    return opens[-1] + 1


def _answered(results: list[dict[str, Any]]) -> None:
    for out in results:
        assert out["is_error"] is False and out["subtype"] == "success"
        assert out["result"].startswith("Final answer after 2 tool rounds"), out["result"]


@pytest.fixture()
def proxy(sim: Sim) -> Iterator[RecordingProxy]:
    with recording_proxy(sim.url) as p:
        yield p


CHANGES = [pytest.param("system", id="system-prompt-changes"), pytest.param("tools", id="tool-added")]


@pytest.mark.parametrize("change", CHANGES)
def test_claude_code_changing_its_prefix_straight_to_the_simulator_gets_the_binding_400(
        claude: list[str], sim: Sim, proxy: RecordingProxy, change: str) -> None:
    """The client really changes its system prompt or its tool set mid-conversation and replays its earlier thinking:
    the simulator answers the binding 400 (rule 15), and Claude Code gets past it only by resending without its
    thinking."""
    before = sim.stats()["rejections"].get("15", 0)
    _answered(_converse(claude, [proxy.url, proxy.url], change))
    sent = _messages_requests(proxy)
    assert [e.status for e in sent] == [200, 200, 200, 400, 200, 200, 200]
    assert sim.stats()["rejections"].get("15", 0) - before == 1
    first, rejected, retried = sent[0].body, sent[3].body, sent[4].body
    assert first["tools"] == sent[2].body["tools"] and first["system"] == sent[2].body["system"]  # one invocation
    if change == "system":  # the new line in the top-level system prompt, the tools as they were
        assert first["system"][-1]["text"].endswith("Current time: 12:00.")
        assert rejected["system"][-1]["text"].endswith("Current time: 12:01.")
        assert rejected["tools"] == first["tools"]
    else:  # the tool added to tools, the system prompt as it was
        assert _tool_names(first) == ["Bash"] and _tool_names(rejected) == ["Bash", ADDED]
        assert rejected["system"] == first["system"]
    assert thinking_blocks(rejected) == 3  # the replayed history carries the first invocation's thinking
    assert thinking_blocks(retried) == 0  # what got past the 400: the history without its thinking


@pytest.fixture(params=["keep-prefix", "keep-prefix-off"])
def replicas(request: pytest.FixtureRequest, proxy: RecordingProxy, gateways: GatewayFactory,
             redis_server: RedisServer) -> Iterator[tuple[str, list[ServerProcess]]]:
    """Two gateway replicas on one real redis-server in front of the recording proxy: prefix kept (the default), or
    ``GATEWAY_KEEP_PREFIX=false`` (degraded: stale blocks removed, or ``drop_block``)."""
    redis_server.flush()
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": SECRET}
    if request.param == "keep-prefix-off":
        env["GATEWAY_KEEP_PREFIX"] = "false"
    pair = [gateways.start(proxy.url, env) for _ in range(2)]
    try:
        yield request.param, pair
    finally:
        for sp in pair:
            sp.stop()


@pytest.mark.parametrize("change", CHANGES)
def test_claude_code_changing_its_prefix_through_two_replicas_completes_without_4xx(
        claude: list[str], sim: Sim, proxy: RecordingProxy,
        replicas: tuple[str, list[ServerProcess]], change: str) -> None:
    """The same client through thinkgate, its first invocation served by one replica and its second (restored from
    what the first recorded in Redis) by the other: no 4xx anywhere, and every earlier thinking block reaches the
    upstream on every turn (kept prefix: the recorded system prompt with the new line as a mid-conversation system
    message, the recorded tool set with a ``tool_addition``); with the prefix not kept, only the thinking produced
    under the old prefix is dropped (by thinkgate, from the front of the history)."""
    mode, pair = replicas
    before = sim.stats()["rejections"]
    _answered(_converse(claude, [sp.url for sp in pair], change))
    sent = _messages_requests(proxy)
    assert [e.status for e in sent] == [200] * 6  # no retry: nothing was rejected
    assert sim.stats()["rejections"] == before
    assert sum(metric_sum(sp, "gateway_requests_total", status="4xx") for sp in pair) == 0
    assert all(metric_sum(sp, "gateway_requests_total", status="2xx") == 3 for sp in pair)  # each replica served one
    bodies = [e.body for e in sent]
    assert all("block_binding" not in b["thinking"] for b in bodies)  # no request needed the upstream to drop
    # every answer of the conversation thinks: each assistant message of the current invocation's turn reaches the
    # upstream with its thinking first
    assert all(m["content"][0]["type"] == "thinking" for b in bodies
               for m in b["messages"][_turn_start(b):] if m["role"] == "assistant")
    inserted = [[b for m in body["messages"] if m["role"] == "system" and isinstance(m["content"], list)
                 for b in m["content"] if b["type"] in ("text", "tool_addition")] for body in bodies]
    if mode == "keep-prefix":
        assert [thinking_blocks(b) for b in bodies] == [0, 1, 2, 3, 4, 5]  # and every earlier one, on every turn
        assert all(b["system"] == bodies[0]["system"] and _tool_names(b) == ["Bash"] for b in bodies)  # as recorded
        kind = "system_message" if change == "system" else "tool_changes"
        if change == "system":  # the new line where the client changed it, as a system message
            # (the client's whole new system prompt, as text blocks, sent once and then put back in place)
            assert bodies[0]["system"][-1]["text"].endswith("Current time: 12:00.")
            assert inserted[3][-1]["text"].endswith("Current time: 12:01.")
            assert inserted[3] == inserted[4] == inserted[5]
            assert all(b["type"] == "text" for b in inserted[3])
            assert all(_tool_names(b, deferred=True) == [] for b in bodies)
        else:  # the added tool: deferred, and added where the client added it
            assert all(ins == [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": ADDED}}]
                       for ins in inserted[3:])
            assert all(_tool_names(b, deferred=True) == [ADDED] for b in bodies[3:])
        assert inserted[:3] == [[], [], []]
        # the change once, where the client made it; put back in place on the two requests after it
        assert sum(metric_sum(sp, "gateway_prefix_rewrites_total", kind=kind) for sp in pair) == 1
        assert sum(metric_sum(sp, "gateway_prefix_rewrites_total", kind="reinserted") for sp in pair) == 2
    else:  # GATEWAY_KEEP_PREFIX=false: the client's prefix as sent; the first invocation's thinking, produced under
        # the old prefix and at the front of the history, removed by thinkgate (the chain rule allows it); the second
        # invocation's own thinking kept
        if change == "system":
            assert all(b["system"][-1]["text"].endswith("Current time: 12:01.") for b in bodies[3:])
        else:
            assert all(_tool_names(b) == ["Bash", ADDED] for b in bodies[3:])
        assert [thinking_blocks(b) for b in bodies] == [0, 1, 2, 0, 1, 2]
        assert inserted == [[]] * 6
        assert sum(metric_sum(sp, "gateway_prefix_rewrites_total", kind="stripped") for sp in pair) == 3

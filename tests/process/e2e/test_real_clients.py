"""Issue 31 item 5: Gemini CLI (npm ``@google/gemini-cli``, the Gemini API with ``GOOGLE_GEMINI_BASE_URL``) and
OpenCode (npm ``opencode-ai``: its Anthropic provider and an OpenAI-compatible provider, each with a custom
``baseURL``), next to Claude Code (``test_claude_code.py``) and Codex (``tests/process/responses/test_codex.py``).

Each runs a three-round shell-tool loop, headless, against the strict simulator: the scenario markers in the prompt
make the model call the client's own shell tool (``run_shell_command``, ``bash``) with a command that prints a mark,
three times, then answer. Through thinkgate the loop runs on two replicas on one real redis-server behind the
deployment's HAProxy round-robin (each replica serves part of every loop, so each turn is restored from what the
other recorded), and must end with the final answer, every command's output sent back and no 4xx anywhere.
Straight to the simulator, the same run shows what the gateway saves: OpenCode's OpenAI-compatible provider on the
OpenRouter-style route drops ``reasoning_details`` from the assistant messages it replays, and Anthropic's rule
(the loop's assistant message must start with its thinking) rejects the second request; Gemini CLI and OpenCode's
Anthropic provider replay what they were given and pass on their own.

The clients are installed from the npm registry into a temporary directory once per session (``THINKGATE_GEMINI_CLI``
and ``THINKGATE_OPENCODE`` name installed binaries instead); without npm or the registry the tests skip and say why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.process.deploy.test_haproxy import HAProxy, _all_up, wait_for
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.gemini.helpers import gateway_env

MARK = "thinkgate-shell-ok"
PROMPT = f"[[sim:tools=3]] [[sim:arg=echo {MARK}]] run the checks"
FINAL = "Final answer after 3 tool rounds"
PACKAGES = {"gemini": ("@google/gemini-cli", "THINKGATE_GEMINI_CLI"), "opencode": ("opencode-ai", "THINKGATE_OPENCODE")}
GEMINI_MODEL = "gemini-3-pro-preview"
CLAUDE = "claude-opus-4-5"
OPENROUTER_CLAUDE = "anthropic/claude-opus-4.5"


@pytest.fixture(scope="session")
def clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each client's binary: given in the environment, else installed from the npm registry."""
    given = {name: os.environ[env] for name, (_, env) in PACKAGES.items() if os.environ.get(env)}
    missing = [pkg for name, (pkg, _) in PACKAGES.items() if name not in given]
    if missing:
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: the real clients cannot be installed here")
        where = tmp_path_factory.mktemp("real-clients-npm")
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", *missing], cwd=where, capture_output=True,
                              text=True, timeout=400, check=False)
        if done.returncode != 0:
            pytest.skip(f"npm install {' '.join(missing)} failed (no registry access?): {done.stderr.strip()[-400:]}")
        for name in PACKAGES:
            given.setdefault(name, str(where / "node_modules" / ".bin" / name))
    return given


@dataclass
class Target:
    """Where a client is pointed: the load balancer in front of the replicas, or the simulator itself."""

    url: str
    replicas: list[ServerProcess]

    def via(self, route: str) -> str:
        """A client's base URL for an upstream route (``anthropic``, ``openrouter``): thinkgate serves both at
        ``/v1``; straight, the simulator's profile."""
        return self.url + ("/v1" if self.replicas or route == "anthropic" else "/openrouter/api/v1")


@pytest.fixture(scope="module")
def two_replicas(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[Target]:
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (Debian package haproxy)")
    env = gateway_env(sim, GATEWAY_REDIS_URL=redis_server.url, GATEWAY_SECRET="real-clients-secret-0123456789abcd")
    replicas = [gateways.start(sim.url, env) for _ in range(2)]
    lb = HAProxy(replicas)
    try:
        wait_for(lambda: lb.proc.poll() is None and _all_up(lb), "both replicas UP in HAProxy")
        yield Target(lb.url, replicas)
    finally:
        lb.close()
        for sp in replicas:
            sp.stop()


@pytest.fixture(params=["two-replicas", "straight"])
def target(request: pytest.FixtureRequest, sim: Sim) -> Target:
    if request.param == "straight":
        return Target(sim.url, [])
    t: Target = request.getfixturevalue("two_replicas")
    return t


def _run(argv: list[str], home: Path, env: dict[str, str], files: dict[str, str],
         until: Callable[[], bool] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in a fresh working directory under ``home`` holding ``files`` (path -> text, relative to ``home``), to
    its end, or stopped (its whole process group) once ``until`` holds."""
    for name, text in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (home / "work").mkdir(parents=True, exist_ok=True)
    base = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "NO_COLOR": "1", "CI": "1"}
    out, err = home / "stdout", home / "stderr"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(argv, cwd=home / "work", env={**base, **env}, stdout=o, stderr=e,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while proc.poll() is None and not (until is not None and until()):
                assert time.monotonic() < deadline, f"{argv[0]} did not finish in 240 s"
                time.sleep(0.1)  # polling another process: there is no event to await
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return subprocess.CompletedProcess(argv, proc.returncode, out.read_text(), err.read_text())


def gemini_cli(binary: str, target: Target, home: Path) -> subprocess.CompletedProcess[str]:
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "telemetry": {"enabled": False},
                "privacy": {"usageStatisticsEnabled": False}}
    env = {"GEMINI_API_KEY": "gemini-cli-through-thinkgate", "GOOGLE_GEMINI_BASE_URL": target.url,
           "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    return _run([binary, "-m", GEMINI_MODEL, "-p", f"[[sim:tool=run_shell_command]] {PROMPT}", "--yolo", "-o", "json"],
                home, env, {".gemini/settings.json": json.dumps(settings)})


def opencode(binary: str, target: Target, home: Path, provider: str,
             until: Callable[[], bool] | None = None) -> subprocess.CompletedProcess[str]:
    """OpenCode with thinking on: its Anthropic provider (``anthropic``), or an OpenAI-compatible provider on the
    OpenRouter-style route (``openrouter``)."""
    if provider == "anthropic":
        config: dict[str, Any] = {"anthropic": {
            "options": {"baseURL": target.via("anthropic"), "apiKey": "sk-ant-opencode-through-thinkgate"},
            "models": {CLAUDE: {"options": {"thinking": {"type": "enabled", "budgetTokens": 4000}}}}}}
        model = f"anthropic/{CLAUDE}"
    else:
        config = {"compat": {
            "npm": "@ai-sdk/openai-compatible", "name": "thinkgate",
            "options": {"baseURL": target.via("openrouter"), "apiKey": "sk-or-opencode-through-thinkgate"},
            "models": {OPENROUTER_CLAUDE: {"reasoning": True, "options": {"reasoningEffort": "low"}}}}}
        model = f"compat/{OPENROUTER_CLAUDE}"
    settings = {"permission": {"bash": "allow"}, "provider": config, "share": "disabled", "autoupdate": False}
    return _run([binary, "run", "-m", model, f"[[sim:tool=bash]] {PROMPT}"], home,
                {"OPENCODE_DISABLE_AUTOUPDATE": "1"}, {"work/opencode.json": json.dumps(settings)}, until)


def results(body: dict[str, Any]) -> list[str]:
    """The tool outputs a request sent back (Gemini functionResponse parts, Anthropic tool_result blocks, OpenAI tool
    messages), as JSON text."""
    if "contents" in body:
        return [json.dumps(p["functionResponse"]) for c in body["contents"] for p in c.get("parts", [])
                if "functionResponse" in p]
    out: list[str] = []
    for m in body["messages"]:
        if m["role"] == "tool":
            out.append(json.dumps(m["content"]))
        elif isinstance(m["content"], list):
            out += [json.dumps(b.get("content")) for b in m["content"] if b.get("type") == "tool_result"]
    return out


@dataclass
class Watch:
    """What the simulator and the replicas counted before a run, to read the run's own figures after it."""

    sim: Sim
    target: Target

    def __post_init__(self) -> None:
        self.rejections = dict(self.sim.stats()["rejections"])
        self.answered = [self._served(sp) for sp in self.target.replicas]

    @staticmethod
    def _served(sp: ServerProcess) -> tuple[float, float]:
        return (metric_sum(sp, "gateway_requests_total", status="2xx"),
                metric_sum(sp, "gateway_requests_total", status="4xx"))

    def rejected(self) -> dict[str, int]:
        after = self.sim.stats()["rejections"]
        return {k: v - self.rejections.get(k, 0) for k, v in after.items() if v != self.rejections.get(k, 0)}

    def served(self) -> list[tuple[float, float]]:
        return [(ok - ok0, bad - bad0) for (ok, bad), (ok0, bad0) in
                zip(map(self._served, self.target.replicas), self.answered, strict=True)]


def completed(run: subprocess.CompletedProcess[str], watch: Watch, sim: Sim) -> None:
    """The loop ran to its final answer with every command's output sent back, and nothing was rejected anywhere;
    through thinkgate each replica served part of it."""
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert FINAL in run.stdout, (run.stdout + run.stderr)[-3000:]
    assert watch.rejected() == {}
    outputs = results(sim.last()["body"])
    assert len(outputs) == 3 and all(MARK in r for r in outputs), outputs  # each command ran, its output went back
    if watch.target.replicas:
        served = watch.served()
        assert all(bad == 0 for _, bad in served), served
        assert all(ok >= 1 for ok, _ in served) and sum(ok for ok, _ in served) >= 4, served  # round robin: both


@pytest.mark.timeout(300)
def test_gemini_cli_runs_a_shell_loop(clients: dict[str, str], sim: Sim, target: Target, tmp_path: Path) -> None:
    watch = Watch(sim, target)
    run = gemini_cli(clients["gemini"], target, tmp_path)
    completed(run, watch, sim)
    calls = [p for c in sim.last()["body"]["contents"] for p in c.get("parts", []) if "functionCall" in p]
    assert len(calls) == 3 and all(p["functionCall"]["name"] == "run_shell_command" for p in calls)
    assert all(p.get("thoughtSignature") not in (None, "skip_thought_signature_validator") for p in calls), \
        "each step's own signature went back"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("provider", ["anthropic", "openrouter"])
def test_opencode_runs_a_shell_loop(clients: dict[str, str], sim: Sim, target: Target, tmp_path: Path,
                                    provider: str) -> None:
    watch = Watch(sim, target)
    if provider == "openrouter" and not target.replicas:
        # what thinkgate saves: the client replays its assistant messages without reasoning_details, so the loop's
        # assistant message reaches Anthropic without its thinking (OpenCode retries OpenRouter's "Provider returned
        # error" with backoff for over a minute: stopped at the first rejection)
        run = opencode(clients["opencode"], target, tmp_path, provider, until=lambda: bool(watch.rejected()))
        assert FINAL not in run.stdout
        assert watch.rejected() and all(k.startswith("compat-anthropic-") for k in watch.rejected()), watch.rejected()
        return
    run = opencode(clients["opencode"], target, tmp_path, provider)
    completed(run, watch, sim)
    body = sim.last()["body"]
    if provider == "anthropic":
        first = next(m for m in body["messages"] if m["role"] == "assistant")["content"][0]
        assert first["type"] == "thinking" and first["signature"], "the loop's signed thinking went back"
    else:
        sent = [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        assert sent and sent[0].get("reasoning_details"), "the reasoning the client dropped went back"

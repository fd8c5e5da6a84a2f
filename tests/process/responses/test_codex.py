"""A real Responses client: Codex CLI from the npm registry (``@openai/codex``, its binary ships in the package) runs
``codex exec`` through a real gateway against the strict simulator with a custom model provider
(``wire_api = "responses"``, ``base_url`` the gateway, ``env_key``). The simulator's scripted turn calls Codex's shell
tool with a command it can run (``[[sim:arg=...]]``); Codex runs it, sends its output back with the turn's reasoning,
and finishes with the final answer. Skipped, saying why, only when npm or the package cannot be had here
(``THINKGATE_CODEX_BIN`` names an installed binary to use instead)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.gemini.helpers import gateway_env

KEY = "sk-codex-through-thinkgate-0123456789abcdef"
MARK = "thinkgate-codex-ok"
_ARCH = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}


@pytest.fixture(scope="session")
def codex_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    given = os.environ.get("THINKGATE_CODEX_BIN")
    if given:
        return given
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: @openai/codex cannot be installed here")
    where = tmp_path_factory.mktemp("codex-npm")
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "@openai/codex"], cwd=where,
                          capture_output=True, text=True, timeout=240, check=False)
    if done.returncode != 0:
        pytest.skip(f"npm install @openai/codex failed (no registry access?): {done.stderr.strip()[-400:]}")
    found = sorted(where.glob(f"node_modules/@openai/codex*/vendor/{_ARCH.get(platform.machine(), '*')}/bin/codex"))
    if not found:
        pytest.skip(f"the @openai/codex package ships no binary for {platform.machine()}")
    return str(found[0])


@pytest.fixture(scope="module")
def codex_gateway(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    return gateways.start(sim.url, gateway_env(sim))


def _codex(binary: str, gateway: ServerProcess, model: str, prompt: str, home: Path, work: Path) -> str:
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "thinkgate"\nmodel_reasoning_effort = "medium"\n'
        'model_reasoning_summary = "auto"\n\n[model_providers.thinkgate]\nname = "thinkgate"\n'
        f'base_url = "{gateway.url}/v1"\nenv_key = "THINKGATE_KEY"\nwire_api = "responses"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(home), "THINKGATE_KEY": KEY}
    done = subprocess.run([binary, "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", prompt],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _results(body: dict[str, Any]) -> list[str]:
    """Each tool output the client sent back (Anthropic tool_result or Gemini functionResponse), as JSON text."""
    if "messages" in body:
        return [orjson.dumps(b.get("content")).decode() for m in body["messages"] if isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_result"]
    return [orjson.dumps(p["functionResponse"]).decode() for c in body["contents"] for p in c.get("parts", [])
            if "functionResponse" in p]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", ["claude-opus-4-5", "gemini-3-pro-preview"])
def test_codex_exec_runs_a_tool_loop_through_thinkgate(
        codex_bin: str, sim: Sim, codex_gateway: ServerProcess, tmp_path: Path, model: str) -> None:
    rejected = sum(sim.stats()["rejections"].values())
    out = _codex(codex_bin, codex_gateway, model, f"[[sim:tools=2]] [[sim:arg=echo {MARK}]] run the checks",
                 tmp_path / "home", tmp_path / "work")
    assert "Final answer after 2 tool rounds" in out, out
    body = sim.last()["body"]
    results = _results(body)
    assert len(results) == 2 and all(MARK in r for r in results), results  # both commands ran, their output came back
    assert sum(sim.stats()["rejections"].values()) == rejected, sim.stats()["rejections"]
    if model.startswith("claude"):
        first = next(m for m in body["messages"] if m["role"] == "assistant")["content"][0]
        assert first["type"] == "thinking" and first["signature"], "the turn's signed thinking went back"
    else:
        calls = [p for c in body["contents"] for p in c.get("parts", []) if "functionCall" in p]
        assert calls and calls[0].get("thoughtSignature") not in (None, "skip_thought_signature_validator")

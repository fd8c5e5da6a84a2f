"""README "Quick start", run as written on a machine that has only Python, one straight line (issue 34 item 12): a copy
of this checkout (no ``.venv``, no ``.git``), the install line verbatim in it (a fresh venv, ``pip install -e .``) and
``thinkgate demo`` after it in the same shell, which prints the table README shows; then the ``thinkgate serve`` line
with the upstream (``https://api.anthropic.com``) swapped for the session's ``thinkgate sim`` and the port for a free
one, from a shell where only the fresh venv is active. The official ``anthropic`` SDK drives the served gateway through
a mangled tool loop. Nothing of the test's own environment (its venv, ``PYTHONPATH``) reaches the recipe's shells."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import psutil
import pytest

from tests.process_fixtures import ServerProcess, Sim, free_port
from tests.support.e2e.helpers import run_tool_loop
from tests.support.e2e.readme import ROOT, blocks, commands, section, start_command, wait_ready
from tests.support.manglings.anthropic import mangle_assistants

REAL_UPSTREAM = "https://api.anthropic.com"
# what a fresh clone has none of: the checkout's own venv, git data, caches and build output
NOT_IN_A_CLONE = (".venv", "venv", ".git", "__pycache__", "*.egg-info", "build", "dist", ".mypy_cache",
                  ".pytest_cache", ".ruff_cache", ".hypothesis", ".import_linter_cache")

pytestmark = [pytest.mark.process, pytest.mark.timeout(360)]


def fresh_shell_env() -> dict[str, str]:
    """The environment of a new terminal: no venv active (the test's own venv left off ``PATH``), no
    ``PYTHONPATH``; pip's own configuration (index, cache) kept, as the machine's."""
    own_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("GATEWAY_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(own_bin).resolve())
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of this checkout as a clone would have it, with the quick start's install run in it."""
    where = tmp_path_factory.mktemp("quick-start") / "thinkgate"
    shutil.copytree(ROOT, where, ignore=shutil.ignore_patterns(*NOT_IN_A_CLONE), symlinks=True)
    install, _ = commands(blocks(section("quick-start"))[0][1])  # (the demo after it: its own test)
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", install], cwd=where, env=fresh_shell_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, (install, done.stdout[-2000:], done.stderr[-2000:])
    print(f"quick start install ({install!r}): {time.monotonic() - started:.1f} s")
    yield where


def test_quick_start_blocks_are_the_install_serve_and_demo(checkout: Path) -> None:
    found = blocks(section("quick-start"))
    assert [commands(code) for _, code in found] == [
        ["python3 -m venv .venv && . .venv/bin/activate && pip install -e .", "thinkgate demo"],
        [f"GATEWAY_ANTHROPIC_BASE_URL={REAL_UPSTREAM} thinkgate serve --host 127.0.0.1 --port 8080"]]
    # the fresh venv's install imports the copy's code, not this checkout's (run from elsewhere: ``python -c`` puts
    # its working directory first on sys.path)
    where = subprocess.run([str(checkout / ".venv/bin/python"), "-c", "import gateway; print(gateway.__file__)"],
                           cwd=checkout.parent, env=fresh_shell_env(), capture_output=True, text=True, timeout=60,
                           check=True)
    assert Path(where.stdout.strip()).is_relative_to(checkout), where.stdout


@pytest.fixture
def served(checkout: Path, sim: Sim) -> Iterator[ServerProcess]:
    """The quick start's ``serve`` line in the shell its install line left (the fresh venv active), against the
    simulator on a free port."""
    serve = commands(blocks(section("quick-start"))[1][1])[0]
    assert serve.count(REAL_UPSTREAM) == 1 and serve.count("--port 8080") == 1, serve
    port = free_port()
    cmd = serve.replace(REAL_UPSTREAM, sim.url).replace("--port 8080", f"--port {port}")
    gateway = start_command("gateway", cmd, fresh_shell_env(), cwd=checkout, before=". .venv/bin/activate && ")
    try:
        wait_ready(gateway, "/readyz", timeout=60)
        # the server is the fresh venv's ``thinkgate`` (exec'd by the recipe's shell), not this test's
        assert psutil.Process(gateway.proc.pid).cmdline()[1] == str(checkout / ".venv/bin/thinkgate")
        yield gateway
    finally:
        gateway.stop()
        os.unlink(gateway.log_path)


def test_quick_start_gateway_serves_the_anthropic_sdk(served: ServerProcess, sim: Sim) -> None:
    """A client pointed at the served gateway (``ANTHROPIC_BASE_URL``) runs a tool loop with thinking whose replayed
    turns lose their signatures (an IDE's mangling): every request is answered, none is rejected upstream."""
    rejections = sum(sim.stats()["rejections"].values())
    with anthropic.Anthropic(base_url=served.url, api_key="sk-ant-quick-start-0123456789abcdef", max_retries=0) as c:
        result = run_tool_loop(c, "[[sim:tools=2]] weather in Paris and Rome?",
                               mangle=lambda h: mangle_assistants(h, "drop_signature"))
    assert result.requests == 3 and result.answers[-1].stop_reason == "end_turn"
    first = result.answers[0].content[0]
    assert first.type == "thinking" and first.signature
    assert sum(sim.stats()["rejections"].values()) == rejections


def test_quick_start_demo_prints_the_table_readme_shows(checkout: Path) -> None:
    """The first block's ``thinkgate demo``, in the shell its install line left (the fresh venv active), prints
    README's table."""
    text = section("quick-start")
    code = blocks(text)[0][1]
    shown = re.search(r"```sh\n" + re.escape(code) + r"```\s*```\n(.*?)```", text, re.S)[1]  # type: ignore[index]
    demo = commands(code)[1]
    done = subprocess.run(["bash", "-c", f". .venv/bin/activate && {demo}"], cwd=checkout, env=fresh_shell_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = shown.strip().splitlines()
    assert len(rows) == 3 and rows[0].startswith("path")
    for row in rows:
        assert row in done.stdout.splitlines(), (row, done.stdout)

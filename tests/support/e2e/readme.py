"""README recipes as tests run them: a marked section's ```sh blocks, their commands, and a backgrounded command
started as a ``ServerProcess`` whose pid is the server's (``test_readme_try_it.py``, ``test_readme_quick_start.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tests.process_fixtures import ServerProcess

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def section(name: str) -> str:
    text = README.read_text()
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"README has no {name} section"
    return m[1]


def blocks(text: str) -> list[tuple[str, str]]:
    """(the first word of the paragraph before it, the code) for every ```sh block."""
    out, end = [], 0
    for m in re.finditer(r"```sh\n(.*?)```", text, re.S):
        paragraphs = [p for p in text[end:m.start()].split("\n\n") if p.strip()]
        out.append((paragraphs[-1].split()[0] if paragraphs else "", m[1]))
        end = m.end()
    return out


def commands(code: str) -> list[str]:
    """Shell commands, backslash continuations joined."""
    return [c.strip() for c in code.replace("\\\n", " ").splitlines() if c.strip()]


def start_command(name: str, cmd: str, env: dict[str, str], *, cwd: Path | None = None,
                  before: str = "") -> ServerProcess:
    """Run one server command of a recipe (``VAR=value ... program --port N [&]``) through ``bash`` as written, its
    output to a log file; ``before`` runs first in the same shell (what the recipe's earlier lines left set, e.g.
    an activated venv). ``exec`` makes the process's pid the server's."""
    port = int(re.search(r"--port (\d+)", cmd)[1])  # type: ignore[index]
    assigns, program = re.fullmatch(r"((?:\w+=\S+\s+)*)(.*)", cmd.removesuffix("&").strip()).groups()  # type: ignore[union-attr]
    fd, log_path = tempfile.mkstemp(prefix=f"thinkgate-readme-{name}-", suffix=".log")
    with os.fdopen(fd, "wb") as logf:
        proc = subprocess.Popen(["bash", "-c", f"{before}{assigns}exec {program}"], env=env, cwd=cwd,
                                stdout=logf, stderr=subprocess.STDOUT)
    return ServerProcess(name, port, proc, log_path)


def wait_ready(sp: ServerProcess, path: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if sp.proc.poll() is not None:
            raise RuntimeError(f"{sp.name} exited ({sp.proc.returncode}):\n{sp.log()}")
        try:
            if httpx.get(sp.url + path, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{sp.name} not ready in {timeout}s:\n{sp.log()}")
        time.sleep(0.05)  # polling a starting process's port: there is no event to await

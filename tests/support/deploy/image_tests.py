"""deploy/Dockerfile and .dockerignore, checked without a Docker engine (none runs here).

- The Dockerfile is parsed with BuildKit's own Go parser (the ``dockerfile`` package, in the
  ``deploy`` extra): two stages, a slim Python 3.11 base, a non-root USER,
  HEALTHCHECK, ``thinkgate serve`` as ENTRYPOINT, the port the probes use.
- The build context that .dockerignore lets through is assembled, the build stage's COPY steps are
  replayed into a scratch /src, and a wheel is built from it and run: the image's install step
  works with exactly what the context carries.
- The runtime's read-only-root assumption is checked by tracing a real multi-worker gateway
  (``strace``): every file it creates or writes lies under TMPDIR.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.process_fixtures import Sim, free_port

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    cmd: str
    args: tuple[str, ...]
    flags: tuple[str, ...] = ()


def parse_dockerfile(path: Path) -> list[Instruction]:
    dockerfile = pytest.importorskip("dockerfile", reason="BuildKit's Dockerfile parser: pip install -e '.[deploy]'")
    return [Instruction(c.cmd.upper(), tuple(c.value), tuple(c.flags)) for c in dockerfile.parse_file(str(path))]


def stages(instrs: list[Instruction]) -> list[list[Instruction]]:
    out: list[list[Instruction]] = []
    for ins in instrs:
        if ins.cmd == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE)


def test_multi_stage_slim_python_311(instructions: list[Instruction]) -> None:
    args = dict(i.args[0].split("=", 1) for i in instructions if i.cmd == "ARG" and "=" in i.args[0])
    build, runtime = stages(instructions)
    assert [s[0].args[-1] for s in (build, runtime)] == ["build", "runtime"]
    for stage in (build, runtime):
        image = stage[0].args[0].replace("${PYTHON_IMAGE}", args.get("PYTHON_IMAGE", ""))
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", image), image
    copies_from_build = [i for i in runtime if i.cmd == "COPY" and "--from=build" in i.flags]
    assert copies_from_build and all(i.args[-1] == "/opt/thinkgate" for i in copies_from_build)
    assert not any(i.cmd == "COPY" and "--from=build" not in i.flags for i in runtime), "runtime copies only the venv"


def test_runtime_is_non_root_read_only_friendly(instructions: list[Instruction]) -> None:
    runtime = stages(instructions)[-1]
    users = [i.args[0] for i in runtime if i.cmd == "USER"]
    assert users, "no USER in the runtime stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, "numeric non-root UID (runAsNonRoot can verify it)"
    env = {k: v for i in runtime if i.cmd == "ENV" for k, v in zip(i.args[::2], i.args[1::2], strict=True)}
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["TMPDIR"] == "/tmp"
    assert "PROMETHEUS_MULTIPROC_DIR" not in env, "serve --workers N makes a fresh one under /tmp"
    assert [i.args[0] for i in runtime if i.cmd == "WORKDIR"] == ["/tmp"]
    build = stages(instructions)[0]
    assert any("compileall" in " ".join(i.args) for i in build if i.cmd == "RUN"), "byte-code compiled at build"


def test_entrypoint_healthcheck_and_port(instructions: list[Instruction]) -> None:
    runtime = stages(instructions)[-1]
    last = {i.cmd: i for i in runtime}
    assert last["ENTRYPOINT"].args == ("thinkgate", "serve")
    cmd = list(last["CMD"].args)
    port = cmd[cmd.index("--port") + 1]
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert last["EXPOSE"].args == (port,)
    health = last["HEALTHCHECK"]
    assert health.args[0] == "CMD" and f"http://127.0.0.1:{port}/healthz" in " ".join(health.args)
    assert any(f.startswith("--interval=") for f in health.flags)
    assert last["STOPSIGNAL"].args == ("SIGTERM",)
    # the healthcheck command is valid Python
    code = health.args[health.args.index("-c") + 1]
    compile(code, "HEALTHCHECK", "exec")


# ------------------------------------------------------------------ build context and install step


def dockerignore_allows(rel: str, patterns: list[tuple[bool, str]]) -> bool:
    """Docker's rule: the last matching pattern decides (``!`` re-includes); a directory's
    exclusion covers its contents unless re-included."""
    included = True
    parts = rel.split("/")
    for negate, pat in patterns:
        pat = pat.rstrip("/")
        hit = any(fnmatch.fnmatchcase("/".join(parts[:k]), pat) for k in range(1, len(parts) + 1))
        if pat.startswith("**/"):
            hit = hit or any(fnmatch.fnmatchcase(p, pat[3:]) for p in parts)
        if hit:
            included = negate
    return included


def build_context(dest: Path) -> list[str]:
    patterns = [(line.startswith("!"), line.lstrip("!")) for line in
                (raw.strip() for raw in (ROOT / ".dockerignore").read_text().splitlines())
                if line and not line.startswith("#")]
    kept = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv")]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
            if dockerignore_allows(rel, patterns):
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, dest / rel)
                kept.append(rel)
    return kept


@pytest.fixture(scope="module")
def built_wheel(instructions: list[Instruction]) -> Iterator[Path]:
    """Replay the build stage's COPY steps from the .dockerignore'd context, then `pip wheel`."""
    with tempfile.TemporaryDirectory(prefix="tg-image-") as tmp:
        context, src, wheels = Path(tmp, "context"), Path(tmp, "src"), Path(tmp, "wheels")
        context.mkdir()
        kept = build_context(context)
        assert not any(k.startswith(("tests/", "helm/", "bench/", ".venv/")) or "__pycache__" in k for k in kept)
        build = stages(instructions)[0]
        workdir = next(i.args[0] for i in build if i.cmd == "WORKDIR")
        assert workdir == "/src"
        for ins in (i for i in build if i.cmd == "COPY"):
            *sources, target = ins.args
            for source in sources:
                origin = context / source
                assert origin.exists(), f"COPY {source}: not in the build context (.dockerignore?)"
                dest = src / target.rstrip("/") if not target.endswith("/") and len(sources) == 1 else src / target
                if origin.is_dir():
                    shutil.copytree(origin, dest, dirs_exist_ok=True)
                else:
                    (dest if target.endswith("/") or target == "./" else dest.parent).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, dest / origin.name if target.endswith("/") or target == "./" else dest)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                               "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        (wheel,) = wheels.glob("thinkgate-*.whl")
        yield wheel


def test_wheel_from_the_build_context_serves(built_wheel: Path, sim: Sim, tmp_path: Path) -> None:
    """The wheel the image installs carries every module: installed alone (dependencies from this
    venv) it imports from its own copy, serves /healthz and /readyz, and drains on SIGTERM."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(built_wheel)], check=True, timeout=120)
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmp_path),
           "GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_LOG_LEVEL": "WARNING"}
    where = subprocess.run([sys.executable, "-c", "import gateway.app.server, state.factory, thinkgate_sim.app;"
                            "print(gateway.app.server.__file__)"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, check=True)
    assert where.stdout.strip().startswith(str(target)), where.stdout
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], env=env,
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_ready(proc, port, log)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").json()["status"] == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text(errors="replace")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.05)  # polling a starting process: there is no event to await


# ------------------------------------------------------------------ read-only root filesystem

# strace -y shows the path behind a directory fd: openat(3</tmp/x>, "name", ...) or openat(AT_FDCWD, "p", ...)
_PATH_CALL = re.compile(r'^\d+\s+(openat2?|open|creat|mkdirat|mkdir|renameat2?|rename|unlinkat|unlink|rmdir)\('
                        r'(?:AT_FDCWD, |\d+<([^>]*)>, )?"([^"]*)"(.*)$')


def _tree(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid, *(p for child in children for p in _tree(int(child)))]


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=none", "true"], capture_output=True, check=False)
    return probe.returncode == 0  # ptrace may be forbidden in some sandboxes


@pytest.mark.skipif(not _strace_works(), reason="strace is not installed or cannot trace here")
def test_gateway_writes_nothing_outside_tmpdir(sim: Sim, tmp_path: Path) -> None:
    """What a read-only root filesystem needs: a 2-worker gateway (which creates its shared
    metrics directory), serving requests and /metrics, then SIGTERM, traced with strace: every path
    it creates, writes, renames or removes lies under TMPDIR (or /dev)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    trace = tmp_path / "trace"
    port = free_port()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmpdir), "HOME": "/nonexistent",
           "GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_LOG_LEVEL": "WARNING",
           "GATEWAY_STATE_MACHINE_ENABLED": "false"}  # (two workers need Redis for state: stateless here)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["strace", "-f", "-y", "-qq", "-e", "trace=%file", "-o", str(trace), sys.executable,
                                 "-m", "gateway", "serve", "--port", str(port), "--workers", "2"],
                                env=env, cwd="/", stdout=out, stderr=subprocess.STDOUT)
    server: int | None = None
    try:
        _wait_ready(proc, port, log, timeout=40)
        (child,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()  # strace's tracee
        server = int(child)
        headers = {"x-api-key": "sk-ro", "anthropic-version": "2023-06-01"}
        body = {"model": "claude-opus-4-5", "max_tokens": 64,
                "messages": [{"role": "user", "content": "[[sim:tools=0]] hi"}]}
        for _ in range(4):
            assert httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=body, headers=headers,
                              timeout=10).status_code == 200
        assert "gateway_requests_total" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        os.kill(server, signal.SIGTERM)  # strace itself does not pass signals on
        assert proc.wait(30) == 0, log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            for pid in _tree(server) if server is not None else []:  # the supervisor and its workers
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
    writes, inside = [], 0
    for line in trace.read_text().splitlines():
        m = _PATH_CALL.match(line)
        if not m:
            continue
        call, base, path, rest = m[1], m[2] or "/", m[3], m[4]
        if call.startswith("open") and not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", rest):
            continue  # a read
        full = os.path.normpath(path if path.startswith("/") else os.path.join(base, path))
        if full.startswith(str(tmpdir)):
            inside += 1
        elif not full.startswith("/dev/"):
            writes.append(f"{call} {full} {rest.strip()[-40:]}")  # attempted, even if it failed
    assert inside >= 3, "the trace shows the metrics directory being created, written and removed"
    assert not writes, writes
    assert not list(tmpdir.iterdir()), "the metrics directory is removed on exit"


def test_the_image_installs_the_otel_extra_unless_built_without(instructions: list[Instruction]) -> None:
    """Tracing needs the ``otel`` extra in the image (the chart's ``tracing`` values only set variables)."""
    build = stages(instructions)[0]
    args = dict(i.args[0].split("=", 1) for i in build if i.cmd == "ARG" and "=" in i.args[0])
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert args["THINKGATE_EXTRAS"] == "otel" and "otel" in extras
    installs = [" ".join(i.args) for i in build if i.cmd == "RUN" and "pip install" in " ".join(i.args)]
    assert len(installs) == 1 and '".[${THINKGATE_EXTRAS}]"' in installs[0], installs

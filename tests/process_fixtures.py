"""Real child processes for end-to-end tests: ``thinkgate sim`` and ``thinkgate serve``.

Each process listens on a free loopback port, is waited for by polling its health
endpoint (the process tells us nothing else when it is ready), and is terminated
and reaped at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def log_lines(self) -> list[str]:
        """The log's complete lines: the process may be mid-write, so a last line with no newline yet is
        left out (a reader polling the log would otherwise parse half a JSON record)."""
        text = self.log()
        return text[:text.rfind("\n") + 1].splitlines()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_process(name: str, args: list[str], health_path: str, env: dict[str, str] | None = None,
                  timeout: float = 20.0) -> ServerProcess:
    port = free_port()
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    fd, log_path = tempfile.mkstemp(prefix=f"thinkgate-{name}-", suffix=".log")
    with os.fdopen(fd, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", *args, "--port", str(port)],
                                stdout=logf, stderr=subprocess.STDOUT, env=full_env)
    sp = ServerProcess(name, port, proc, log_path, env or {})
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited early ({proc.returncode}):\n{sp.log()}")
        try:
            if httpx.get(sp.url + health_path, timeout=1.0).status_code < 500:
                return sp
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            sp.stop(signal.SIGKILL)
            raise RuntimeError(f"{name} did not become healthy in {timeout}s:\n{sp.log()}")
        time.sleep(delay)  # polling a starting process's port: there is no event to await
        delay = min(delay * 2, 0.2)


Metrics = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(sp: ServerProcess) -> Metrics:
    """A gateway's /metrics: name -> {sorted label items -> value}; a fresh connection, so any worker may
    answer."""
    text = httpx.get(sp.url + "/metrics", timeout=10).text
    out: Metrics = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def metric_sum(sp: ServerProcess, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that carry every one of ``labels``."""
    want = set(labels.items())
    return sum(v for items, v in scrape(sp).get(name, {}).items() if want <= set(items))


def wait_for_workers(sp: ServerProcess, workers: int, timeout: float = 20.0) -> None:
    """Until each of ``workers`` processes answered ``/healthz``: the first to listen answers the
    health poll while the others may still be starting. Every probe is a new connection, which the
    kernel hands to any listening worker (SO_REUSEPORT)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only workers {seen} of {workers} answered in {timeout}s:\n{sp.log()}")
        try:
            seen.add(int(httpx.get(sp.url + "/healthz", timeout=1.0).json()["worker"]))
        except httpx.HTTPError:
            time.sleep(0.05)  # polling a starting process's port: there is no event to await


class Sim:
    """Handle on a running simulator process with its control endpoints."""

    def __init__(self, sp: ServerProcess) -> None:
        self.sp = sp
        self.url = sp.url

    def stats(self) -> dict[str, Any]:
        return httpx.get(self.url + "/_sim/stats").json()  # type: ignore[no-any-return]

    def reset(self) -> None:
        httpx.post(self.url + "/_sim/reset")

    def last(self) -> dict[str, Any]:
        return httpx.get(self.url + "/_sim/last").json()  # type: ignore[no-any-return]

    def release(self) -> None:
        httpx.post(self.url + "/_sim/release")


@pytest.fixture(scope="session")
def sim() -> Iterator[Sim]:
    sp = start_process("sim", ["sim"], "/_sim/stats")
    try:
        yield Sim(sp)
    finally:
        sp.stop()
        os.unlink(sp.log_path)


class GatewayFactory:
    def __init__(self) -> None:
        self.started: list[ServerProcess] = []

    def start(self, upstream_url: str, env: dict[str, str] | None = None,
              workers: int = 1) -> ServerProcess:
        full = {"GATEWAY_ANTHROPIC_BASE_URL": upstream_url, "GATEWAY_LOG_LEVEL": "WARNING"}
        full.update(env or {})
        sp = start_process("gateway", ["serve", "--workers", str(workers)], "/healthz", full)
        self.started.append(sp)
        if workers > 1:
            wait_for_workers(sp, workers)
        return sp

    def close(self) -> None:
        for sp in self.started:
            sp.stop()
            os.unlink(sp.log_path)


@pytest.fixture(scope="session")
def gateways() -> Iterator[GatewayFactory]:
    factory = GatewayFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def gateway(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    """One gateway process (embedded store) in front of the session's simulator."""
    return gateways.start(sim.url)

"""deploy/haproxy.cfg live: a real HAProxy in front of three real gateway processes on one Redis.

The configuration is the compose one with only addresses rewritten (service names -> loopback
ports, no Docker DNS resolver) and the check interval shortened (2 s -> 200 ms) to keep the test
short. Checked: round robin over the three replicas; a stream is relayed as it is produced (the
first delta of a stream the simulator holds reaches the client); SIGTERM on a replica takes it
out of rotation through its /readyz while its stream in flight completes and it exits 0; a replica
killed with SIGKILL costs no request (connection failures are retried on another replica).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port
from tests.redis_fixtures import RedisServer

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy is not installed (Debian package haproxy)")

ROOT = Path(__file__).resolve().parents[3]
HEADERS = {"x-api-key": "sk-haproxy", "anthropic-version": "2023-06-01"}
BODY = {"model": "claude-opus-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "[[sim:tools=0]] hi"}]}


class HAProxy:
    def __init__(self, replicas: list[ServerProcess]) -> None:
        self.port, self.stats_port = free_port(), free_port()
        text = (ROOT / "deploy" / "haproxy.cfg").read_text()
        text = re.sub(r"(?m)^resolvers docker\n(?:[ \t]+.*\n)+", "", text)
        text = text.replace(" resolvers docker", "").replace("inter 2s", "inter 200ms")
        text = text.replace("bind :8080", f"bind 127.0.0.1:{self.port}")
        text = text.replace("bind :8404", f"bind 127.0.0.1:{self.stats_port}")
        for i, sp in enumerate(replicas, 1):
            text, n = re.subn(rf"(server gateway-{i}) gateway-{i}:8080", rf"\1 127.0.0.1:{sp.port}", text)
            assert n == 1
        # fewer replicas than the file names: the other servers' lines go
        text, _ = re.subn(r"(?m)^[ \t]+server gateway-\d+ gateway-\d+:8080.*\n", "", text)
        self.replicas = len(replicas)
        self.dir = Path(tempfile.mkdtemp(prefix="tg-haproxy-"))
        cfg = self.dir / "haproxy.cfg"
        cfg.write_text(text)
        self.log = self.dir / "haproxy.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=out, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def status(self) -> dict[str, str]:
        text = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2).text.lstrip("# ")
        return {row["svname"]: row["status"] for row in csv.DictReader(io.StringIO(text))
                if row["pxname"] == "gateways" and row["svname"].startswith("gateway-")}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling other processes: there is no event to await


def served(sp: ServerProcess) -> int:
    text = httpx.get(sp.url + "/metrics", timeout=5).text
    return int(sum(float(v) for v in re.findall(r'^gateway_requests_total\{[^}]*endpoint="messages"[^}]*\} (\S+)$',
                                                 text, re.M)))


def inflight(sp: ServerProcess) -> int:
    m = re.search(r"^gateway_inflight_streams(?:\{[^}]*\})? (\S+)$", httpx.get(sp.url + "/metrics").text, re.M)
    return int(float(m[1])) if m else 0


@pytest.fixture()
def stack(sim: Sim, gateways: GatewayFactory,
          redis_server: RedisServer) -> Iterator[tuple[HAProxy, list[ServerProcess]]]:
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "haproxy-test-secret-0123456789ab"}
    replicas = [gateways.start(sim.url, env) for _ in range(3)]
    lb = HAProxy(replicas)
    try:
        wait_for(lambda: lb.proc.poll() is None and _all_up(lb), "every replica UP in HAProxy")
        yield lb, replicas
    finally:
        sim.release()
        lb.close()
        for sp in replicas:
            sp.stop()


def _all_up(lb: HAProxy) -> bool:
    try:
        return set(lb.status().values()) == {"UP"} and len(lb.status()) == lb.replicas
    except httpx.HTTPError:
        return False


def test_round_robin_streaming_drain_and_kill(sim: Sim, stack: tuple[HAProxy, list[ServerProcess]]) -> None:
    lb, replicas = stack
    client = httpx.Client(base_url=lb.url, headers=HEADERS, timeout=20)

    # round robin: 6 requests, 2 per replica
    before = [served(sp) for sp in replicas]
    for _ in range(6):
        assert client.post("/v1/messages", json=BODY).status_code == 200
    assert [served(sp) - b for sp, b in zip(replicas, before, strict=True)] == [2, 2, 2]

    # streaming passes through unbuffered: the first delta arrives while the simulator holds the rest
    events: list[str] = []
    first_delta = threading.Event()

    def held_stream() -> None:
        body = {**BODY, "stream": True, "messages": [{"role": "user", "content": "[[sim:hold]] [[sim:tools=0]] hi"}]}
        with client.stream("POST", "/v1/messages", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("event:"):
                    events.append(line[6:].strip())
                    if events[-1] == "content_block_delta":
                        first_delta.set()

    reader = threading.Thread(target=held_stream, daemon=True)
    reader.start()
    assert first_delta.wait(10), f"the first delta did not get through HAProxy: {events}"
    (victim,) = [sp for sp in replicas if inflight(sp) == 1]

    # SIGTERM: the replica leaves the rotation through /readyz, its stream goes on
    victim.proc.send_signal(signal.SIGTERM)
    name = f"gateway-{replicas.index(victim) + 1}"
    wait_for(lambda: lb.status()[name] != "UP", f"{name} out of rotation", timeout=10)
    before_victim = served(victim)
    for _ in range(6):
        assert client.post("/v1/messages", json=BODY).status_code == 200
    assert served(victim) == before_victim, "HAProxy sent new requests to a draining replica"
    assert victim.proc.poll() is None and "message_stop" not in events
    sim.release()
    reader.join(10)
    assert events[-1] == "message_stop", events
    assert victim.proc.wait(15) == 0

    # SIGKILL another replica: requests right after it (before any health check) all succeed
    other = next(sp for sp in replicas if sp is not victim)
    os.kill(other.proc.pid, signal.SIGKILL)
    other.proc.wait(10)
    for _ in range(6):
        assert client.post("/v1/messages", json=BODY).status_code == 200
    client.close()

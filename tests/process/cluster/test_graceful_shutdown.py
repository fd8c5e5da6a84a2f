"""SIGTERM drains a real ``thinkgate serve`` process.

A streamed request is held by the simulator (``[[sim:hold]]``: it pauses after the first content
delta until ``POST /_sim/release``). While it is in flight the gateway gets SIGTERM: the listener
stays open and ``/readyz`` answers 503 (observed over HTTP, not inferred from a refused connection),
``/healthz`` still 200; the held stream is released, reaches ``message_stop`` on the client, and the
process exits 0. The drain is bounded by ``GATEWAY_DRAIN_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim

HEADERS = {"x-api-key": "sk-test-drain", "anthropic-version": "2023-06-01"}


@dataclass
class HeldStream:
    """A streamed /v1/messages request read on a thread; ``started`` is set at the first delta."""

    url: str
    events: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        body = {"model": "claude-opus-4-5", "max_tokens": 1024, "stream": True,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "messages": [{"role": "user", "content": "[[sim:hold]] [[sim:tools=0]] take your time"}]}
        try:
            with httpx.stream("POST", self.url + "/v1/messages", json=body, headers=HEADERS, timeout=30) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        self.events.append(line[6:].strip())
                        if self.events[-1] == "content_block_delta":
                            self.started.set()
        except BaseException as e:  # reported by the test thread
            self.error = e
        finally:
            self.started.set()

    def join(self, timeout: float = 20) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end"


@pytest.fixture()
def released(sim: Sim) -> Iterator[None]:
    """Whatever happens, no stream stays held in the shared simulator after the test."""
    yield
    sim.release()


def readyz(gw: ServerProcess) -> tuple[int, str]:
    r = httpx.get(gw.url + "/readyz", timeout=2)
    return r.status_code, json.loads(r.text)["status"]


def wait_until_draining(gw: ServerProcess, timeout: float = 10) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        status = readyz(gw)
        if status[0] != 200 or time.monotonic() > deadline:
            return status
        time.sleep(0.02)  # polling another process's state: nothing to await


def hold_one(gw: ServerProcess) -> HeldStream:
    held = HeldStream(gw.url)
    assert held.started.wait(15) and held.error is None, held.error
    assert held.events[-1] == "content_block_delta"
    return held


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_drains_in_flight_stream_then_exits_0(sim: Sim, gateways: GatewayFactory, released: None,
                                                      workers: int) -> None:
    # (several workers without Redis are refused: stateless, the drain is the same)
    env = {"GATEWAY_DRAIN_TIMEOUT_S": "30", **({"GATEWAY_STATE_MACHINE_ENABLED": "false"} if workers > 1 else {})}
    gw = gateways.start(sim.url, env, workers=workers)
    assert readyz(gw) == (200, "ready")
    held = hold_one(gw)

    gw.proc.send_signal(signal.SIGTERM)
    # the listener is still open while the stream is in flight: readiness is observably false
    assert wait_until_draining(gw) == (503, "draining")
    assert httpx.get(gw.url + "/healthz", timeout=2).status_code == 200  # alive, only unready
    time.sleep(0.3)  # a while longer: the held stream keeps the process serving
    assert gw.proc.poll() is None
    assert readyz(gw) == (503, "draining")

    sim.release()
    held.join()
    assert held.error is None, held.error
    assert held.events[-1] == "message_stop", held.events
    assert gw.proc.wait(15) == 0, gw.log()
    assert "draining (readiness false), 1 request(s) in flight" in gw.log()
    with pytest.raises(httpx.ConnectError):  # and the listener is closed now
        httpx.get(gw.url + "/healthz", timeout=2)


def test_idle_gateway_exits_at_once(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_DRAIN_TIMEOUT_S": "30"})
    started = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(10) == 0, gw.log()
    assert time.monotonic() - started < 5


def test_drain_delay_keeps_serving_while_unready(sim: Sim, gateways: GatewayFactory) -> None:
    """``GATEWAY_DRAIN_DELAY_S``: requests arriving right after SIGTERM (a load balancer that has not
    yet seen the 503) are still served, then the process exits 0 by itself."""
    gw = gateways.start(sim.url, {"GATEWAY_DRAIN_DELAY_S": "1.5"})
    started = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    assert wait_until_draining(gw) == (503, "draining")
    body = {"model": "claude-opus-4-5", "max_tokens": 64,
            "messages": [{"role": "user", "content": "[[sim:tools=0]] still there?"}]}
    r = httpx.post(gw.url + "/v1/messages", json=body, headers=HEADERS, timeout=10)
    assert r.status_code == 200 and r.json()["stop_reason"] == "end_turn"
    assert gw.proc.wait(10) == 0, gw.log()
    assert time.monotonic() - started >= 1.5


def test_drain_timeout_bounds_the_wait(sim: Sim, gateways: GatewayFactory, released: None) -> None:
    """A stream that never finishes does not keep the replica alive past GATEWAY_DRAIN_TIMEOUT_S:
    the client sees its stream cut (no message_stop), the process still exits 0."""
    gw = gateways.start(sim.url, {"GATEWAY_DRAIN_TIMEOUT_S": "1"})
    held = hold_one(gw)
    started = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(10) == 0, gw.log()
    assert 0.9 <= time.monotonic() - started < 6
    held.join()
    assert "message_stop" not in held.events

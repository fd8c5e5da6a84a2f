"""Issue 32: one request must never take a replica down. A body of 100,000 messages costs the worker seconds of CPU
(linear in the body: ``bench/body_sweep.py``); at least ``GATEWAY_OFFLOAD_BODY_KB`` of body is worked on in a
thread (``pipeline.off_loop``), so the event loop goes on answering ``/healthz`` and small requests meanwhile.

The figure (how long ``/healthz`` waits, 100 ms or less on an idle machine) is the benchmark's; here the bound is
generous and only catches the loop held for the whole request again (seconds, as it was)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.process_fixtures import GatewayFactory, Sim

N = 100_000
GAP_BOUND_S = 1.0  # the loop held for the request: 0.8-3 s on 2 cores; off it, ~0.1-0.3 s here under load
OPENAI = {"authorization": "Bearer sk-offload", "content-type": "application/json"}


def _body(n: int) -> bytes:
    return json.dumps({"model": "claude-opus-4-5", "max_tokens": 16,
                       "messages": [{"role": "user" if (n - 1 - i) % 2 == 0 else "assistant", "content": f"w{i}"}
                                    for i in range(n)]}).encode()


def _served_with_health(url: str, body: bytes) -> tuple[int, float, int]:
    """(status of the big request, longest wait between two /healthz answers while it was in flight, answers)."""
    done = threading.Event()
    status: list[int] = []

    def big() -> None:
        try:
            status.append(httpx.post(url + "/v1/chat/completions", content=body, headers=OPENAI, timeout=120)
                          .status_code)
        finally:
            done.set()

    worker = threading.Thread(target=big)
    worker.start()
    worst, answers = 0.0, 0
    with httpx.Client(base_url=url, timeout=30) as probe:
        last = time.monotonic()
        while not done.is_set():
            assert probe.get("/healthz").status_code == 200
            now = time.monotonic()
            worst, last, answers = max(worst, now - last), now, answers + 1
            done.wait(0.01)  # ask again in 10 ms, or stop once the big request is answered
    worker.join()
    return status[0], worst, answers


@pytest.mark.process
@pytest.mark.timeout(180)
def test_healthz_answers_while_a_huge_body_is_worked_on(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url)
    status, worst, answers = _served_with_health(gw.url, _body(N))
    assert status == 200
    assert answers >= 5 and worst < GAP_BOUND_S, (worst, answers)
    assert "Traceback" not in gw.log()


@pytest.mark.process
@pytest.mark.timeout(180)
def test_with_offloading_off_the_loop_is_held(sim: Sim, gateways: GatewayFactory) -> None:
    """The control: ``GATEWAY_OFFLOAD_BODY_KB=0`` keeps every stage on the loop, and ``/healthz`` waits for the
    request's CPU work (what the test above would see without the thread)."""
    gw = gateways.start(sim.url, {"GATEWAY_OFFLOAD_BODY_KB": "0"})
    # twice the body: the loop held for all of its CPU work, seconds on any machine this suite runs on (one body of N
    # was held 0.8 s on a quiet run, too close to the bound to tell a held loop from a fast one)
    status, worst, _ = _served_with_health(gw.url, _body(2 * N))
    assert status == 200
    assert worst > GAP_BOUND_S, worst

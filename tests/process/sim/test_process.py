"""``run_sim`` serves the app as a real process and stops promptly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.support.sim.helpers import HEADERS, free_port, request


@pytest.mark.process
def test_run_sim_serves_and_stops_on_sigterm() -> None:
    port = free_port()
    code = ("from thinkgate_sim.app import SimConfig, run_sim; "
            f"run_sim('127.0.0.1', {port}, SimConfig(secret=b'proc'))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(url + "/_sim/stats", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)  # polling a starting process: there is no event to wait on
        resp = httpx.post(url + "/v1/messages", json=request("hi"), headers=HEADERS, timeout=5)
        assert resp.status_code == 200 and resp.json()["content"][0]["type"] == "thinking"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)

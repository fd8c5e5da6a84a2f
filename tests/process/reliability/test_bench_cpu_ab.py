"""The short form of ``bench/cpu_ab.py`` (CPU per request, builds side by side), so the benchmark keeps working:
every target answers every request and gets a row with a CPU figure; a bad target fails loudly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis

from bench.latency import free_port, wait_http
from tests.process_fixtures import Sim

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.process
def test_cpu_ab_short_form_reports_every_target(stream: bool) -> None:
    targets = ["bare", "bare:redis", ".", ".:GATEWAY_REDIS_URL="]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_ab.py"), ",".join(targets),
                           "--requests", "60", "--rounds", "1", "--turns", "4",  # >= a few 10 ms ticks of CPU each
                           *(["--stream"] if stream else [])],
                          capture_output=True, text=True, timeout=110, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {m[1]: (float(m[2]), float(m[3])) for m in re.finditer(r"^\| (\S+) \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|",
                                                               done.stdout, re.M)}
    assert set(rows) == set(targets), done.stdout
    assert all(cpu > 0 and first > 0 for cpu, first in rows.values()), rows
    assert ("time to first byte" in done.stdout) == stream


@pytest.mark.timeout(60)
@pytest.mark.process
def test_a_target_that_is_not_a_tree_fails() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_ab.py"), "/nonexistent-tree",
                           "--requests", "2", "--rounds", "1"],
                          capture_output=True, text=True, timeout=50, check=False, cwd=ROOT)
    assert done.returncode != 0


@pytest.mark.timeout(60)
@pytest.mark.process
@pytest.mark.parametrize("stream", [False, True])
def test_the_stateful_floor_makes_both_store_round_trips_and_relays_the_answer_unchanged(
        sim: Sim, redis_url: str, stream: bool) -> None:
    """``bare:redis`` (``bare_proxy.py --redis``): the load before the upstream call (a GET), the record before
    the answer's end goes out (a SET of the whole answer); the client gets exactly the upstream's bytes."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_proxy.py"), "--upstream", sim.url,
                             "--port", str(port), "--redis", redis_url], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        store = redis.Redis.from_url(redis_url)
        store.config_resetstat()
        payload = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": stream,
                              "messages": [{"role": "user", "content": "hello"}]}).encode()
        with httpx.Client(timeout=30) as client:
            answer = client.post(f"http://127.0.0.1:{port}/v1/messages", content=payload,
                                 headers={"x-api-key": "sk-floor", "content-type": "application/json"})
        assert answer.status_code == 200, answer.text
        assert ("event: message_stop" in answer.text) == stream
        calls = {k: v["calls"] for k, v in store.info("commandstats").items()}
        assert calls.get("cmdstat_get") == 1 and calls.get("cmdstat_set") == 1, calls
        assert store.get("bare:/v1/messages") == answer.content  # recorded whole, before the last chunk went out
    finally:
        proc.terminate()
        proc.wait(10)

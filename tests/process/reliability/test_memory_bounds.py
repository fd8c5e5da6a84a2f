"""A served worker's memory stays bounded whatever bodies it is sent (issue 22, item 4).

Five 3.3 MB bodies of 100,001 tiny messages once took a fresh worker from 54 MB to 2.5 GB RSS: the caches
were bounded by request bytes while a tiny message holds ten times its JSON decoded, and every message's
upstream JSON kept orjson's whole output buffer (4 KiB at least). Every per-worker cache is now bounded by
what it holds (``state.coherence``, ``replay_memo.entry_cost``, ``codec.turn_cost``) and refuses an entry over a
fraction of its bound. Here pathological bodies go through a served worker on real Redis, each several
times, and its RSS (psutil, the worker's pid) must stay under ``RSS_BOUND_MB`` with no 5xx. The longer form,
with the loop workloads and the bare proxy beside it, is ``bench/memory.py``.
"""

from __future__ import annotations

import json
import time

import httpx
import psutil
import pytest

from tests.process_fixtures import GatewayFactory, Sim

# a fresh worker is ~55 MB; at the defaults its caches hold at most ~64 MiB in the worst case, and these
# bodies hold none of it (each is refused by every cache); measured 205-230 MB when the last request stayed referenced
# until the next (an observation in a context copied during it: let go since, see the test below)
RSS_BOUND_MB = 320
KEPT_BOUND_MB = 45  # what a worker may still hold after a 30 MB request was answered (it held 60-110 MB; now 0-9 MB
# alone, up to 32 MB with the whole suite running beside it: what the allocator keeps of the freed pages)
ANTHROPIC = {"x-api-key": "sk-memory-bounds", "anthropic-version": "2023-06-01", "content-type": "application/json"}
OPENAI = {"authorization": "Bearer sk-memory-bounds", "content-type": "application/json"}


def _tiny(n: int = 100_001) -> bytes:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"} for i in range(n)]
    return json.dumps({"model": "claude-opus-4-5", "max_tokens": 16, "messages": msgs}).encode()


def _deep(depth: int = 100_000) -> bytes:
    return (b'{"model":"claude-opus-4-5","max_tokens":16,"messages":[{"role":"user","content":[{"type":"text",'
            b'"text":"hi","x":' + b"[" * depth + b"]" * depth + b"}]}]}")


def _huge(mb: int = 8) -> bytes:
    return json.dumps({"model": "claude-opus-4-5", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "word " * (mb << 18)}]}).encode()


@pytest.mark.process
@pytest.mark.timeout(120)
def test_pathological_bodies_keep_a_worker_under_its_bound(sim: Sim, gateways: GatewayFactory,
                                                           redis_url: str) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_STORE_TIMEOUT_MS": "2000",
                                  "GATEWAY_SECRET": "memory-bounds-secret-0123456789abcdef"})
    worker = psutil.Process(gw.proc.pid)
    start_mb = worker.memory_info().rss / 2**20
    tiny, deep, huge = _tiny(), _deep(), _huge()
    sends = [("/v1/messages", ANTHROPIC, tiny)] * 3 + [("/v1/chat/completions", OPENAI, tiny)] * 3 \
        + [("/v1/messages", ANTHROPIC, deep)] * 2 + [("/v1/messages", ANTHROPIC, huge)] * 2
    seen: list[tuple[int, float]] = []
    with httpx.Client(base_url=gw.url, timeout=60) as client:
        for path, headers, body in sends:
            status = client.post(path, content=body, headers=headers).status_code
            seen.append((status, round(worker.memory_info().rss / 2**20, 1)))
    assert all(status < 500 for status, _ in seen), seen
    assert max(rss for _, rss in seen) < RSS_BOUND_MB, (start_mb, seen)
    assert "Traceback" not in gw.log()


@pytest.mark.process
@pytest.mark.timeout(120)
def test_a_big_request_gives_its_memory_back(sim: Sim, gateways: GatewayFactory) -> None:
    """Issue 32 item 5: after a 24 MB body is answered the worker holds no more than before it. Contexts copied during
    a request (a keep-alive timer's) kept its observation, and through it the exchange: the body, the request and
    what went upstream, 60-110 MB per worker until the next request (``bench/peak_rss.py``: now 0-9 MB)."""
    gw = gateways.start(sim.url)
    worker = psutil.Process(gw.proc.pid)
    with httpx.Client(base_url=gw.url, timeout=60) as client:
        assert client.post("/v1/chat/completions", content=_tiny(10), headers=OPENAI).status_code == 200  # warm
        before = worker.memory_info().rss / 2**20
        body = json.dumps({"model": "claude-opus-4-5", "max_tokens": 16,
                           "messages": [{"role": "user", "content": "word " * (24 << 18)}]}).encode()
        assert client.post("/v1/chat/completions", content=body, headers=OPENAI).status_code == 200
        del body
        deadline = time.monotonic() + 5
        while (kept := worker.memory_info().rss / 2**20 - before) > KEPT_BOUND_MB and time.monotonic() < deadline:
            time.sleep(0.05)  # the worker lets go once its middleware ends, just after the answer: polling a process
    assert kept <= KEPT_BOUND_MB, f"{kept:.1f} MB still held after the answer"

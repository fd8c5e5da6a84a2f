"""What each continuation saves: thinkgate's added p50 over a direct call with and without each, in one run.

    python bench/continuations.py [--samples 15] [--sizes 10,100,500] [--repeats 2] [--json out.json]

Starts the simulator, one local redis-server and one served gateway per configuration (``CONFIGS``: every
continuation on, then each switched off by its setting, then all off). For each size N each gateway plays its
own tool loop of N rounds (so it holds records of every turn), then samples continue every loop one round at a
time, faithful then mangled (``bench.latency.mangle``), the gateways in a rotating order; each gateway request
is paired with the same faithful request straight to the simulator, sent just before or after it. Added p50 is
the median of (gateway - direct) per configuration; CPU per request is the gateway process's user+system time
over the samples. ``--repeats`` runs the whole thing again (fresh processes) to show the spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import body, extend, mangle, post, start, start_redis

# name -> gateway settings; the replay memo's and the conversation cache's own settings switch them off
CONFIGS: dict[str, dict[str, str]] = {
    "all on": {},
    "no memo": {"GATEWAY_REPLAY_MEMO_MB": "0"},
    "no splice": {"GATEWAY_CONTINUATIONS_OFF": "splice"},
    "no carried repair": {"GATEWAY_CONTINUATIONS_OFF": "carried_repair"},
    "no carried sanitize": {"GATEWAY_CONTINUATIONS_OFF": "carried_sanitize"},
    "no load cache": {"GATEWAY_LOAD_CACHE_MB": "0"},
    "all off": {"GATEWAY_REPLAY_MEMO_MB": "0", "GATEWAY_LOAD_CACHE_MB": "0",
                "GATEWAY_CONTINUATIONS_OFF": "splice,carried_repair,carried_sanitize"},
}
WARMUP = 3


def _cpu(p: Any) -> float:
    root = psutil.Process(p.proc.pid)
    return float(sum(t.user + t.system for t in (q.cpu_times() for q in (root, *root.children(recursive=True)))))


async def _size(session: aiohttp.ClientSession, sim: str, gws: dict[str, Any], size: int, samples: int,
                configs: list[str]) -> list[dict[str, Any]]:
    histories = {c: [{"role": "user", "content": f"[[sim:tools={size + 2 * (samples + WARMUP) + 5}]] {c} {size}"}]
                 for c in configs}
    for _ in range(size):
        for c in configs:
            _, answer = await post(session, gws[c].url, json.dumps(body(histories[c])).encode())
            extend(histories[c], answer)
    rows = []
    for mangled in (False, True):
        added: dict[str, list[float]] = {c: [] for c in configs}
        cpu = {c: _cpu(gws[c]) for c in configs}
        for i in range(WARMUP + samples):
            order = configs[i % len(configs):] + configs[:i % len(configs)]
            if i == WARMUP:
                cpu = {c: _cpu(gws[c]) for c in configs}
            for c in order:
                h = histories[c]
                faithful = json.dumps(body(h)).encode()
                sent = json.dumps(body(mangle(h))).encode() if mangled else faithful
                if i % 2:
                    d, _ = await post(session, sim, faithful)
                    g, answer = await post(session, gws[c].url, sent)
                else:
                    g, answer = await post(session, gws[c].url, sent)
                    d, _ = await post(session, sim, faithful)
                extend(h, answer)
                if i >= WARMUP:
                    added[c].append((g - d) * 1000)
        cpu = {c: _cpu(gws[c]) - cpu[c] for c in configs}  # (the other gateways' requests cost it nothing)
        for c in configs:
            rows.append({"turns": size, "replay": "mangled" if mangled else "faithful", "config": c,
                         "added_p50_ms": statistics.median(added[c]), "cpu_ms": cpu[c] / samples * 1000})
    return rows


async def run(sizes: list[int], samples: int, configs: list[str]) -> list[dict[str, Any]]:
    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis()
    gws = {c: start(["serve"], {"GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_REDIS_URL": redis.url,
                                "GATEWAY_SECRET": "bench-secret-0123456789abcdef012", "GATEWAY_LOG_LEVEL": "WARNING",
                                "GATEWAY_STORE_TIMEOUT_MS": "2000", **CONFIGS[c]}, "/healthz")
           for c in configs}
    rows: list[dict[str, Any]] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            for size in sizes:
                got = await _size(session, sim.url, gws, size, samples, configs)
                for r in got:
                    print(f"turns={r['turns']:<4} {r['replay']:<8} {r['config']:<20} added p50={r['added_p50_ms']:.2f}"
                          f" ms  cpu={r['cpu_ms']:.2f} ms", flush=True)
                rows += got
    finally:
        for p in (*gws.values(), sim, redis):
            p.stop()
    return rows


def markdown(runs: list[list[dict[str, Any]]], configs: list[str]) -> str:
    """Added p50 per configuration (one figure per run, ``/``-separated), and its ratio to ``all on``'s."""
    out = ["| turns | replay | " + " | ".join(configs) + " |", "|---:|---|" + "---:|" * len(configs)]
    keys = sorted({(r["turns"], r["replay"]) for r in runs[0]}, key=lambda k: (k[0], k[1] == "mangled"))
    for turns, replay in keys:
        cells = []
        for c in configs:
            figs = [next(r for r in run if (r["turns"], r["replay"], r["config"]) == (turns, replay, c))
                    for run in runs]
            base = [next(r for r in run if (r["turns"], r["replay"], r["config"]) == (turns, replay, "all on"))
                    for run in runs]
            cell = " / ".join(f"{f['added_p50_ms']:.2f}" for f in figs)
            if c != "all on":
                cell += " (" + " / ".join(f"{f['added_p50_ms'] / b['added_p50_ms']:.2f}x"
                                          for f, b in zip(figs, base, strict=True)) + ")"
            cells.append(cell)
        out.append(f"| {turns} | {replay} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--sizes", default="10,100,500")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names of CONFIGS")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    configs = args.configs.split(",")
    runs = [asyncio.run(run([int(s) for s in args.sizes.split(",")], args.samples, configs))
            for _ in range(args.repeats)]
    print()
    print(markdown(runs, configs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()

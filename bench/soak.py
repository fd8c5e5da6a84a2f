"""Sustained load: N concurrent streaming tool loops through a two-worker gateway on a real Redis.

    python bench/soak.py [--loops 200] [--duration 300] [--workers 2] [--ttl 20] [--max-turns 4]
                         [--rounds 5] [--warmup 60] [--json out.json]

Starts real processes on loopback only: a redis-server, the simulator and ``thinkgate serve
--workers W`` with small ``GATEWAY_STATE_TTL_SECONDS`` / ``GATEWAY_STATE_MAX_TURNS``. Each of the
N loops plays streaming tool-loop conversations back to back (``[[sim:tools=R]]``, thinking on, the
full history replayed with its signatures, the conversation id sent back), for ``--duration``
seconds; every request is bounded by a timeout and the run stops by itself.

Sampled every second: the RSS of every gateway worker (``/proc/<pid>/status``), Redis ``DBSIZE`` and
``used_memory``. After the load, the run waits TTL + 3 s and samples Redis again (everything must
have expired). Verdicts (exit status 1 if any fails):

- zero errors (non-200, in-stream error events, streams cut before ``message_stop``, exceptions)
  and zero simulator rejections;
- flat RSS: each worker's RSS at the end is within ``max(10 %, 16 MiB)`` of its RSS after warm-up;
- Redis bounded: the keyspace plateaus (the peak in the second half of the run is at most 1.3x
  the peak between TTL and the half), the longest conversation holds at most ``--max-turns``
  turns, and the keyspace is (nearly) empty TTL + 3 s after the load stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.process_fixtures import start_process
from tests.redis_fixtures import RedisServer

KEY = "sk-soak"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"}
TOOLS = [{"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object"}}]
SCID = "x-ag-conversation-id"
REQUEST_TIMEOUT_S = 30


@dataclass
class Totals:
    requests: int = 0
    turns_ok: int = 0
    conversations: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


async def stream_turn(session: aiohttp.ClientSession, url: str, body: dict[str, Any], scid: str | None
                      ) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """One streamed request: (content blocks, stop_reason, conversation id). Raises on any failure."""
    headers = {**HEADERS, **({SCID: scid} if scid else {})}
    async with session.post(url + "/v1/messages", json=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        blocks: list[dict[str, Any]] = []
        partial: dict[int, str] = {}
        stop_reason, done, buf = None, False, b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                raw, buf = buf.split(b"\n\n", 1)
                data = next((line[5:].strip() for line in raw.split(b"\n") if line.startswith(b"data:")), b"")
                if not data:
                    continue
                ev = json.loads(data)
                kind = ev.get("type")
                if kind == "error":
                    raise RuntimeError(f"in-stream error: {ev.get('error')}")
                if kind == "content_block_start":
                    blocks.append(dict(ev["content_block"]))
                elif kind == "content_block_delta":
                    b, d = blocks[ev["index"]], ev["delta"]
                    if d["type"] == "text_delta":
                        b["text"] = b.get("text", "") + d["text"]
                    elif d["type"] == "thinking_delta":
                        b["thinking"] = b.get("thinking", "") + d["thinking"]
                    elif d["type"] == "signature_delta":
                        b["signature"] = d["signature"]
                    elif d["type"] == "input_json_delta":
                        partial[ev["index"]] = partial.get(ev["index"], "") + d["partial_json"]
                elif kind == "content_block_stop" and ev["index"] in partial:
                    blocks[ev["index"]]["input"] = json.loads(partial.pop(ev["index"]) or "{}")
                elif kind == "message_delta":
                    stop_reason = ev["delta"].get("stop_reason")
                elif kind == "message_stop":
                    done = True
        if not done:
            raise RuntimeError("stream ended before message_stop")
        return blocks, stop_reason, resp.headers.get(SCID)


async def loop(i: int, url: str, rounds: int, deadline: float, totals: Totals) -> None:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < deadline:
            totals.conversations += 1
            history: list[dict[str, Any]] = [
                {"role": "user", "content": f"[[sim:tools={rounds}]] weather? loop {i} conv {totals.conversations}"}]
            scid = None
            for _ in range(rounds + 1):
                body = {"model": "claude-opus-4-5", "max_tokens": 4096, "stream": True, "tools": TOOLS,
                        "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": history}
                t0 = time.perf_counter()
                totals.requests += 1
                try:
                    blocks, stop, scid = await stream_turn(session, url, body, scid)
                except Exception as e:  # every failure counts; start a new conversation
                    totals.errors.append(f"loop {i}: {type(e).__name__}: {str(e)[:200]}")
                    break
                totals.latencies.append(time.perf_counter() - t0)
                totals.turns_ok += 1
                if stop != "tool_use" or time.monotonic() >= deadline:
                    break
                results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
                           for b in blocks if b["type"] == "tool_use"]
                history = [*history, {"role": "assistant", "content": blocks}, {"role": "user", "content": results}]


def worker_pids(pid: int) -> list[int]:
    """The gateway's worker processes (its children but multiprocessing's resource tracker; itself
    when it has none)."""
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    workers = [k for k in kids if b"resource_tracker" not in Path(f"/proc/{k}/cmdline").read_bytes()]
    return workers or [pid]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def redis_sample(client: redis.Redis) -> tuple[int, int]:
    return int(client.dbsize()), int(client.info("memory")["used_memory"])


async def monitor(pids: list[int], client: redis.Redis, until: float, samples: list[dict[str, Any]],
                  totals: Totals) -> None:
    start = time.monotonic()
    while time.monotonic() < until:
        keys, mem = await asyncio.to_thread(redis_sample, client)
        samples.append({"t": round(time.monotonic() - start, 1), "rss": [round(rss_mib(p), 1) for p in pids],
                        "dbsize": keys, "used_memory": mem, "turns": totals.turns_ok})
        await asyncio.sleep(1.0)  # a sampling period, not a wait for an event


def longest_conversation(client: redis.Redis) -> int:
    return max((int(client.llen(k)) for k in client.scan_iter(match="tg:*:turns", count=1000)), default=0)


def turn_rate(samples: list[dict[str, Any]], start: float, end: float) -> float:
    """Turns recorded per second between the first and the last sample in [start, end)."""
    inside = [s for s in samples if start <= s["t"] < end]
    if len(inside) < 2 or inside[-1]["t"] <= inside[0]["t"]:
        return 0.0
    return (inside[-1]["turns"] - inside[0]["turns"]) / (inside[-1]["t"] - inside[0]["t"])


def verdicts(args: argparse.Namespace, totals: Totals, rejections: int, samples: list[dict[str, Any]],
             longest: int, drained: int) -> dict[str, Any]:
    warm = next((s for s in samples if s["t"] >= args.warmup), samples[0])
    end = samples[-1]
    growth = [e - w for w, e in zip(warm["rss"], end["rss"], strict=True)]
    rss_ok = all(g <= max(0.10 * w, 16.0) for g, w in zip(growth, warm["rss"], strict=True))
    half = args.duration / 2
    first = [s["dbsize"] for s in samples if args.ttl <= s["t"] < half] or [1]
    second = [s["dbsize"] for s in samples if s["t"] >= half] or [0]
    peak = max(s["dbsize"] for s in samples)
    # The keyspace a TTL keeps is proportional to the recording rate: a second half that ran faster (a busy
    # box slowed the first) may hold more keys without anything failing to expire.
    speedup = max(1.0, turn_rate(samples, half, math.inf) / max(turn_rate(samples, args.ttl, half), 1e-9))
    return {
        "errors_ok": not totals.errors and rejections == 0,
        "rss_ok": rss_ok,
        "keyspace_plateau_ok": max(second) <= 1.3 * max(first) * speedup + 50,
        "turn_rate_second_vs_first_half": round(speedup, 2),
        "max_turns_ok": longest <= args.max_turns,
        "expired_ok": drained <= max(10, peak // 20),
        "rss_warm_mib": warm["rss"], "rss_end_mib": end["rss"], "rss_growth_mib": [round(g, 1) for g in growth],
        "dbsize_peak_first_half": max(first), "dbsize_peak_second_half": max(second), "dbsize_peak": peak,
        "used_memory_peak_mib": round(max(s["used_memory"] for s in samples) / 2**20, 1),
        "longest_conversation": longest, "dbsize_after_ttl": drained,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = RedisServer()
    server.start()
    sim = gateway = None
    try:
        sim = start_process("sim", ["sim"], "/_sim/stats")
        env = {"GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_REDIS_URL": server.url,
               "GATEWAY_SECRET": "soak-secret-0123456789abcdef0123",
               "GATEWAY_STATE_TTL_SECONDS": str(args.ttl), "GATEWAY_STATE_MAX_TURNS": str(args.max_turns),
               "GATEWAY_STORE_TIMEOUT_MS": "500", "GATEWAY_LOG_LEVEL": "WARNING"}
        gateway = start_process("gateway", ["serve", "--workers", str(args.workers)], "/healthz", env)
        pids = worker_pids(gateway.proc.pid)
        async with aiohttp.ClientSession() as s, s.get(sim.url + "/_sim/stats") as r:
            before = sum((await r.json())["rejections"].values())
        totals, samples = Totals(), []
        deadline = time.monotonic() + args.duration
        with server.client() as client:
            mon = asyncio.create_task(monitor(pids, client, deadline, samples, totals))
            await asyncio.gather(*(loop(i, gateway.url, args.rounds, deadline, totals) for i in range(args.loops)))
            await mon
            longest = longest_conversation(client)
            await asyncio.sleep(args.ttl + 3)  # let every key's TTL run out
            drained, _ = redis_sample(client)
        async with aiohttp.ClientSession() as s, s.get(sim.url + "/_sim/stats") as r:
            rejections = sum((await r.json())["rejections"].values()) - before
        lat = sorted(totals.latencies) or [0.0]
        result = {
            "config": vars(args), "requests": totals.requests, "turns_ok": totals.turns_ok,
            "conversations": totals.conversations, "errors": len(totals.errors), "error_samples": totals.errors[:5],
            "rejections": rejections, "rps": round(totals.turns_ok / args.duration, 1),
            "latency_ms": {"p50": round(statistics.median(lat) * 1000, 1),
                           "p99": round(lat[int(len(lat) * 0.99) - 1 if len(lat) > 1 else 0] * 1000, 1)},
            "worker_pids": pids,
        }
        result["verdicts"] = verdicts(args, totals, rejections, samples, longest, drained)
        result["ok"] = all(v for k, v in result["verdicts"].items() if k.endswith("_ok"))
        result["samples"] = samples
        return result
    finally:
        for proc in (gateway, sim):
            if proc is not None:
                proc.stop()
                os.unlink(proc.log_path)
        server.cleanup()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", type=int, default=200)
    p.add_argument("--duration", type=float, default=300.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ttl", type=int, default=20, help="GATEWAY_STATE_TTL_SECONDS")
    p.add_argument("--max-turns", type=int, default=4, help="GATEWAY_STATE_MAX_TURNS")
    p.add_argument("--rounds", type=int, default=5, help="tool rounds per conversation (> max turns: trimming)")
    p.add_argument("--warmup", type=float, default=60.0, help="seconds before the RSS baseline")
    p.add_argument("--json", help="write the full result (with samples) here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    result = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    summary = {k: v for k, v in result.items() if k not in ("samples", "config")}
    print(json.dumps(summary, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())


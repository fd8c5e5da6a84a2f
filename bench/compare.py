"""thinkgate side by side with a direct call, a bare proxy and a peer gateway (LiteLLM), one run.

    python bench/compare.py [--samples 20] [--sizes 10,100,500] [--concurrency 32] [--duration 8]
                            [--litellm PATH] [--out bench/results]

Every process runs on loopback on this machine, started here and stopped at the end:

- **direct**: the client calls the simulator itself (a zero-latency scripted upstream);
- **bare**: ``bench/bare_proxy.py``, a minimal Starlette + aiohttp pass-through (this stack's floor);
- **tg-embedded** / **tg-redis** / **tg-redis-w2**: ``thinkgate serve`` with the embedded store, with a
  real local ``redis-server``, and that with ``--workers 2``;
- **litellm**: LiteLLM's proxy (``--litellm``, default: ``litellm`` on PATH or in ``.venv-bench``; the
  ``bench`` extra installs it) in plain pass-through (``/anthropic/v1/messages``, the simulator as its
  Anthropic API base). Skipped, and said so, when it is not installed.

Workloads and figures (each figure is measured against baselines taken in the same run, requests sent
to every target alternately in rotating order so they share the machine's load):

1. **latency**: Anthropic Messages, non-stream, replayed tool loops of N turns (tool results of 3 KB,
   thinking on; each sample continues the loop, from N - samples/2 turns on, so the median is at N),
   faithful and mangled (signatures dropped, thinking trimmed; its baselines send the faithful
   request of the same size). Added p50/p99 over direct; thinkgate's added p50 over the bare
   proxy's.
2. **stream**: the same with ``stream: true``: time to first byte and to the last byte.
3. **openai**: OpenAI Chat Completions through thinkgate to the Anthropic upstream (the Cursor case);
   direct and bare send the translated Anthropic body thinkgate sent (read back from the simulator).
4. **throughput**: ``--concurrency`` clients each playing 10-round tool loops for ``--duration``
   seconds: requests/s, CPU ms per request (the target's processes), RSS per worker.
5. **store**: store round trips per request (``gateway_store_round_trips_total``) and Redis bytes per
   recorded turn (``MEMORY USAGE``) against the turn's own JSON size.

Results: a markdown report on stdout and in ``OUT/compare.md``, every number in ``OUT/compare.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import KEY, RESULT, TOOLS, Proc, free_port, mangle, pct, start_redis, wait_http

ROOT = Path(__file__).resolve().parent.parent
LITELLM_KEY = "sk-bench-litellm-master-key-0123456789"
LOOP_ROUNDS = 10  # throughput: each client's tool loop restarts after this many rounds


# ------------------------------------------------------------------ processes

def spawn(cmd: list[str], env: dict[str, str], health: str, port: int) -> Proc:
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + health, proc)
    return Proc(url, proc)


def thinkgate(sim: str, env: dict[str, str], workers: int = 1) -> Proc:
    port = free_port()
    return spawn([sys.executable, "-m", "gateway", "serve", "--port", str(port), "--workers", str(workers)],
                 {"GATEWAY_ANTHROPIC_BASE_URL": sim, "GATEWAY_LOG_LEVEL": "WARNING", **env}, "/healthz", port)


def bare_proxy(sim: str) -> Proc:
    port = free_port()
    return spawn([sys.executable, str(ROOT / "bench" / "bare_proxy.py"), "--upstream", sim, "--port", str(port)],
                 {}, "/healthz", port)


def find_litellm(explicit: str | None) -> str | None:
    here = str(Path(sys.executable).parent / "litellm")  # the venv running this script (.venv-bench)
    for cand in (explicit, here, shutil.which("litellm"), str(ROOT / ".venv-bench" / "bin" / "litellm")):
        if cand and Path(cand).exists():
            return cand
    return None


def litellm(exe: str, sim: str, tmp: str) -> Proc:
    port = free_port()
    cfg = Path(tmp) / "litellm.yaml"
    cfg.write_text("model_list:\n  - model_name: claude-opus-4-5\n    litellm_params:\n"
                   f"      model: anthropic/claude-opus-4-5\n      api_base: {sim}\n      api_key: sk-bench\n")
    env = {"LITELLM_MASTER_KEY": LITELLM_KEY, "ANTHROPIC_API_BASE": sim, "ANTHROPIC_API_KEY": "sk-bench",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    return spawn([exe, "--config", str(cfg), "--port", str(port), "--num_workers", "1"], env, "/health/liveliness",
                 port)


# ------------------------------------------------------------------ one target, one request

class Target:
    """Where a request goes: base URL, path prefix and auth headers."""

    def __init__(self, name: str, proc: Proc | None, url: str, prefix: str = "",
                 headers: dict[str, str] | None = None) -> None:
        self.name, self.proc, self.url, self.prefix = name, proc, url, prefix
        self.headers = {**KEY, "content-type": "application/json", **(headers or {})}

    def endpoint(self, path: str) -> str:
        return self.url + self.prefix + path


async def timed(session: aiohttp.ClientSession, target: Target, path: str, payload: bytes,
                headers: dict[str, str] | None = None) -> tuple[float, float, bytes]:
    """(time to first body byte, time to last byte, body) in ms."""
    t0 = time.perf_counter()
    async with session.post(target.endpoint(path), data=payload, headers={**target.headers, **(headers or {})}) as r:
        first = None
        chunks = []
        async for chunk in r.content.iter_any():
            if first is None:
                first = time.perf_counter()
            chunks.append(chunk)
        end = time.perf_counter()
        data = b"".join(chunks)
        if r.status != 200:
            raise RuntimeError(f"{target.name}: {r.status} {data[:300]!r}")
    return ((first or end) - t0) * 1000, (end - t0) * 1000, data


def anthropic_body(history: list[dict[str, Any]], stream: bool = False) -> dict[str, Any]:
    out = {"model": "claude-opus-4-5", "max_tokens": 4096, "tools": TOOLS,
           "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": history}
    if stream:
        out["stream"] = True
    return out


def extend(history: list[dict[str, Any]], content: list[dict[str, Any]]) -> None:
    history.append({"role": "assistant", "content": content})
    history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT}
                                                for b in content if b["type"] == "tool_use"]})


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


def start_turns(size: int, samples: int) -> int:
    """Every sample continues the loop by one round, so the history grows while it is measured: start
    half the samples early, and the median sample replays ``size`` turns."""
    return max(1, size - samples // 2)


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(xs), "p99": pct(xs, 99)}


# ------------------------------------------------------------------ 1-2: latency and stream

async def latency_series(session: aiohttp.ClientSession, gw: Target, baselines: list[Target], size: int,
                         samples: int, mangled: bool, stream: bool) -> dict[str, Any]:
    rounds = size + samples + 5
    history: list[dict[str, Any]] = [{"role": "user",
                                      "content": f"[[sim:tools={rounds}]] bench {gw.name} {mangled} {stream}"}]
    for _ in range(start_turns(size, samples)):  # played through the gateway: it holds records of every turn
        _, _, data = await timed(session, gw, "/v1/messages", json.dumps(anthropic_body(history)).encode())
        extend(history, json.loads(data)["content"])
    ttfb: dict[str, list[float]] = {t.name: [] for t in [*baselines, gw]}
    total: dict[str, list[float]] = {t.name: [] for t in [*baselines, gw]}
    targets = [*baselines, gw]
    for i in range(samples):
        faithful = json.dumps(anthropic_body(history, stream)).encode()
        sent = json.dumps(anthropic_body(mangle(history), stream)).encode() if mangled else faithful
        answer: list[dict[str, Any]] = []
        order = targets[i % len(targets):] + targets[:i % len(targets)]
        for t in order:
            first, last, data = await timed(session, t, "/v1/messages", sent if t is gw else faithful)
            ttfb[t.name].append(first)
            total[t.name].append(last)
            if t is gw:
                answer = content_of_stream(data) if stream else json.loads(data)["content"]
        extend(history, answer)
    direct = total["direct"]
    out: dict[str, Any] = {"turns": size, "gateway": gw.name, "replay": "mangled" if mangled else "faithful",
                           "stream": stream, "request_kb": len(faithful) / 1024}
    for name in total:
        added = [x - d for x, d in zip(total[name], direct, strict=True)]
        out[name] = {"total": summary(total[name]), "ttfb": summary(ttfb[name]), "added": summary(added),
                     "ttfb_added": summary([x - d for x, d in zip(ttfb[name], ttfb["direct"], strict=True)])}
    return out


# ------------------------------------------------------------------ 3: OpenAI chat through thinkgate

async def openai_series(session: aiohttp.ClientSession, gw: Target, baselines: list[Target], sim: str, size: int,
                        samples: int) -> dict[str, Any]:
    rounds = size + samples + 5
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools={rounds}]] openai bench {gw.name}"}]

    def body() -> bytes:
        return json.dumps({"model": "claude-opus-4-5", "max_tokens": 4096, "reasoning_effort": "medium",
                           "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {
                               "type": "object"}}}], "messages": history}).encode()

    def extend_oai(data: bytes) -> None:
        msg = json.loads(data)["choices"][0]["message"]
        history.append({k: v for k, v in msg.items() if v is not None})
        for call in msg.get("tool_calls") or []:
            history.append({"role": "tool", "tool_call_id": call["id"], "content": RESULT})

    auth = {"authorization": "Bearer sk-bench"}
    for _ in range(start_turns(size, samples)):
        _, _, data = await timed(session, gw, "/v1/chat/completions", body(), auth)
        extend_oai(data)
    total: dict[str, list[float]] = {t.name: [] for t in [*baselines, gw]}
    for i in range(samples):
        _, g, data = await timed(session, gw, "/v1/chat/completions", body(), auth)
        async with session.get(sim + "/_sim/last") as r:
            translated = json.dumps((await r.json())["body"]).encode()  # what thinkgate sent upstream
        total[gw.name].append(g)
        order = baselines[i % len(baselines):] + baselines[:i % len(baselines)]
        for t in order:
            _, last, _ = await timed(session, t, "/v1/messages", translated)
            total[t.name].append(last)
        extend_oai(data)
    direct = total["direct"]
    out: dict[str, Any] = {"turns": size, "gateway": gw.name, "workload": "openai-chat"}
    for name in total:
        out[name] = {"total": summary(total[name]),
                     "added": summary([x - d for x, d in zip(total[name], direct, strict=True)])}
    return out


# ------------------------------------------------------------------ 4: throughput

def tree_cpu_rss(proc: Proc | None) -> tuple[float, list[int]]:
    """CPU seconds (user+system) of a target's process tree, and each process's RSS in bytes."""
    import psutil

    if proc is None:
        return 0.0, []
    root = psutil.Process(proc.proc.pid)
    children = root.children(recursive=True)
    # with --workers N the root is hypercorn's supervisor: the workers are its spawned children (the
    # multiprocessing resource tracker, a small helper, is not one)
    workers = [c for c in children if "resource_tracker" not in " ".join(c.cmdline())] or [root]
    cpu, rss = 0.0, []
    for p in [root, *children]:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            if p in workers:
                rss.append(p.memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    return cpu, rss


async def throughput(target: Target, concurrency: int, duration: float) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    done = 0
    errors = 0
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def client(c: int) -> None:
            nonlocal done, errors
            loop = 0
            while time.monotonic() < stop:
                history: list[dict[str, Any]] = [
                    {"role": "user", "content": f"[[sim:tools={LOOP_ROUNDS}]] rps {target.name} {c} {loop}"}]
                loop += 1
                for _ in range(LOOP_ROUNDS):
                    if time.monotonic() >= stop:
                        return
                    try:
                        _, _, data = await timed(session, target, "/v1/messages",
                                                 json.dumps(anthropic_body(history)).encode())
                    except (RuntimeError, aiohttp.ClientError):
                        errors += 1
                        break
                    done += 1
                    extend(history, json.loads(data)["content"])

        stop = time.monotonic() + 1.0  # warm-up: connections, caches
        await asyncio.gather(*(client(c) for c in range(concurrency)))
        done = errors = 0
        cpu0, _ = tree_cpu_rss(target.proc)
        t0 = time.monotonic()
        stop = t0 + duration
        await asyncio.gather(*(client(c) for c in range(concurrency)))
        elapsed = time.monotonic() - t0
        cpu1, rss = tree_cpu_rss(target.proc)
    return {"target": target.name, "concurrency": concurrency, "requests": done, "errors": errors,
            "rps": done / elapsed, "cpu_ms_per_request": (cpu1 - cpu0) * 1000 / done if done and target.proc else None,
            "rss_mb_per_worker": [round(r / 2**20, 1) for r in rss]}


# ------------------------------------------------------------------ 5: store

async def metric(session: aiohttp.ClientSession, url: str, name: str) -> float:
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


async def store_figures(session: aiohttp.ClientSession, gw: Target, redis_url: str) -> dict[str, Any]:
    import orjson
    import redis

    rounds = 20
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools={rounds}]] store figures"}]
    before = await metric(session, gw.url, "gateway_store_round_trips_total")
    reqs = await metric(session, gw.url, 'gateway_requests_total{endpoint="messages"')
    json_bytes = 0
    for _ in range(rounds):
        _, _, data = await timed(session, gw, "/v1/messages", json.dumps(anthropic_body(history)).encode())
        content = json.loads(data)["content"]
        json_bytes += len(orjson.dumps(content))
        extend(history, content)
    trips = await metric(session, gw.url, "gateway_store_round_trips_total") - before
    n = await metric(session, gw.url, 'gateway_requests_total{endpoint="messages"') - reqs
    client = redis.Redis.from_url(redis_url)
    turn_keys = [k for k in client.scan_iter("*:turns") if client.llen(k) == rounds]
    turns_key = turn_keys[-1]
    tag = turns_key.decode().split("}")[0] + "}"
    conv_bytes = sum(client.memory_usage(k) or 0 for k in client.scan_iter(tag + "*"))
    list_bytes = client.memory_usage(turns_key) or 0
    blob_bytes = sum(len(b) for b in client.lrange(turns_key, 0, -1))
    client.close()
    return {"store_round_trips_per_request": trips / n if n else None, "turn_json_bytes": json_bytes / rounds,
            "stored_record_bytes": blob_bytes / rounds, "redis_turn_list_bytes_per_turn": list_bytes / rounds,
            "redis_conversation_keys_bytes_per_turn": conv_bytes / rounds}


# ------------------------------------------------------------------ report

def f(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def report(res: dict[str, Any]) -> str:
    out = [f"# thinkgate comparison ({res['date']}, {res['machine']})", ""]
    base = [n for n in ("bare", "litellm") if n in res["targets"]]
    out += ["## Added latency over direct, Anthropic non-stream (ms)", "",
            "| turns | request KB | gateway | replay | direct p50 | " + " | ".join(f"{b} added p50" for b in base)
            + " | thinkgate added p50 | added p99 | thinkgate / bare |",
            "|---:|---:|---|---|---:|" + "---:|" * len(base) + "---:|---:|---:|"]
    for r in res["latency"]:
        if r["stream"]:
            continue
        g = r[r["gateway"]]["added"]
        ratio = g["p50"] / r["bare"]["added"]["p50"] if r["bare"]["added"]["p50"] > 0 else float("nan")
        out.append(f"| {r['turns']} | {r['request_kb']:.0f} | {r['gateway']} | {r['replay']} | "
                   f"{f(r['direct']['total']['p50'])} | " + " | ".join(f(r[b]["added"]["p50"]) for b in base)
                   + f" | {f(g['p50'])} | {f(g['p99'])} | {ratio:.2f}x |")
    out += ["", "## Streaming (ms): time to first byte and to the last byte", "",
            "| turns | target | TTFB p50 | TTFB added p50 | last byte p50 | added p50 |",
            "|---:|---|---:|---:|---:|---:|"]
    for r in res["latency"]:
        if not r["stream"]:
            continue
        for name in ("direct", *base, r["gateway"]):
            x = r[name]
            out.append(f"| {r['turns']} | {name} | {f(x['ttfb']['p50'])} | {f(x['ttfb_added']['p50'])} | "
                       f"{f(x['total']['p50'])} | {f(x['added']['p50'])} |")
    out += ["", "## OpenAI Chat Completions -> Anthropic upstream (ms)", "",
            "| turns | direct p50 | bare added p50 | thinkgate added p50 | added p99 |", "|---:|---:|---:|---:|---:|"]
    for r in res["openai"]:
        out.append(f"| {r['turns']} | {f(r['direct']['total']['p50'])} | {f(r['bare']['added']['p50'])} | "
                   f"{f(r[r['gateway']]['added']['p50'])} | {f(r[r['gateway']]['added']['p99'])} |")
    out += ["", f"## Throughput: {res['throughput'][0]['concurrency']} concurrent tool loops", "",
            "| target | requests/s | vs bare | CPU ms/request | RSS MB per worker | errors |",
            "|---|---:|---:|---:|---|---:|"]
    bare_rps = next(t["rps"] for t in res["throughput"] if t["target"] == "bare")
    for t in res["throughput"]:
        out.append(f"| {t['target']} | {t['rps']:.0f} | {t['rps'] / bare_rps:.2f}x | {f(t['cpu_ms_per_request'])} | "
                   f"{', '.join(map(str, t['rss_mb_per_worker'])) or 'n/a'} | {t['errors']} |")
    s = res["store"]
    out += ["", "## Store (tg-redis, 20-turn tool loop)", "",
            f"- store round trips per request: {f(s['store_round_trips_per_request'])} (load + record)",
            f"- turn JSON {s['turn_json_bytes']:.0f} B; stored record {s['stored_record_bytes']:.0f} B "
            f"({100 * s['stored_record_bytes'] / s['turn_json_bytes']:.0f}% of JSON); Redis MEMORY USAGE of the turn "
            f"list {s['redis_turn_list_bytes_per_turn']:.0f} B/turn, of the conversation's keys "
            f"{s['redis_conversation_keys_bytes_per_turn']:.0f} B/turn"]
    if res.get("notes"):
        out += ["", *[f"- {n}" for n in res["notes"]]]
    return "\n".join(out)


# ------------------------------------------------------------------ main

async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = tempfile.mkdtemp(prefix="tg-compare-")
    procs: list[Proc] = []
    notes: list[str] = []

    def keep(p: Proc) -> Proc:
        procs.append(p)
        return p

    try:
        sim_port = free_port()
        sim = keep(spawn([sys.executable, "-m", "gateway", "sim", "--port", str(sim_port)], {}, "/_sim/stats",
                         sim_port))
        redis = keep(start_redis())
        redis_env = {"GATEWAY_REDIS_URL": redis.url, "GATEWAY_SECRET": "bench-secret",
                     "GATEWAY_STORE_TIMEOUT_MS": "1000"}
        direct = Target("direct", None, sim.url)
        bare_p = keep(bare_proxy(sim.url))
        bare = Target("bare", bare_p, bare_p.url)
        baselines = [direct, bare]
        exe = None if args.no_litellm else find_litellm(args.litellm)
        if exe is not None:
            ll = keep(litellm(exe, sim.url, tmp))
            baselines.append(Target("litellm", ll, ll.url, "/anthropic", {"authorization": f"Bearer {LITELLM_KEY}"}))
        else:
            notes.append("LiteLLM not installed (pip install -e '.[bench]' in .venv-bench): no peer-gateway column")
        emb_p = keep(thinkgate(sim.url, {}))
        red_p = keep(thinkgate(sim.url, redis_env))
        gws = [Target("tg-embedded", emb_p, emb_p.url), Target("tg-redis", red_p, red_p.url)]
        res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} cores",
                               "targets": [t.name for t in [*baselines, *gws]], "latency": [], "openai": [],
                               "throughput": [], "notes": notes, "args": vars(args)}
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for size in sizes:
                for gw in gws:
                    for mangled in (False, True):
                        row = await latency_series(session, gw, baselines, size, args.samples, mangled, False)
                        res["latency"].append(row)
                        print(f"latency turns={size} {gw.name} {row['replay']}: direct "
                              f"{row['direct']['total']['p50']:.2f} ms, added bare {row['bare']['added']['p50']:.2f}"
                              f" / {gw.name} {row[gw.name]['added']['p50']:.2f} ms", flush=True)
                row = await latency_series(session, gws[1], baselines, size, args.samples, False, True)
                res["latency"].append(row)
                print(f"stream turns={size}: ttfb direct {row['direct']['ttfb']['p50']:.2f} bare "
                      f"{row['bare']['ttfb']['p50']:.2f} tg {row['tg-redis']['ttfb']['p50']:.2f} ms", flush=True)
                row = await openai_series(session, gws[1], baselines[:2], sim.url, size, args.samples)
                res["openai"].append(row)
                print(f"openai turns={size}: added {row['tg-redis']['added']['p50']:.2f} ms", flush=True)
            res["store"] = await store_figures(session, gws[1], redis.url)
        emb_p.stop()  # free the cores for the throughput runs
        red_p.stop()
        procs.remove(emb_p)
        procs.remove(red_p)
        runs: list[tuple[str, Callable[[], Proc | None], str]] = [
            ("direct", lambda: None, ""), ("bare", lambda: bare_p, ""),
            ("tg-redis", lambda: thinkgate(sim.url, redis_env), ""),
            ("tg-redis-w2", lambda: thinkgate(sim.url, redis_env, workers=2), ""),
        ]
        if exe is not None:
            runs.insert(2, ("litellm", lambda: baselines[2].proc, "/anthropic"))
        for name, make, prefix in runs:
            p = make()
            url = p.url if p is not None else sim.url
            extra = {"authorization": f"Bearer {LITELLM_KEY}"} if name == "litellm" else None
            row = await throughput(Target(name, p, url, prefix, extra), args.concurrency, args.duration)
            res["throughput"].append(row)
            print(f"throughput {name}: {row['rps']:.0f} req/s, cpu {row['cpu_ms_per_request']} ms/req", flush=True)
            if name.startswith("tg-") and p is not None:
                p.stop()
        return res
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--sizes", default="10,100,500")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--litellm", default=None, help="the litellm executable (default: found beside this python, "
                                                    "on PATH or in .venv-bench)")
    ap.add_argument("--no-litellm", action="store_true", help="skip the peer gateway")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    res = asyncio.run(run(args))
    md = report(res)
    print()
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(md + "\n")
    (out / "compare.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

"""thinkgate side by side with a direct call, a bare proxy and a peer gateway (LiteLLM), one run.

    python bench/compare.py [--samples 20] [--repeats 1] [--sizes 10,100,500] [--concurrency 32] [--duration 8]
                            [--litellm PATH] [--out bench/results]

Every process runs on loopback on this machine, started here and stopped at the end:

- **direct**: the client calls the simulator itself (a zero-latency scripted upstream);
- **bare**: ``bench/bare_proxy.py``, a minimal Starlette + aiohttp pass-through (this stack's floor);
- **tg-embedded** / **tg-redis** / **tg-redis-w2**: ``thinkgate serve`` with the embedded store, with a
  real local ``redis-server``, and that with ``--workers 2``;
- **litellm**: LiteLLM's proxy (``--litellm``, default: ``litellm`` on PATH or in ``.venv-bench``; the
  ``bench`` extra installs it) in plain pass-through (``/anthropic/v1/messages``, the simulator as its
  Anthropic API base). Skipped, and said so, when it is not installed. Before it is measured, one
  replayed request checks that it really passes through: one upstream request, accepted by the
  simulator, the messages unchanged, the simulator's signed answer back.

A gateway with ``--workers N`` is used only once each of its N workers has answered ``/healthz`` (which
names the worker's pid), over a new connection per probe: the first worker to listen answers health
checks while the others still start, and keep-alive connections opened then would all stay on it.

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
5. **store**: store round trips per request (``gateway_store_round_trips_total``) and bytes per recorded
   turn, played under a credential (hence a tenant) of its own: the stored record alone, and Redis
   ``MEMORY USAGE`` of the turn list, of the conversation's keys, and of all the tenant's keys including
   the index keys, each against the turn's own JSON (the assistant content; and that with the prompt
   a record also keeps).

The simulator's request, acceptance and rejection counts for the whole run close the report (a
rejection means some target did not pass a faithful or repaired history through).

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

from bench.latency import (
    KEY,
    RESULT,
    TOOLS,
    Proc,
    content_of_stream,
    free_port,
    mangle,
    pct,
    start_redis,
    wait_http,
)

ROOT = Path(__file__).resolve().parent.parent
LITELLM_KEY = "sk-bench-litellm-master-key-0123456789"
STORE_KEY = "sk-bench-store-figures"  # the store figures' own credential, hence their own tenant
LOOP_ROUNDS = 10  # throughput: each client's tool loop restarts after this many rounds


# ------------------------------------------------------------------ processes

def spawn(cmd: list[str], env: dict[str, str], health: str, port: int, timeout: float = 20.0) -> Proc:
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + health, proc, timeout)
    except RuntimeError:
        Proc(url, proc).stop()
        raise
    return Proc(url, proc)


def wait_workers(proc: Proc, workers: int, timeout: float = 30.0) -> set[int]:
    """Until each of ``workers`` processes answered ``/healthz`` (which names its pid): the first worker to
    listen answers the health poll while the others may still be starting, and a throughput run begun
    then would pin its keep-alive connections to that one worker. Every probe is a new connection (no
    keep-alive in urllib), which the kernel hands to any listening worker (SO_REUSEPORT)."""
    import urllib.request

    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < workers:
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"only workers {sorted(seen)} of {workers} answered at {proc.url}")
        try:
            with urllib.request.urlopen(proc.url + "/healthz", timeout=1) as r:
                seen.add(int(json.load(r)["worker"]))
        except OSError:
            time.sleep(0.05)  # polling a starting process's port: there is no event to await
    return seen


def thinkgate(sim: str, env: dict[str, str], workers: int = 1) -> Proc:
    port = free_port()
    proc = spawn([sys.executable, "-m", "gateway", "serve", "--port", str(port), "--workers", str(workers)],
                 {"GATEWAY_ANTHROPIC_BASE_URL": sim, "GATEWAY_LOG_LEVEL": "WARNING", **env}, "/healthz", port)
    try:
        wait_workers(proc, workers)
    except RuntimeError:
        proc.stop()
        raise
    return proc


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
                 port, timeout=120.0)  # LiteLLM imports for many seconds on a busy machine


async def sim_stats(session: aiohttp.ClientSession, sim: str) -> dict[str, Any]:
    async with session.get(sim + "/_sim/stats") as r:
        return dict(await r.json())


async def check_passthrough(session: aiohttp.ClientSession, target: Target, sim: str) -> dict[str, Any]:
    """One request through ``target``: it must reach the simulator once, be accepted, carry the client's
    messages unchanged, and come back as the simulator's answer (a pass-through, not a stub or a retry)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=2]] pass-through check"}]
    _, _, data = await timed(session, target, "/v1/messages", json.dumps(anthropic_body(history)).encode())
    extend(history, json.loads(data)["content"])  # a second round replays thinking and its signature
    before = await sim_stats(session, sim)
    _, _, data = await timed(session, target, "/v1/messages", json.dumps(anthropic_body(history)).encode())
    after = await sim_stats(session, sim)
    async with session.get(sim + "/_sim/last") as r:
        upstream_body = (await r.json())["body"]
    out = {"upstream_requests": after["requests"] - before["requests"],
           "accepted": after["accepted"] - before["accepted"],
           "messages_unchanged": upstream_body.get("messages") == history,
           "answer_has_signed_thinking": any(b.get("type") == "thinking" and b.get("signature")
                                             for b in json.loads(data)["content"])}
    if not (out["upstream_requests"] == out["accepted"] == 1 and out["messages_unchanged"]
            and out["answer_has_signed_thinking"]):
        raise RuntimeError(f"{target.name} is not a plain pass-through to the simulator: {out}")
    return out


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


def start_turns(size: int, samples: int) -> int:
    """Every sample continues the loop by one round, so the history grows while it is measured: start
    half the samples early, and the median sample replays ``size`` turns."""
    return max(1, size - samples // 2)


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(xs), "p99": pct(xs, 99)}


# ------------------------------------------------------------------ 1-2: latency and stream

async def latency_series(session: aiohttp.ClientSession, gw: Target, baselines: list[Target], size: int,
                         samples: int, mangled: bool, stream: bool, repeats: int = 1) -> dict[str, Any]:
    """``samples`` rounds continuing each of ``repeats`` conversations (so a cell holds samples x repeats)."""
    ttfb: dict[str, list[float]] = {t.name: [] for t in [*baselines, gw]}
    total: dict[str, list[float]] = {t.name: [] for t in [*baselines, gw]}
    request_kb = [await latency_conversation(session, gw, baselines, size, samples, mangled, stream, rep, ttfb, total)
                  for rep in range(repeats)]
    direct = total["direct"]
    out: dict[str, Any] = {"turns": size, "gateway": gw.name, "replay": "mangled" if mangled else "faithful",
                           "stream": stream, "request_kb": request_kb[0], "samples": len(direct)}
    for name in total:
        added = [x - d for x, d in zip(total[name], direct, strict=True)]
        out[name] = {"total": summary(total[name]), "ttfb": summary(ttfb[name]), "added": summary(added),
                     "ttfb_added": summary([x - d for x, d in zip(ttfb[name], ttfb["direct"], strict=True)])}
    return out


async def latency_conversation(session: aiohttp.ClientSession, gw: Target, baselines: list[Target], size: int,
                               samples: int, mangled: bool, stream: bool, rep: int, ttfb: dict[str, list[float]],
                               total: dict[str, list[float]]) -> float:
    """One conversation's samples appended to ``ttfb`` and ``total``; returns the median sample's request KB."""
    rounds = size + samples + 5
    history: list[dict[str, Any]] = [{"role": "user",
                                      "content": f"[[sim:tools={rounds}]] bench {gw.name} {mangled} {stream} {rep}"}]
    for _ in range(start_turns(size, samples)):  # played through the gateway: it holds records of every turn
        _, _, data = await timed(session, gw, "/v1/messages", json.dumps(anthropic_body(history)).encode())
        extend(history, json.loads(data)["content"])
    targets = [*baselines, gw]
    median_kb = 0.0
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
        if i == samples // 2:
            median_kb = len(faithful) / 1024
        extend(history, answer)
    return median_kb


# ------------------------------------------------------------------ 3: OpenAI chat through thinkgate

async def openai_series(session: aiohttp.ClientSession, gw: Target, baselines: list[Target], sim: str, size: int,
                        samples: int, repeats: int = 1) -> dict[str, Any]:
    total: dict[str, list[float]] = {t.name: [] for t in [*baselines, gw]}
    for rep in range(repeats):
        await openai_conversation(session, gw, baselines, sim, size, samples, rep, total)
    direct = total["direct"]
    out: dict[str, Any] = {"turns": size, "gateway": gw.name, "workload": "openai-chat", "samples": len(direct)}
    for name in total:
        out[name] = {"total": summary(total[name]),
                     "added": summary([x - d for x, d in zip(total[name], direct, strict=True)])}
    return out


async def openai_conversation(session: aiohttp.ClientSession, gw: Target, baselines: list[Target], sim: str,
                              size: int, samples: int, rep: int, total: dict[str, list[float]]) -> None:
    rounds = size + samples + 5
    history: list[dict[str, Any]] = [{"role": "user",
                                      "content": f"[[sim:tools={rounds}]] openai bench {gw.name} {rep}"}]

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


# ------------------------------------------------------------------ 4: throughput

def tree_cpu_rss(proc: Proc | None) -> tuple[float, list[int], dict[int, float]]:
    """CPU seconds (user+system) of a target's process tree, each worker's RSS in bytes, and each
    worker's CPU seconds by pid."""
    import psutil

    if proc is None:
        return 0.0, [], {}
    root = psutil.Process(proc.proc.pid)
    children = root.children(recursive=True)
    # with --workers N the root is hypercorn's supervisor: the workers are its spawned children (the
    # multiprocessing resource tracker, a small helper, is not one)
    workers = [c for c in children if "resource_tracker" not in " ".join(c.cmdline())] or [root]
    cpu, rss, per_worker = 0.0, [], {}
    for p in [root, *children]:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            if p in workers:
                rss.append(p.memory_info().rss)
                per_worker[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return cpu, rss, per_worker


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
        cpu0, _, w0 = tree_cpu_rss(target.proc)
        t0 = time.monotonic()
        stop = t0 + duration
        await asyncio.gather(*(client(c) for c in range(concurrency)))
        elapsed = time.monotonic() - t0
        cpu1, rss, w1 = tree_cpu_rss(target.proc)
    return {"target": target.name, "concurrency": concurrency, "requests": done, "errors": errors,
            "rps": done / elapsed, "cpu_ms_per_request": (cpu1 - cpu0) * 1000 / done if done and target.proc else None,
            "rss_mb_per_worker": [round(r / 2**20, 1) for r in rss],
            "cpu_s_per_worker": [round(w1[pid] - w0.get(pid, 0.0), 2) for pid in sorted(w1)]}


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
    own_tenant = {"x-api-key": STORE_KEY}  # a tenant of its own: every key it owns is this loop's
    json_bytes = prompt_bytes = 0
    for _ in range(rounds):
        # a record also keeps its prompt: the request's messages after the previous assistant turn
        prompt_bytes += len(orjson.dumps(history[-1:]))
        _, _, data = await timed(session, gw, "/v1/messages", json.dumps(anthropic_body(history)).encode(),
                                 own_tenant)
        content = json.loads(data)["content"]
        json_bytes += len(orjson.dumps(content))
        extend(history, content)
    trips = await metric(session, gw.url, "gateway_store_round_trips_total") - before
    n = await metric(session, gw.url, 'gateway_requests_total{endpoint="messages"') - reqs
    client = redis.Redis.from_url(redis_url)

    def usage(pattern: str) -> tuple[int, int]:  # (keys, MEMORY USAGE bytes, every list element sampled)
        keys = list(client.scan_iter(pattern, count=1000))
        return len(keys), sum(client.memory_usage(k, samples=0) or 0 for k in keys)

    turn_keys = [k for k in client.scan_iter("*:turns") if client.llen(k) == rounds]
    turns_key = turn_keys[-1]
    tag = turns_key.decode().split("}")[0] + "}"  # tg:{<tenant>:<scid>}
    tenant = tag.split("{", 1)[1].split(":", 1)[0]
    _, conv_bytes = usage(tag + "*")
    n_keys, all_bytes = usage(f"tg:{{{tenant}:*")  # the conversation's keys and the tenant's index keys
    list_bytes = client.memory_usage(turns_key, samples=0) or 0
    blob_bytes = sum(len(b) for b in client.lrange(turns_key, 0, -1))
    client.close()
    return {"store_round_trips_per_request": trips / n if n else None, "turn_json_bytes": json_bytes / rounds,
            "turn_with_prompt_json_bytes": (json_bytes + prompt_bytes) / rounds,
            "stored_record_bytes": blob_bytes / rounds, "redis_turn_list_bytes_per_turn": list_bytes / rounds,
            "redis_conversation_keys_bytes_per_turn": conv_bytes / rounds,
            "redis_all_keys_bytes_per_turn": all_bytes / rounds, "redis_keys": n_keys}


# ------------------------------------------------------------------ report

def f(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def targets(res: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The issue's targets, each as (target, measured figure, hit), from one run's results."""
    out: list[tuple[str, str, bool]] = []
    rows = {(r["turns"], r["gateway"], r["replay"]): r for r in res["latency"] if not r["stream"]}
    sizes = sorted({r["turns"] for r in res["latency"]})
    for (turns, gw, replay), r in sorted(rows.items()):
        if gw != "tg-redis":
            continue
        tg, bare = r[gw]["added"]["p50"], r["bare"]["added"]["p50"]
        ratio = tg / bare if bare > 0 else float("inf")
        out.append((f"added p50 <= 1.5x bare proxy's ({turns} turns, {replay}, tg-redis)",
                    f"{tg:.2f} vs {bare:.2f} ms = {ratio:.2f}x", ratio <= 1.5))
        if "litellm" in r:
            ll = r["litellm"]["added"]["p50"]
            out.append((f"an order of magnitude below LiteLLM ({turns} turns, {replay})",
                        f"LiteLLM {ll:.2f} ms = {ll / tg:.1f}x thinkgate", ll >= 10 * tg))
    for replay in ("faithful", "mangled"):
        lo, hi = rows.get((sizes[0], "tg-redis", replay)), rows.get((sizes[-1], "tg-redis", replay))
        if lo is not None and hi is not None and len(sizes) > 1:
            a, b = lo["tg-redis"]["added"]["p50"], hi["tg-redis"]["added"]["p50"]
            out.append((f"added p50 at {sizes[-1]} turns <= 3x at {sizes[0]} ({replay}, tg-redis)",
                        f"{b:.2f} / {a:.2f} ms = {b / a:.2f}x", b <= 3 * a))
    for r in res["latency"]:
        if r["stream"]:
            gw = r["gateway"]
            d = r[gw]["ttfb"]["p50"] - r["bare"]["ttfb"]["p50"]
            out.append((f"stream TTFB p50 <= bare proxy's + 1 ms ({r['turns']} turns, {gw})",
                        f"{r[gw]['ttfb']['p50']:.2f} vs {r['bare']['ttfb']['p50']:.2f} ms = {d:+.2f} ms", d <= 1.0))
    rps = {t["target"]: t["rps"] for t in res["throughput"]}
    if "tg-redis" in rps and "bare" in rps:
        x = rps["tg-redis"] / rps["bare"]
        out.append(("one worker >= 0.7x bare proxy's requests/s",
                    f"{rps['tg-redis']:.0f} / {rps['bare']:.0f} = {x:.2f}x", x >= 0.7))
    if "tg-redis-w2" in rps and "tg-redis" in rps:
        x = rps["tg-redis-w2"] / rps["tg-redis"]
        out.append(("two workers >= 1.6x one worker", f"{rps['tg-redis-w2']:.0f} / {rps['tg-redis']:.0f} = {x:.2f}x",
                    x >= 1.6))
    st = res["store"]
    for key, label in (("stored_record_bytes", "record only"), ("redis_all_keys_bytes_per_turn",
                                                                 "all keys incl. indexes")):
        x = st[key] / st["turn_json_bytes"]
        out.append((f"stored bytes per turn <= the turn's JSON ({label})",
                    f"{st[key]:.0f} / {st['turn_json_bytes']:.0f} B = {x:.2f}x", x <= 1.0))
    return out


def report(res: dict[str, Any]) -> str:
    load = " / ".join(f"{x:.1f}" for x in res["load_start"])
    out = [f"# thinkgate comparison ({res['date']}, {res['machine']}, load average {load} at the start)", ""]
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
            "| target | requests/s | vs bare | CPU ms/request | RSS MB per worker | CPU s per worker | errors |",
            "|---|---:|---:|---:|---|---|---:|"]
    bare_rps = next(t["rps"] for t in res["throughput"] if t["target"] == "bare")
    for t in res["throughput"]:
        out.append(f"| {t['target']} | {t['rps']:.0f} | {t['rps'] / bare_rps:.2f}x | {f(t['cpu_ms_per_request'])} | "
                   f"{', '.join(map(str, t['rss_mb_per_worker'])) or 'n/a'} | "
                   f"{', '.join(map(str, t.get('cpu_s_per_worker', []))) or 'n/a'} | {t['errors']} |")
    s = res["store"]
    js = s["turn_json_bytes"]
    jp = s.get("turn_with_prompt_json_bytes")

    def of_json(key: str) -> str:
        return f"{s[key]:.0f} | {s[key] / js:.2f}x | " + (f"{s[key] / jp:.2f}x" if jp else "n/a")

    out += ["", "## Store (tg-redis, 20-turn tool loop, a tenant of its own)", "",
            f"Store round trips per request: {f(s['store_round_trips_per_request'])} (load + record). "
            f"Bytes per recorded turn against the turn's own JSON: the assistant content ({js:.0f} B), and that "
            f"with the prompt the record also keeps, the tool results before it ({f(jp, 0)} B):", "",
            "| stored | bytes per turn | vs content JSON | vs content + prompt JSON |", "|---|---:|---:|---:|",
            f"| record only (encoded turn record, as stored) | {of_json('stored_record_bytes')} |",
            f"| turn list, Redis MEMORY USAGE | {of_json('redis_turn_list_bytes_per_turn')} |",
            f"| conversation keys (meta, turns, tids) | {of_json('redis_conversation_keys_bytes_per_turn')} |",
            f"| all keys incl. indexes ({s['redis_keys']} keys) | {of_json('redis_all_keys_bytes_per_turn')} |"]
    sim = res.get("sim")
    if sim is not None:
        out += ["", f"Simulator: {sim['requests']} requests, {sim['accepted']} accepted, rejections "
                    f"{sim['rejections'] or 0}, unauthorized {sim['unauthorized']}."]
    out += ["", "## Targets of the issue (ratios from this run)", "", "| target | measured | |", "|---|---|---|"]
    out += [f"| {name} | {fig} | {'HIT' if hit else 'MISS'} |" for name, fig, hit in targets(res)]
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
        redis_env = {"GATEWAY_REDIS_URL": redis.url, "GATEWAY_SECRET": "bench-secret-0123456789abcdef012",
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
            notes.append("LiteLLM not installed (python3 -m venv .venv-bench && .venv-bench/bin/pip install "
                         "'litellm[proxy]'): no peer-gateway column")
        emb_p = keep(thinkgate(sim.url, {}))
        red_p = keep(thinkgate(sim.url, redis_env))
        gws = [Target("tg-embedded", emb_p, emb_p.url), Target("tg-redis", red_p, red_p.url)]
        res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"),
                               "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
                               "load_start": os.getloadavg(),
                               "targets": [t.name for t in [*baselines, *gws]], "latency": [], "openai": [],
                               "throughput": [], "notes": notes, "args": vars(args)}
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            if exe is not None:
                res["litellm_check"] = await check_passthrough(session, baselines[2], sim.url)
                print(f"litellm pass-through: {res['litellm_check']}", flush=True)
            for size in sizes:
                for gw in gws:
                    for mangled in (False, True):
                        row = await latency_series(session, gw, baselines, size, args.samples, mangled, False,
                                                   args.repeats)
                        res["latency"].append(row)
                        print(f"latency turns={size} {gw.name} {row['replay']}: direct "
                              f"{row['direct']['total']['p50']:.2f} ms, added bare {row['bare']['added']['p50']:.2f}"
                              f" / {gw.name} {row[gw.name]['added']['p50']:.2f} ms", flush=True)
                row = await latency_series(session, gws[1], baselines, size, args.samples, False, True, args.repeats)
                res["latency"].append(row)
                print(f"stream turns={size}: ttfb direct {row['direct']['ttfb']['p50']:.2f} bare "
                      f"{row['bare']['ttfb']['p50']:.2f} tg {row['tg-redis']['ttfb']['p50']:.2f} ms", flush=True)
                row = await openai_series(session, gws[1], baselines[:2], sim.url, size, args.samples, args.repeats)
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
        async with aiohttp.ClientSession() as session:
            res["sim"] = await sim_stats(session, sim.url)
        res["load_end"] = os.getloadavg()
        if res["sim"]["rejections"] or res["sim"]["unauthorized"]:
            notes.append(f"the simulator rejected requests: {res['sim']}")
        return res
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20, help="rounds measured per conversation (the median one "
                                                            "replays --sizes turns: keep it <= 2 x the smallest)")
    ap.add_argument("--repeats", type=int, default=1, help="conversations per cell (samples x repeats figures)")
    ap.add_argument("--sizes", default="10,100,500")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--litellm", default=None, help="the litellm executable (default: found beside this python, "
                                                    "on PATH or in .venv-bench)")
    ap.add_argument("--no-litellm", action="store_true", help="skip the peer gateway")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--report", default=None, metavar="JSON", help="only print the report of a saved compare.json")
    args = ap.parse_args()
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
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

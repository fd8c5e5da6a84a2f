"""CPU per request of a served gateway, several builds side by side, rounds interleaved.

    python bench/cpu_ab.py TARGET[,TARGET...] [--requests 400] [--rounds 3] [--turns 10] [--start 0] [--mangled]
                           [--stream]

A TARGET is ``bare`` (``bench/bare_proxy.py``), ``bare:redis`` (the bare proxy with the two store round trips of a
thinkgate request and nothing else: the floor of a stateful proxy), or a source tree of thinkgate (a ``git worktree`` of
another commit, or ``.``), optionally followed by ``:NAME=VALUE[+NAME=VALUE]`` gateway settings (e.g.
``.:GATEWAY_REDIS_URL=`` for the embedded store, ``.:GATEWAY_STATE_MACHINE_ENABLED=false``). Every
thinkgate target uses one shared local redis-server and the simulator. Each round starts every target
afresh, plays 60 warm-up requests, then ``--requests`` requests of tool loops of ``--turns`` rounds (with
``--start N``: one loop, measured from its turn N on, so every body holds N turns or more), one at a time, and
reads the serving processes' user+system CPU time (psutil). Wall-clock latency on a shared 2-core box moves with
everything else running; the CPU a process spends per request moves much less, so this is the figure to compare
builds by. Prints min and median over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import (  # noqa: E402
    body,
    extend,
    free_port,
    mangle,
    post,
    post_streamed,
    start,
    start_redis,
    wait_http,
)


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the bare proxy exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.025)  # polling a starting process's port: there is no event to await
    raise RuntimeError("the bare proxy did not start")


def _launch(target: str, sim_url: str, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    tree, _, settings = target.partition(":")
    port = free_port()
    if tree == "bare":
        store = ["--redis", redis_url] if settings == "redis" else []
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_proxy.py"), "--upstream", sim_url,
                                 "--port", str(port), *store], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _wait_port(port, proc)
        return proc, f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "GATEWAY_ANTHROPIC_BASE_URL": sim_url,
           "GATEWAY_SECRET": "cpu-ab-0123456789abcdef012345678", "GATEWAY_REDIS_URL": redis_url,
               "GATEWAY_LOG_LEVEL": "WARNING",
           **dict(s.split("=", 1) for s in settings.split("+") if s)}
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], cwd=tree, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/healthz", proc)
    return proc, f"http://127.0.0.1:{port}"


def _cpu(procs: list[psutil.Process]) -> float:
    return sum(p.cpu_times().user + p.cpu_times().system for p in procs)


async def _loops(session: aiohttp.ClientSession, url: str, n: int, turns: int, tag: str,
                 mangled: bool = False, stream: bool = False, history: list[dict[str, Any]] | None = None,
                 start: int = 0) -> list[float]:
    """Latency of each request (with ``stream``: time to first byte); ``history`` (a loop ``start`` turns in) goes
    on."""
    history = [] if history is None else history
    took = []
    for i in range(start, start + n):
        if i % turns == 0:
            history[:] = [{"role": "user", "content": f"[[sim:tools={turns}]] {tag} {i}"}]
        sent = mangle(history) if mangled else history
        payload = json.dumps({**body(sent), "stream": True} if stream else body(sent)).encode()
        dt, answer = await (post_streamed if stream else post)(session, url, payload)
        took.append(dt)
        extend(history, answer)
    return took


async def _measure(target: str, args: argparse.Namespace, sim_url: str, redis_url: str,
                   session: aiohttp.ClientSession) -> tuple[float, float]:
    proc, url = _launch(target, sim_url, redis_url)
    try:
        procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        await _loops(session, url, 60, args.turns, "warm", args.mangled, args.stream)
        history: list[dict[str, Any]] = []  # --start: the measured loop's first turns, played before it is measured
        await _loops(session, url, args.start, args.turns, "measured", args.mangled, args.stream, history)
        before = _cpu(procs)
        took = await _loops(session, url, args.requests, args.turns, "measured", args.mangled, args.stream, history,
                            args.start)
        return (_cpu(procs) - before) / args.requests * 1000, statistics.median(took) * 1000
    finally:
        proc.terminate()
        proc.wait()


async def run(args: argparse.Namespace) -> str:
    targets = args.targets.split(",")
    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis()
    got: dict[str, list[tuple[float, float]]] = {t: [] for t in targets}
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(args.rounds):
                for t in targets:
                    got[t].append(await _measure(t, args, sim.url, redis.url, session))
    finally:
        sim.stop()
        redis.stop()
    replay = "mangled (thinking text trimmed)" if args.mangled else "faithful"
    latency = "p50 time to first byte ms" if args.stream else "p50 latency ms"
    loops = f"from turn {args.start} of a loop" if args.start else f"tool loops of {args.turns} turns"
    out = [f"{args.requests} requests x {args.rounds} rounds, {loops} ({replay} replay"
           f"{', streamed' if args.stream else ''}), one at a time",
           "", f"| target | CPU ms/request min | median | {latency} min | median |", "|---|---:|---:|---:|---:|"]
    for t in targets:
        cpu, lat = [c for c, _ in got[t]], [x for _, x in got[t]]
        out.append(f"| {t} | {min(cpu):.2f} | {statistics.median(cpu):.2f} | {min(lat):.2f} | "
                   f"{statistics.median(lat):.2f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("targets")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--start", type=int, default=0,
                    help="play the measured loop's first START turns unmeasured: its bodies are START turns and more")
    ap.add_argument("--mangled", action="store_true", help="replay every history as bench.latency.mangle does")
    ap.add_argument("--stream", action="store_true", help="stream every answer; time to first byte, not latency")
    print(asyncio.run(run(ap.parse_args())))


if __name__ == "__main__":
    main()

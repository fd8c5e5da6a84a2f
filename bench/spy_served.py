"""Where a *served* thinkgate worker spends its CPU: py-spy samples the real process (hypercorn, uvloop,
real Redis) while a client replays a tool loop through it.

    python bench/spy_served.py [--turns 500] [--requests 40] [--loops] [--mangled] [--top 40]

``bench/profile_hotpath.py`` runs the app in process under pyinstrument; that is good for the relative
cost of the pipeline's own Python, but it runs on asyncio's default loop and its instrumentation
inflates pure-Python libraries (redis-py, h11) against C and system calls. This one attributes time
as the served worker really spends it, system calls included (they show as the frame that made them).

Starts the simulator, a local redis-server and ``thinkgate serve`` (one worker) as child processes,
plays ``--turns`` rounds so every turn is recorded, then samples ``--requests`` further rounds
(faithful or ``--mangled`` replay; with ``--loops`` fresh tool loops of ``--turns`` rounds instead),
each next to a direct simulator call for the added-latency figure. Prints the p50s and the frames
with the largest inclusive and self shares. Needs ``py-spy`` (``pip install -e '.[bench]'``) and the
right to ptrace a child (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import body, extend, mangle, post, post_streamed, start, start_redis

_FRAME = re.compile(r"\s*\(.*?([^/ ]+\.py):\d+\)")


def summarize(raw: Path, top: int) -> str:
    """py-spy's raw (collapsed) stacks -> the frames with the largest inclusive and self shares."""
    total = 0
    incl: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        names = [_FRAME.sub(r" (\1)", f) for f in stack.split(";")]
        total += int(n)
        own[names[-1]] += int(n)
        for name in set(names):
            incl[name] += int(n)
    if not total:
        return "no samples (was the worker busy? could py-spy attach?)"
    out = [f"{total} samples", "", "inclusive:"]
    out += [f"{n * 100 / total:5.1f}%  {f}" for f, n in incl.most_common(top)]
    out += ["", "self:"]
    out += [f"{n * 100 / total:5.1f}%  {f}" for f, n in own.most_common(top // 2)]
    return "\n".join(out)


async def run(args: argparse.Namespace, spy_exe: str, out: Path) -> str:
    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis()
    gw = start(["serve"], {"GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_SECRET": "bench-secret-0123456789abcdef012",
                           "GATEWAY_REDIS_URL": redis.url, "GATEWAY_LOG_LEVEL": "WARNING",
                           # a 500-turn load must not time out into the stateless path while sampled
                           "GATEWAY_STORE_TIMEOUT_MS": "2000"}, "/healthz")
    try:
        async with aiohttp.ClientSession() as session:
            history: list[dict[str, Any]] = [
                {"role": "user", "content": f"[[sim:tools={args.turns + args.requests + 5}]] spy"}]

            async def step(payload: list[dict[str, Any]], url: str) -> tuple[float, dict[str, Any]]:
                if args.stream:  # the figure is then the time to first byte
                    return await post_streamed(session, url, json.dumps({**body(payload), "stream": True}).encode())
                return await post(session, url, json.dumps(body(payload)).encode())

            if not args.loops:
                for _ in range(args.turns):
                    extend(history, (await step(history, gw.url))[1])
            spy = await asyncio.create_subprocess_exec(
                spy_exe, "record", "-p", str(gw.proc.pid), "-r", "500", "-f", "raw", "-o", str(out), "--nonblocking",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
            await asyncio.sleep(1.0)  # py-spy attaching: it gives no signal when it is ready
            direct, via = [], []
            for n in range(args.requests):
                if args.loops and n % args.turns == 0:
                    history[:] = [{"role": "user", "content": f"[[sim:tools={args.turns}]] loop {n}"}]
                direct.append((await step(history, sim.url))[0])
                dt, answer = await step(mangle(history) if args.mangled else history, gw.url)
                via.append(dt)
                extend(history, answer)
            spy.send_signal(signal.SIGINT)
            await asyncio.wait_for(spy.wait(), 30)
    finally:
        gw.stop()
        sim.stop()
        redis.stop()
    d50, g50 = sorted(direct)[len(direct) // 2] * 1000, sorted(via)[len(via) // 2] * 1000
    head = (f"{'loops of' if args.loops else 'replays of'} {args.turns} turns, {args.requests} requests"
            f"{' (mangled)' if args.mangled else ''}: direct p50 {d50:.2f} ms, thinkgate p50 {g50:.2f} ms, "
            f"added {g50 - d50:.2f} ms")
    return head + "\n" + summarize(out, args.top)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--loops", action="store_true", help="fresh tool loops of --turns rounds (fixed costs)")
    ap.add_argument("--mangled", action="store_true")
    ap.add_argument("--stream", action="store_true", help="stream every answer (p50s are then times to first byte)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--raw", type=Path, help="also keep py-spy's raw (collapsed) stacks in this file")
    args = ap.parse_args()
    spy_exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy_exe).exists():
        sys.exit("py-spy not found: pip install -e '.[bench]'")
    with tempfile.TemporaryDirectory(prefix="tg-spy-") as tmp:
        stacks = Path(tmp) / "stacks.txt"
        report = asyncio.run(run(args, spy_exe, stacks))
        if args.raw:
            shutil.copyfile(stacks, args.raw)
        print(report)


if __name__ == "__main__":
    main()

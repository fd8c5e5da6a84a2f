"""Profile thinkgate's request path in process (pyinstrument), on a long recorded tool loop.

    python bench/profile_hotpath.py [--turns 300] [--requests 30] [--mangled] [--redis] [--loops] [--html out.html]

Starts the simulator (and with ``--redis`` a local redis-server) as child processes, runs the
gateway app in this process over an ASGI transport (httpx), plays a tool loop of ``--turns``
rounds through it so every turn is recorded, then profiles ``--requests`` further rounds (faithful
or mangled replay). Prints pyinstrument's call tree; the closing note of the performance issue
quotes its findings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import KEY, body, extend, mangle, start, start_redis


async def run(args: argparse.Namespace) -> Any:
    from pyinstrument import Profiler

    from gateway.app import create_app
    from gateway.settings import Settings

    sim = start(["sim"], {}, "/_sim/stats")
    redis = start_redis() if args.redis else None
    # the profiler slows every call: a store timeout would serve a request statelessly and leave its turn
    # unrecorded, and every later request would then profile the unmatched-history path instead
    env = {**os.environ, "GATEWAY_ANTHROPIC_BASE_URL": sim.url, "GATEWAY_SECRET": "bench-secret",
           "GATEWAY_STORE_TIMEOUT_MS": "5000"}
    if redis is not None:
        env["GATEWAY_REDIS_URL"] = redis.url
    app = create_app(Settings.from_env(env))
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=120) as client:
                history: list[dict[str, Any]] = [
                    {"role": "user", "content": f"[[sim:tools={args.turns + args.requests + 5}]] profile"}]

                async def step(payload: list[dict[str, Any]]) -> None:
                    r = await client.post("/v1/messages", content=json.dumps(body(payload)).encode(),
                                          headers={**KEY, "content-type": "application/json"})
                    assert r.status_code == 200, r.text[:300]
                    extend(history, r.json())

                profiler = Profiler(interval=0.0005, async_mode="disabled")
                if args.loops:  # short tool loops of --turns rounds, all profiled (per-request fixed costs)
                    profiler.start()
                    for n in range(args.requests):
                        if n % args.turns == 0:
                            del history[1:]
                            history[0] = {"role": "user", "content": f"[[sim:tools={args.turns}]] loop {n}"}
                        await step(mangle(history) if args.mangled else history)
                    profiler.stop()
                    return profiler
                for _ in range(args.turns):
                    await step(history)
                profiler.start()
                for _ in range(args.requests):
                    await step(mangle(history) if args.mangled else history)
                profiler.stop()
    finally:
        sim.stop()
        if redis is not None:
            redis.stop()
    return profiler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--mangled", action="store_true")
    ap.add_argument("--loops", action="store_true", help="profile fresh tool loops of --turns rounds")
    ap.add_argument("--redis", action="store_true")
    ap.add_argument("--html", default=None)
    args = ap.parse_args()
    profiler = asyncio.run(run(args))
    print(profiler.output_text(unicode=False, color=False, show_all=False))
    if args.html:
        Path(args.html).write_text(profiler.output_html())


if __name__ == "__main__":
    main()

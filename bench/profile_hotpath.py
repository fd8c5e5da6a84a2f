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
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import in_process_loop, mangle


async def run(args: argparse.Namespace) -> Any:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005, async_mode="disabled")
    async with in_process_loop(args.turns + args.requests + 5, "profile", redis=args.redis) as (history, step):
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

"""Wall time per request of each pipeline stage, in process, on a long tool loop.

    python bench/stage_timer.py [--turns 100] [--requests 60] [--mangled] [--set NAME=VALUE ...]

Starts the simulator and a local redis-server as child processes, runs the gateway app in this process over
an ASGI transport (httpx), plays ``--turns`` rounds of a tool loop so every turn is recorded, then times
``--requests`` further rounds (faithful or mangled replay) with a timer around each stage function the
pipeline calls (nested stages are counted in their callers too). Run it from a tree's root to time that
tree's code (a ``git worktree`` of another commit, with this checkout's virtualenv): the stages that a
commit does not have are left out. Good for what a change did to one stage; ``bench/cpu_ab.py`` is the
figure for a served worker. ``--set GATEWAY_REPLAY_MEMO_MB=0`` (or any other setting) times the gateway
with it, e.g. with a continuation switched off (``bench/continuations.py``'s ``CONFIGS``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree this runs from, not necessarily this file's
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench.latency import in_process_loop, mangle

PIPELINE_STAGES = ("decode", "load", "repair_and_sanitize", "encode", "record", "_plan_record", "records_from",
                   "repair", "sanitize", "sanitize_from", "edge_tool_ids", "turn_record", "rebuild_history")

spent: defaultdict[str, float] = defaultdict(float)


def timed(owner: Any, name: str, label: str | None = None) -> None:
    f = getattr(owner, name, None)
    if f is None or not callable(f):  # (not there in that tree's code, or a module the pipeline imports)
        return
    key = label or name

    if asyncio.iscoroutinefunction(f):
        async def wrapper(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return await f(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
    else:
        def wrapper(*a: Any, **k: Any) -> Any:  # type: ignore[misc]
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
    setattr(owner, name, wrapper)


async def run(args: argparse.Namespace) -> float:
    from gateway.continuation import splice
    from gateway.continuation.replay_memo import ReplayMemo
    from gateway.pipeline import identify
    from gateway.pipeline import stages as pipeline
    from gateway.pipeline.repair import core as repair
    from gateway.pipeline.sanitize import core as sanitize

    for name in PIPELINE_STAGES:
        timed(pipeline, name)
    # the stages' ``run(input, prior)``, where the pipeline calls them so, under the names of the functions it
    # called before
    timed(repair, "run", "repair")
    timed(sanitize, "run", "sanitize_from")
    timed(splice, "run", "splice")
    timed(identify, "build_query")
    timed(identify, "identify_conversation")
    timed(ReplayMemo, "take")
    timed(ReplayMemo, "keep")
    # inside repair_and_sanitize, besides repair and sanitize
    from gateway.continuation import replay_memo as continuation
    from gateway.pipeline.repair import edits
    timed(edits, "apply_context_edits", "context_edits")
    timed(edits, "apply_model_switch", "model_switch")
    timed(pipeline, "keep_prefix")
    timed(continuation, "carry")
    timed(continuation, "admit", "continuation.admit")
    timed(pipeline, "_policy")
    send: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = mangle if args.mangled else list
    settings = dict(s.split("=", 1) for s in args.set)
    async with in_process_loop(args.turns + args.requests + 5, "stages", **settings) as (history, step):
        for _ in range(args.turns):
            await step(send(history))
        spent.clear()
        t0 = time.perf_counter()
        for _ in range(args.requests):
            await step(send(history))
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--mangled", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a gateway setting (env)")
    args = ap.parse_args()
    total = asyncio.run(run(args))
    print(f"{args.requests} requests after {args.turns} turns ({'mangled' if args.mangled else 'faithful'} replay), "
          f"{' '.join(args.set)} wall {total / args.requests * 1e3:.2f} ms per request\n")
    print("| stage | us per request |\n|---|---:|")
    for name, secs in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {secs / args.requests * 1e6:.1f} |")


if __name__ == "__main__":
    main()

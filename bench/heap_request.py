"""What one request of a long tool loop holds while it waits for the upstream, in process, with ``tracemalloc``.

    python bench/heap_request.py [--turns 500] [--mangled] [--top 20] [--trace-all] [--set NAME=VALUE ...]

Plays ``--turns`` rounds of a tool loop through the gateway app in this process (``bench.latency.in_process_loop``:
the simulator and a local redis-server as child processes; untraced), then traces one more request (faithful or
mangled replay) and snapshots the heap as the handler calls the upstream (everything the request prepared is alive
then, and a served worker holds that for as long as the upstream takes). Reported: the request body's size, what
was allocated since the request began and is still alive at that moment (by the innermost ``gateway/`` or
``state/`` line that allocated it; the client's side of this process is left out), and tracemalloc's peak over the
whole request. The gateway's per-worker caches (memo, conversation cache) are in the "before" heap, so what they
keep of this request shows as alive too. ``--trace-all`` traces the loop too (slower), and reports what the worker
holds before the traced request, by the line that allocated it: its caches after ``--turns`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree this runs from, not necessarily this file's
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench.latency import body, in_process_loop, mangle

FRAMES = 40
ROOT = os.getcwd()
OWN = (os.path.join(ROOT, "gateway") + os.sep, os.path.join(ROOT, "state") + os.sep)


def own_line(tb: tracemalloc.Traceback) -> str | None:
    """The innermost gateway/state frame of a traceback, None when no such frame (the client side, the loop)."""
    for fr in reversed(tb):
        if fr.filename.startswith(OWN):
            return f"{os.path.relpath(fr.filename, ROOT)}:{fr.lineno}"
    return None


def report(before: tracemalloc.Snapshot, at: tracemalloc.Snapshot, top: int) -> None:
    grouped: dict[str, list[int]] = {}
    diff = at.compare_to(before, "traceback")
    for st in diff:
        if st.size_diff <= 0:
            continue
        key = own_line(st.traceback)
        if key is None:
            continue
        acc = grouped.setdefault(key, [0, 0])
        acc[0] += st.size_diff
        acc[1] += st.count_diff
    total = sum(v[0] for v in grouped.values())
    print(f"alive at the upstream call, allocated since the request began (gateway/state lines): "
          f"{total / 2**20:.2f} MiB")
    print("| MiB | blocks | allocated at |\n|---:|---:|---|")
    for key, (size, count) in sorted(grouped.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {size / 2**20:.2f} | {count} | {key} |")


async def run(args: argparse.Namespace) -> None:
    from gateway.surfaces import handler

    send: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = mangle if args.mangled else list
    settings = dict(s.split("=", 1) for s in args.set)
    snaps: dict[str, tracemalloc.Snapshot] = {}
    real = handler.call_upstream

    def traced_call(*a: Any, **k: Any) -> Any:
        if tracemalloc.is_tracing() and "at" not in snaps:
            snaps["at"] = tracemalloc.take_snapshot()
        return real(*a, **k)

    handler.call_upstream = traced_call  # type: ignore[assignment]
    async with in_process_loop(args.turns + 10, "heap", **settings) as (history, step):
        if args.trace_all:
            tracemalloc.start(FRAMES)
        for _ in range(args.turns):
            await step(send(history))
        sent = send(history)
        size = len(repr(body(sent)))
        if not args.trace_all:
            tracemalloc.start(FRAMES)
        snaps["before"] = tracemalloc.take_snapshot()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        await step(sent)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(f"{'mangled' if args.mangled else 'faithful'} replay after {args.turns} turns, body ~{size / 2**20:.2f} MB "
          f"{' '.join(args.set)}")
    print(f"tracemalloc peak over the request (both sides of this process, snapshots included): "
          f"{(peak - base) / 2**20:.1f} MiB above the start")
    report(snaps["before"], snaps["at"], args.top)
    if args.trace_all:
        held: dict[str, int] = {}
        for st in snaps["before"].statistics("traceback"):
            key = own_line(st.traceback)
            if key is not None:
                held[key] = held.get(key, 0) + st.size
        print(f"\nheld by the worker before the request (gateway/state lines): {sum(held.values()) / 2**20:.2f} MiB")
        print("| MiB | allocated at |\n|---:|---|")
        for key, size in sorted(held.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"| {size / 2**20:.2f} | {key} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--mangled", action="store_true")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--trace-all", action="store_true", help="trace the loop too: what the worker holds")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a gateway setting (env)")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()

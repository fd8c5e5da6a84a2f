"""What a gateway key costs a request (issue 35: the key check plus the limit check, one store round trip).

    python bench/key_cost.py [--samples 400] [--turns 10]

Starts the simulator, one local redis-server and one thinkgate (``GATEWAY_UPSTREAM_API_KEYS``, an admin token), creates
a gateway key with every limit on (requests and tokens per minute, requests in flight, a budget: each high enough
never to refuse), then sends the same replayed Anthropic tool loop (``--turns`` turns, faithful) alternately under the
client's own key (the baseline: no admission) and under the gateway key, on keep-alive connections, and prints the
p50 and p90 latency of each and the difference, in the same run. Then the refusal's timing: the same key id with
its right secret and with a wrong one of the same length, each checked (``Store.admit``, as a request is) alternately
against the same store: their medians, which should not differ (one SHA-256 and one script either way).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.compare import free_port, spawn, thinkgate
from bench.latency import start_redis

ADMIN = "bench-admin-token-0123456789"
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


async def history(session: aiohttp.ClientSession, url: str, key: str, turns: int) -> dict[str, Any]:
    """A faithful tool loop of ``turns`` turns, played through the gateway once (so that it is recorded)."""
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS,
                            "thinking": {"type": "enabled", "budget_tokens": 1024},
                            "messages": [{"role": "user", "content": f"[[sim:tools={turns + 1}]] weather"}]}
    for _ in range(turns):
        async with session.post(url + "/v1/messages", json=body, headers=headers(key)) as r:
            answer = await r.json()
        calls = [b for b in answer["content"] if b["type"] == "tool_use"]
        body["messages"] += [{"role": "assistant", "content": answer["content"]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"],
                                                           "content": "sunny"} for c in calls]}]
    return body


def headers(key: str) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": "2023-06-01"}


async def run(samples: int, turns: int) -> None:
    sim_port = free_port()
    sim = spawn([sys.executable, "-m", "gateway", "sim", "--port", str(sim_port)], {}, "/_sim/stats", sim_port)
    redis = start_redis()
    gw = thinkgate(sim.url, {"GATEWAY_REDIS_URL": redis.url, "GATEWAY_SECRET": "bench-secret-" + "0" * 32,
                             "GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_UPSTREAM_API_KEYS": "anthropic=sk-ant-bench"})
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(gw.url + "/admin/keys", headers={"authorization": f"Bearer {ADMIN}"}, json={
                    "name": "bench", "rpm": 1_000_000, "tpm": 1_000_000_000, "concurrency": 1000,
                    "budget_usd": "1000000/month"}) as r:
                key = (await r.json())["key"]
            async with session.post(gw.url + "/admin/keys", headers={"authorization": f"Bearer {ADMIN}"},
                                    json={"name": "timing"}) as r:  # no limits: nothing held across the rounds
                plain = (await r.json())["key"]
            async with session.post(gw.url + "/admin/keys", headers={"authorization": f"Bearer {ADMIN}"}, json={
                    "name": "timing-limited", "rpm": 100_000_000, "tpm": 1_000_000_000,
                    "budget_usd": "1000000/month"}) as r:  # limits that read and write, none reached, no slot held
                limited = (await r.json())["key"]
            own = "sk-ant-bench-client"
            bodies = {"client key": (await history(session, gw.url, own, turns), own),
                      "gateway key": (await history(session, gw.url, key, turns), key)}
            times: dict[str, list[float]] = {name: [] for name in bodies}
            for i in range(samples):
                for name in (list(bodies) if i % 2 == 0 else list(reversed(bodies))):
                    body, k = bodies[name]
                    t0 = time.perf_counter()
                    async with session.post(gw.url + "/v1/messages", json=body, headers=headers(k)) as r:
                        await r.read()
                        assert r.status == 200, r.status
                    times[name].append((time.perf_counter() - t0) * 1000)
        p50 = {n: statistics.median(v) for n, v in times.items()}
        p90 = {n: statistics.quantiles(v, n=10)[8] for n, v in times.items()}
        print(f"{samples} samples each, {turns}-turn faithful loop, one worker, local redis-server:")
        for n in times:
            print(f"  {n:12s} p50 {p50[n]:.2f} ms  p90 {p90[n]:.2f} ms")
        print(f"  added by the gateway key: p50 {p50['gateway key'] - p50['client key']:+.2f} ms, "
              f"p90 {p90['gateway key'] - p90['client key']:+.2f} ms "
              f"(ratio {p50['gateway key'] / p50['client key']:.3f})")
        await timing(redis.url, plain, "a key without limits")
        await timing(redis.url, limited, "a key with rpm, tpm and a budget")
    finally:
        gw.stop()
        sim.stop()
        redis.stop()


async def timing(url: str, key: str, what: str, rounds: int = 2000) -> None:
    """The admission of the right secret and of a wrong one of the same length, alternately, on the same store
    (``key``: one without limits, so that nothing is held across the rounds)."""
    from gateway.access import admission
    from state.factory import open_store
    store = open_store(url)
    await store.start()
    key_id, right = admission.parse(key) or ("", "")
    wrong_key = key[:-1] + ("A" if key[-1] != "A" else "B")
    _, wrong = admission.parse(wrong_key) or ("", "")
    times: dict[str, list[float]] = {"right": [], "wrong": []}
    try:
        for i in range(rounds):
            order = (("right", right), ("wrong", wrong)) if i % 2 else (("wrong", wrong), ("right", right))
            for name, digest in order:
                t0 = time.perf_counter()
                presented = key if name == "right" else wrong_key
                admission.parse(presented)  # (the hashing, as a request does it)
                await store.admit(key_id, digest, int(time.time() * 1000))
                times[name].append((time.perf_counter() - t0) * 1e6)
    finally:
        await store.close()
    med = {n: statistics.median(v) for n, v in times.items()}
    print(f"admission of {what}, {rounds} each, alternately: right secret p50 {med['right']:.1f} us, "
          f"wrong secret p50 {med['wrong']:.1f} us (difference {med['wrong'] - med['right']:+.1f} us)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--turns", type=int, default=10)
    args = p.parse_args()
    asyncio.run(run(args.samples, args.turns))


if __name__ == "__main__":
    main()

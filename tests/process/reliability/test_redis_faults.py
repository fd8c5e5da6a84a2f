"""Redis goes away under load: stopped, restarted, hung (SIGSTOP) and resumed.

Eight threads play tool loops with the official anthropic SDK through one gateway (two workers) on a
private real redis-server. Meanwhile the server is shut down (``SHUTDOWN SAVE``, as in a maintenance
restart) and started again on the same port, then frozen with SIGSTOP and thawed. Proven:

- every request succeeds (served statelessly while the store is away, within the store timeout and
  the circuit breaker); the simulator rejects nothing;
- no turn recorded before a fault is lost (the keyspace snapshot taken just before each fault is
  still there at the end);
- recording resumes by itself once Redis is back (every request that ends well after each recovery
  is ``recorded=true`` in the access log);
- a write that failed is never reported as recorded: each conversation holds at least as many turns
  as access-log lines claim were recorded into it (a SIGSTOPped Redis may still execute a write the
  gateway gave up on, so "at least"), and the store's failures are counted in the metrics.

The Redis Cluster failover (a promoted replica) is ``tests/process/cluster/test_failover.py``; the leak that
made it answer 500 is ``test_store_leaks.py``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from state.keys import conversation_keys, tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.reliability.dialects import client
from tests.support.reliability.loops import access_lines, run_loops

SECRET = "reliability-redis-faults-0123456"
KEY = "sk-redis-faults"
THREADS = 8
RECOVERY_S = 3.0  # breaker cooldown (2 s) + a probe + scheduling slack
TIMELINE = {"warm": 1.5, "stopped": 1.5, "after_restart": 3.7, "paused": 1.5, "after_resume": 3.7}


def durable_stop(server: RedisServer) -> None:
    """``SHUTDOWN SAVE``: the dump is written, then the server exits; ``start()`` reloads it."""
    with server.client() as c:
        c.shutdown(save=True)
    assert server.proc is not None
    server.proc.wait(10)
    server.proc = None


def snapshot(server: RedisServer) -> dict[bytes, list[bytes]]:
    """Every conversation's turn ids."""
    with server.client() as c:
        return {k: c.lrange(k, 0, -1) for k in c.scan_iter(match="tg:*:tids", count=1000)}


def kept_in_place(before: list[bytes], after: list[bytes]) -> bool:
    """Every turn id of ``before`` is in ``after`` at the same position (the lists are of one conversation, which
    no test here trims); a gap (an empty id) may have been filled meanwhile."""
    return len(after) >= len(before) and all(not tid or after[i] == tid for i, tid in enumerate(before))


def store_errors(url: str) -> float:
    text = client().get(url + "/metrics").text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "gateway_store_errors_total" and s.labels.get("op") in ("load", "record"))


@pytest.fixture()
def gw(sim: Sim, gateways: GatewayFactory, restartable_redis: RedisServer) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, {"GATEWAY_REDIS_URL": restartable_redis.url, "GATEWAY_SECRET": SECRET,
                                  "GATEWAY_STORE_TIMEOUT_MS": "150", "GATEWAY_LOG_LEVEL": "INFO",
                                  "GATEWAY_LOG_FORMAT": "json"}, workers=2)
    yield sp
    sp.stop()


def test_loops_survive_redis_stop_restart_and_pause(sim: Sim, gw: ServerProcess,
                                                    restartable_redis: RedisServer) -> None:
    redis = restartable_redis
    rejections = sum(sim.stats()["rejections"].values())
    errors_before = store_errors(gw.url)
    stop = threading.Event()
    workers, threads = run_loops(gw.url, THREADS, stop, key=KEY, rounds=3, tag="redis-faults")
    marks: dict[str, float] = {}
    try:
        time.sleep(TIMELINE["warm"])  # the loops run in other threads: this is the fault schedule
        before_stop = snapshot(redis)
        marks["stop"] = time.time()
        durable_stop(redis)
        time.sleep(TIMELINE["stopped"])
        redis.start()
        marks["restart"] = time.time()
        time.sleep(TIMELINE["after_restart"])
        before_pause = snapshot(redis)
        marks["pause"] = time.time()
        redis.pause()
        time.sleep(TIMELINE["paused"])
        redis.resume()
        marks["resume"] = time.time()
        time.sleep(TIMELINE["after_resume"])
    finally:
        redis.resume()
        stop.set()
        for t in threads:
            t.join(30)
    final = snapshot(redis)

    # 1. every request succeeded; nothing rejected upstream
    errors = [e for w in workers for e in w.errors]
    requests = sum(w.requests for w in workers)
    assert not errors, errors[:5]
    assert sum(sim.stats()["rejections"].values()) == rejections
    assert sum(w.finished for w in workers) >= THREADS

    # 2. nothing recorded before a fault is lost: each turn id is still at its place. An empty id is a gap (a turn
    # served while the store was away, not received yet) that a late record fills in place (``RECORD``'s
    # 'filled'): no turn, so nothing to lose (a whole-list comparison once counted a filled gap as lost)
    for name, snap in (("stop", before_stop), ("pause", before_pause)):
        assert snap, f"nothing was recorded before the {name}"
        lost = {k: (v, final.get(k)) for k, v in snap.items() if not kept_in_place(v, final.get(k, []))}
        assert not lost, f"turns recorded before the {name} are gone: {list(lost.items())[:3]}"

    # 3. the access log: all 200; recording stopped during the faults and resumed after them
    deadline = time.monotonic() + 5
    while True:  # each line is written just after its answer: poll the other process's log
        lines = [r for r in access_lines(gw.log_lines()) if r["endpoint"] == "messages"]
        if len(lines) >= requests or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == requests, (len(lines), requests)
    assert Counter(r["status"] for r in lines) == {200: requests}
    assert any(not r["recorded"] for r in lines if marks["stop"] < r["t"] < marks["restart"])
    assert any(not r["recorded"] for r in lines if marks["pause"] < r["t"] < marks["resume"] + 0.2)
    for start, end in ((marks["restart"] + RECOVERY_S, marks["pause"]), (marks["resume"] + RECOVERY_S, 1e12)):
        window = [r for r in lines if start < r["t"] < end]
        assert len(window) >= THREADS, f"too few requests after a recovery ({len(window)})"
        assert all(r["recorded"] for r in window), "recording did not resume by itself"

    # 4. a failed write is never reported as recorded
    tenant = tenant_prefix(SECRET.encode(), KEY)
    claimed = Counter(r["scid"] for r in lines if r["recorded"])
    for scid, n in claimed.items():
        held = len(final.get(conversation_keys(tenant, scid).tids.encode(), []))
        assert held >= n, f"{scid}: {n} turns reported recorded, {held} stored"
    assert store_errors(gw.url) > errors_before

    not_recorded = sum(not r["recorded"] for r in lines)
    print(f"\nredis faults: {requests} requests, {sum(w.conversations for w in workers)} conversations, "
          f"0 errors, {not_recorded} served statelessly, {sum(claimed.values())} turns recorded, "
          f"{sum(len(v) for v in final.values())} turns stored, 0 lost")

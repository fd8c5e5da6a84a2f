"""Saturation: a slow store is not a missing store (issue 22's acceptance load test).

    python bench/saturation.py [--conversations 16] [--duration 60] [--sigstop-ms 300] [--timeout-ms 250]
                               [--json out.json]

Starts real processes on loopback only: a redis-server, the simulator and two replicas (``thinkgate serve
--workers 2`` each) on that Redis with the default store settings. ``--conversations`` slots play mangled
tool-loop conversations back to back with the official anthropic SDK (``tests/support/cluster/roundrobin.py``:
thinking on, every thinking block dropped from the replayed history, so only a replica that loads the
records can restore it; every request of a conversation goes to the next replica, so only the shared Redis
connects its turns; streamed and not) for ``--duration`` seconds, saturating the cores. With
``--sigstop-ms``, Redis is SIGSTOPped that long in the middle of the run (a fork, a slow disk).

Afterwards each conversation is exported (``GET /gateway/conversations/{scid}``, after the background record
retries are done) and compared with what its client received. Verdicts (exit status 1 if any fails):

- zero requests served statelessly because of the store (``gateway_stateless_requests_total``,
  reasons store_timeout / store_unavailable / breaker_open, both replicas);
- zero 4xx and no other failure (5xx, transport errors, streams cut: the client retries none of them);
- every turn recorded: each conversation kept one conversation id and its export holds one turn per answer
  its client got.
CPU saturation is reported (busy share of all cores over the run, from ``/proc/stat``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.process_fixtures import ServerProcess, metric_sum, start_process, wait_for_workers
from tests.redis_fixtures import RedisServer
from tests.support.cluster.roundrobin import KEY, SECRET, Conversation, RoundRobin, step

STORE_REASONS = ("store_timeout", "store_unavailable", "breaker_open")
ROUNDS = 3  # tool rounds: 4 turns per conversation


@dataclass
class Run:
    conversations: list[Conversation] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # 4xx and everything else a client got instead of an answer
    client_4xx: int = 0
    paused_s: float = 0.0  # how long Redis was really stopped


def cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from ``/proc/stat``."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


async def _slot(rr: RoundRobin, run: Run, slot: int, deadline: float) -> None:
    n = 0
    while time.monotonic() < deadline:
        conv = Conversation(index=slot * 10_000 + n, stream=(slot + n) % 2 == 0, rounds=ROUNDS)
        n += 1
        run.conversations.append(conv)
        while not conv.finished and len(conv.answers) <= ROUNDS:
            try:
                await step(rr, conv, attempts=1)
            except anthropic.APIStatusError as e:
                run.client_4xx += 400 <= e.status_code < 500
                run.failures.append(f"conversation {conv.index}: {e.status_code} {str(e)[:160]}")
                break
            except Exception as e:  # a transport failure or a cut stream (step does not retry with attempts=1)
                run.failures.append(f"conversation {conv.index}: {type(e).__name__}: {str(e)[:160]}")
                break


async def drive(replicas: list[ServerProcess], conversations: int, duration: float,
                redis: RedisServer | None = None, sigstop_s: float = 0.0) -> Run:
    """Play ``conversations`` slots for ``duration`` seconds; SIGSTOP ``redis`` for ``sigstop_s`` halfway."""
    run = Run()
    rr = RoundRobin(replicas, timeout=30)
    deadline = time.monotonic() + duration

    def pause() -> None:  # in a thread: the saturated event loop here would stretch the pause
        assert redis is not None
        if stop.wait(duration / 2):  # the experiment's schedule: nothing to await but time
            return
        t0 = time.monotonic()
        redis.pause()
        try:
            time.sleep(sigstop_s)
        finally:
            redis.resume()
            run.paused_s = time.monotonic() - t0

    stop = threading.Event()
    pauser = threading.Thread(target=pause, daemon=True) if redis is not None and sigstop_s > 0 else None
    if pauser is not None:
        pauser.start()
    try:
        await asyncio.gather(*(_slot(rr, run, i, deadline) for i in range(conversations)))
    finally:
        stop.set()
        if pauser is not None:
            pauser.join()
        await rr.close()
    run.failures += rr.failures
    return run


def settle(replicas: list[ServerProcess], timeout: float = 15.0) -> None:
    """Until no replica has a turn waiting in its background record retry (queued = recorded + dropped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = sum(metric_sum(r, "gateway_record_retries_total", outcome="queued")
                      - metric_sum(r, "gateway_record_retries_total", outcome="recorded")
                      - metric_sum(r, "gateway_record_retries_total", outcome="dropped") for r in replicas)
        if pending <= 0:
            return
        time.sleep(0.1)  # other processes' background work: nothing to await but its effect


def audit(replicas: list[ServerProcess], run: Run) -> dict[str, Any]:
    """Export every conversation and compare it with what its client received."""
    settle(replicas)
    expected = recorded = 0
    lost: list[str] = []
    with httpx.Client(timeout=30) as client:
        for conv in run.conversations:
            if not conv.answers:
                continue
            expected += len(conv.answers)
            if len(set(conv.scids)) != 1:
                lost.append(f"conversation {conv.index}: {len(set(conv.scids))} conversation ids")
                continue
            r = client.get(f"{replicas[0].url}/gateway/conversations/{conv.scids[0]}", headers={"x-api-key": KEY})
            turns = len(r.json()["turns"]) if r.status_code == 200 else 0
            recorded += min(turns, len(conv.answers))
            if turns != len(conv.answers):
                lost.append(f"conversation {conv.index}: {turns} turns stored for {len(conv.answers)} answers")
    stateless = {reason: sum(metric_sum(r, "gateway_stateless_requests_total", reason=reason) for r in replicas)
                 for reason in STORE_REASONS}
    retries = {o: sum(metric_sum(r, "gateway_record_retries_total", outcome=o) for r in replicas)
               for o in ("queued", "recorded", "dropped", "queue_full")}
    return {"turns_expected": expected, "turns_recorded": recorded, "lost": lost, "stateless": stateless,
            "record_retries": retries}


def verdict(run: Run, audit_result: dict[str, Any], cpu: float) -> dict[str, Any]:
    requests = sum(len(c.answers) for c in run.conversations) + len(run.failures)
    out = {
        "requests": requests,
        "conversations": sum(1 for c in run.conversations if c.answers),
        "stateless": int(sum(audit_result["stateless"].values())), "stateless_by_reason": audit_result["stateless"],
        "client_4xx": run.client_4xx, "failures": len(run.failures), "failure_samples": run.failures[:5],
        "turns_expected": audit_result["turns_expected"], "turns_recorded": audit_result["turns_recorded"],
        "lost_samples": audit_result["lost"][:5], "record_retries": audit_result["record_retries"],
        "thinking_restored": sum(t == "thinking" for c in run.conversations for t in c.thinking_starts()),
        "cpu_busy": round(cpu, 3), "redis_paused_s": round(run.paused_s, 3),
    }
    out["ok"] = (out["stateless"] == 0 and out["client_4xx"] == 0 and out["failures"] == 0
                 and not audit_result["lost"] and out["turns_recorded"] == out["turns_expected"] > 0)
    return out


def measure(replicas: list[ServerProcess], conversations: int, duration: float, redis: RedisServer | None = None,
            sigstop_s: float = 0.0) -> dict[str, Any]:
    busy0, total0 = cpu_busy()
    run = asyncio.run(drive(replicas, conversations, duration, redis, sigstop_s))
    busy1, total1 = cpu_busy()
    cpu = (busy1 - busy0) / max(1, total1 - total0)
    return verdict(run, audit(replicas, run), cpu)


def replica_env(sim_url: str, redis_url: str, timeout_ms: int | None = None) -> dict[str, str]:
    env = {"GATEWAY_ANTHROPIC_BASE_URL": sim_url, "GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": SECRET,
           "GATEWAY_LOG_LEVEL": "WARNING"}
    if timeout_ms is not None:
        env["GATEWAY_STORE_TIMEOUT_MS"] = str(timeout_ms)
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=16)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--sigstop-ms", type=int, default=0, help="SIGSTOP Redis this long halfway through")
    p.add_argument("--timeout-ms", type=int, default=None, help="GATEWAY_STORE_TIMEOUT_MS (default: the gateway's)")
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    server = RedisServer()
    server.start()
    procs: list[ServerProcess] = []
    try:
        sim = start_process("sim", ["sim"], "/_sim/stats")
        procs.append(sim)
        for _ in range(2):
            r = start_process("gateway", ["serve", "--workers", "2"], "/healthz",
                              replica_env(sim.url, server.url, args.timeout_ms))
            procs.append(r)
            wait_for_workers(r, 2)
        result = measure(procs[1:], args.conversations, args.duration, server, args.sigstop_ms / 1000)
        result["config"] = vars(args)
    finally:
        for sp in procs:
            sp.stop()
            os.unlink(sp.log_path)
        server.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

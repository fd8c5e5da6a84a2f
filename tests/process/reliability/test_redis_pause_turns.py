"""Issue 32 item 4: an outage of the store loses no turn. Two replicas on one real redis-server, sixteen Anthropic tool
loops in flight (official SDK, interleaved thinking on every turn, the client replaying its signed thinking unchanged
and sending back the conversation id it last got), each request on the other replica than the last one. Redis is
paused (SIGSTOP) for five seconds in the middle, then resumed, and the loops go on.

Before: the turns served during the pause went upstream with the client's signed thinking dropped and thinking
turned off, were never recorded, and the conversation went on under a new id. Now:

- every request is answered 200 (nothing upstream rejects anything);
- every turn went back to the upstream as it produced it (the last request of each conversation replays every
  turn's signed thinking exactly as the client holds it, and thinking stays on), and every turn produced before the
  pause and after recovery has its thinking; during the pause a replica verifies the thinking it relayed itself
  (``gateway.continuation.outage``), and degrades (without any upstream 4xx) what the other replica relayed;
- the turns served during the pause are recorded once Redis is back, in their conversation, at their places
  (``record_retry``: placed by their request's load; a place the store never received is filled in place), so
  each conversation has one id and its records hold every turn, with no gap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import pytest

from state.keys import conversation_keys, tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import WEATHER_TOOL, block_dicts, send, tool_results
from tests.support.reliability.recording_proxy import RecordingProxy, recording_proxy

SECRET = "redis-pause-turns-0123456789abcdef"
KEY = "sk-redis-pause-turns"
LOOPS = 16
PAUSE_S = 5.0
AFTER = 3  # rounds each conversation plays once Redis is back (after the record retry had time to run: see below)
SCID = "x-ag-conversation-id"
MODEL = "claude-opus-4-5"


@dataclass
class Loop:
    name: str
    history: list[dict[str, Any]] = field(default_factory=list)
    scids: list[str | None] = field(default_factory=list)  # the id each answer carried
    errors: list[str] = field(default_factory=list)
    rounds: int = 0


@pytest.fixture()
def proxy(sim: Sim) -> Iterator[RecordingProxy]:
    with recording_proxy(sim.url) as p:
        yield p


@pytest.fixture()
def pair(proxy: RecordingProxy, gateways: GatewayFactory,
         restartable_redis: RedisServer) -> Iterator[list[ServerProcess]]:
    env = {"GATEWAY_REDIS_URL": restartable_redis.url, "GATEWAY_SECRET": SECRET, "GATEWAY_STORE_TIMEOUT_MS": "200"}
    replicas = [gateways.start(proxy.url, env) for _ in range(2)]
    yield replicas
    for sp in replicas:
        sp.stop()


def _play(loop: Loop, urls: list[str], phase: dict[str, Any], started: threading.Barrier) -> None:
    clients = [anthropic.Anthropic(base_url=u, api_key=KEY, max_retries=0, timeout=30,
                                   default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"}) for u in urls]
    loop.history = [{"role": "user", "content": f"[[sim:tools=1000]] [[sim:conv={loop.name}]] weather?"}]
    scid: str | None = None
    try:
        while True:
            if loop.rounds == 2:
                started.wait(60)  # every loop is well under way before Redis is paused
            client = clients[loop.rounds % 2]  # each request on the other replica
            params = {"model": MODEL, "max_tokens": 4096, "tools": [WEATHER_TOOL],
                      "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": loop.history,
                      "extra_headers": {SCID: scid} if scid else {}}
            try:
                answer, headers = send(client, params, stream=loop.rounds % 3 == 0)
            except Exception as e:  # the finding: recorded, the loop ends
                loop.errors.append(f"{type(e).__name__}: {str(e)[:300]}")
                return
            loop.rounds += 1
            loop.scids.append(headers.get(SCID))
            scid = headers.get(SCID) or scid  # a client keeps the id it last got
            if answer.stop_reason != "tool_use":
                loop.errors.append(f"the loop ended: {answer.stop_reason}")
                return
            loop.history += [{"role": "assistant", "content": block_dicts(answer)},
                             {"role": "user", "content": tool_results(answer)}]
            resumed = phase.get("resumed_round", {}).get(loop.name)
            if resumed is not None and loop.rounds >= resumed + AFTER:
                return
    finally:
        for c in clients:
            c.close()


@pytest.mark.timeout(240)
def test_turns_served_while_redis_is_paused_are_recorded_and_keep_their_thinking(
        sim: Sim, proxy: RecordingProxy, pair: list[ServerProcess], restartable_redis: RedisServer) -> None:
    rejected = sum(sim.stats()["rejections"].values())
    loops = [Loop(f"pause-{i}") for i in range(LOOPS)]
    phase: dict[str, Any] = {}
    started = threading.Barrier(LOOPS + 1)
    threads = [threading.Thread(target=_play, args=(lp, [sp.url for sp in pair], phase, started)) for lp in loops]
    for t in threads:
        t.start()
    try:
        started.wait(60)
        restartable_redis.pause()
        time.sleep(PAUSE_S)  # the fault's length: there is nothing to await
        during = {lp.name: lp.rounds for lp in loops}
        restartable_redis.resume()
        # the loops go on AFTER more rounds each, starting once the turns queued during the pause had their chance
        # to be recorded (record_retry's last attempt comes 7.6 s after a turn was queued)
        time.sleep(8.0)
        phase["resumed_round"] = {lp.name: lp.rounds for lp in loops}
    finally:
        restartable_redis.resume()
        for t in threads:
            t.join(120)

    assert [e for lp in loops for e in lp.errors] == [], [e for lp in loops for e in lp.errors][:5]
    assert sum(sim.stats()["rejections"].values()) == rejected
    assert sum(metric_sum(sp, "gateway_requests_total", status="5xx") for sp in pair) == 0
    paused = {lp.name: during[lp.name] - 2 for lp in loops}
    assert all(n >= 1 for n in paused.values()), f"every loop played rounds during the pause: {paused}"

    tenant = tenant_prefix(SECRET.encode(), KEY)
    resumed: dict[str, int] = phase["resumed_round"]
    degraded = turns = 0
    with restartable_redis.client() as redis:
        for lp in loops:
            ids = {s for s in lp.scids if s}
            assert len(ids) == 1, f"{lp.name}: one conversation id throughout, got {lp.scids}"
            tids = redis.lrange(conversation_keys(tenant, ids.pop()).tids, 0, -1)
            assert b"" not in tids and len(tids) == lp.rounds, \
                f"{lp.name}: {lp.rounds} turns served, {len(tids)} recorded ({tids.count(b'')} gaps)"
            last = proxy.of(lp.name)[-1].body
            assert last["thinking"]["type"] == "enabled"
            sent = [_thinking(m["content"]) for m in last["messages"] if m["role"] == "assistant"]
            # (the last assistant message is the answer to that request)
            kept = [_thinking(m["content"]) for m in lp.history if m["role"] == "assistant"][:-1]
            assert sent == kept, f"{lp.name}: a turn went back other than the upstream produced it"
            # produced with thinking: every turn before the pause, and every one once the turns served during it
            # were recorded (during it, a turn the other replica relayed cannot be verified: its thinking was
            # degraded for that request, and the answer to it came without)
            assert all(kept[:2]) and all(kept[resumed[lp.name]:]), (lp.name, [bool(k) for k in kept])
            degraded += sum(1 for k in kept if not k)
            turns += len(kept)
    print(f"turns produced without thinking (served during the pause): {degraded} of {turns}")


def _thinking(content: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(b["thinking"], b["signature"]) for b in content if b["type"] == "thinking"]

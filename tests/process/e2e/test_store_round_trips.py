"""Store round trips per request, measured on real gateway replicas over one real redis-server.

A client that sends no conversation header (Cursor's servers, generic OpenAI clients) is recognised
by the index entries of its replayed turns. Each replica remembers which conversation the tool ids
it has seen belong to (``gateway.pipeline.identify``), so once it has served a conversation its loads take one
round trip again; a replica seeing the conversation for the first time takes two. Recording is one.
Requests go round robin over three replicas, as behind a load balancer without affinity.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, block_dicts, tool_results

KEY = "sk-round-trips"
ROUNDS = 8


def round_trips(gw: ServerProcess) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(gw.url + "/metrics", timeout=10).text):
        for s in fam.samples:
            if s.name == "gateway_store_round_trips_total":
                out[s.labels["op"]] = s.value
    return out


@pytest.fixture()
def replicas(sim: Sim, gateways: GatewayFactory, redis_url: str) -> Iterator[list[ServerProcess]]:
    env = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": "round-trip-secret-0123456789abcd",
           "GATEWAY_STORE_TIMEOUT_MS": "2000"}
    started = [gateways.start(sim.url, env) for _ in range(3)]
    yield started
    for sp in started:
        sp.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_headerless_loop_loads_in_one_round_trip_once_a_replica_knows_it(
        replicas: list[ServerProcess], stream: bool) -> None:
    clients = [anthropic.Anthropic(base_url=r.url, api_key=KEY, max_retries=0) for r in replicas]
    history: list = [{"role": "user", "content": f"[[sim:tools={ROUNDS}]] weather everywhere ({stream})"}]
    loads: list[float] = []
    records: list[float] = []
    for i in range(ROUNDS + 1):
        replica = replicas[i % 3]
        before = round_trips(replica)
        params = {"model": "claude-opus-4-5", "max_tokens": 4096, "tools": [WEATHER_TOOL], "thinking": THINKING,
                  "messages": history}
        if stream:
            with clients[i % 3].messages.stream(**params) as s:
                answer = s.get_final_message()
        else:
            answer = clients[i % 3].messages.create(**params)
        after = round_trips(replica)
        loads.append(after.get("load", 0) - before.get("load", 0))
        records.append(after.get("record", 0) - before.get("record", 0))
        if answer.stop_reason != "tool_use":
            break
        history.append({"role": "assistant", "content": block_dicts(answer)})
        history.append({"role": "user", "content": tool_results(answer)})
    for c in clients:
        c.close()

    assert len(loads) == ROUNDS + 1
    assert records == [1] * len(records)
    # request 0 replays nothing (one round trip for its fingerprint, or none); requests 1 and 2 reach
    # replicas that never saw the conversation: index, then conversation; from then on every replica
    # has served it once and its hint makes the load a single round trip
    assert loads[0] <= 1 and loads[1:3] == [2, 2], loads
    assert loads[3:] == [1] * (len(loads) - 3), loads

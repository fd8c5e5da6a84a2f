"""Three real ``thinkgate serve`` replicas sharing one Redis (single node, then a 3-master Cluster).

A round-robin client runs 20 concurrent tool-loop conversations with thinking through the official
SDK (AsyncAnthropic), every request to the next replica, history replayed without its thinking:
the simulator rejects nothing and every answer starts with thinking (records written by one
replica are restored by another). Then one replica is ``kill -9``-ed while every conversation has
a stream in flight (held by the simulator): the cut streams are retried on the next replica and
every conversation completes, with every turn recorded exactly once.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as SyncRedisCluster

from state.keys import conversation_keys, tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisCluster, RedisServer
from tests.support.cluster.roundrobin import KEY, SECRET, Conversation, RoundRobin, play_all

N_CONVERSATIONS = 20
ROUNDS = 3  # tool rounds: 4 answers per conversation


def start_replicas(gateways: GatewayFactory, sim: Sim, redis_url: str, n: int = 3) -> list[ServerProcess]:
    env = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": SECRET, "GATEWAY_STORE_TIMEOUT_MS": "1000"}
    return [gateways.start(sim.url, env) for _ in range(n)]


@pytest.fixture(scope="module", params=["redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> RedisServer | RedisCluster:
    """The shared store of this module's replicas: one redis-server, or the 3-master Cluster."""
    name = "redis_server" if request.param == "redis" else "redis_cluster"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def replicas(sim: Sim, gateways: GatewayFactory, backend: RedisServer | RedisCluster) -> Iterator[list[ServerProcess]]:
    """Three replicas on ``backend`` for the module's tests (the kill test, last, kills one)."""
    started = start_replicas(gateways, sim, backend.url)
    yield started
    for sp in started:
        sp.stop()


@pytest.fixture()
def store_url(backend: RedisServer | RedisCluster, replicas: list[ServerProcess]) -> str:
    assert all(sp.proc.poll() is None for sp in replicas), "a replica is down before the test"
    backend.flush()
    return backend.url


def redis_client(url: str) -> redis.Redis | SyncRedisCluster:
    if url.startswith("redis+cluster://"):
        nodes = [ClusterNode(h, int(p)) for h, p in (n.rsplit(":", 1) for n in url.split("://")[1].split(","))]
        return SyncRedisCluster(startup_nodes=nodes)
    return redis.Redis.from_url(url)


def recorded_turns(url: str, scid: str) -> int:
    with redis_client(url) as r:
        return int(r.llen(conversation_keys(tenant_prefix(SECRET.encode(), KEY), scid).turns))


@pytest.fixture()
def rejections(sim: Sim) -> Iterator[None]:
    before = sim.stats()["rejections"]
    yield
    assert sim.stats()["rejections"] == before, "the simulator rejected a request"


@pytest.fixture()
async def round_robin() -> AsyncIterator[list[RoundRobin]]:
    made: list[RoundRobin] = []
    yield made
    for rr in made:
        await rr.close()


def check_conversations(convs: list[Conversation], url: str) -> None:
    for c in convs:
        assert c.finished and len(c.answers) == ROUNDS + 1, (c.index, [a.stop_reason for a in c.answers])
        assert c.thinking_starts() == ["thinking"] * (ROUNDS + 1), (c.index, c.thinking_starts())
        assert len(set(c.scids)) == 1, f"conversation {c.index} forked: {c.scids}"
        assert recorded_turns(url, c.scids[0]) == ROUNDS + 1, f"conversation {c.index}: turns lost or doubled"


async def test_round_robin_20_conversations(replicas: list[ServerProcess], store_url: str, rejections: None,
                                            round_robin: list[RoundRobin]) -> None:
    rr = RoundRobin(replicas)
    round_robin.append(rr)
    convs = [Conversation(i, stream=i % 2 == 0, rounds=ROUNDS) for i in range(N_CONVERSATIONS)]
    await play_all(rr, convs)

    check_conversations(convs, store_url)
    assert not rr.failures
    assert dict(rr.served) == {0: 27, 1: 27, 2: 26}  # 80 requests, strictly in turn
    if store_url.startswith("redis+cluster://"):
        with redis_client(store_url) as r:
            assert isinstance(r, SyncRedisCluster)
            owners = {r.get_node_from_key(conversation_keys(tenant_prefix(SECRET.encode(), KEY), c.scids[0]).turns).name
                      for c in convs}
            masters = {n.name for n in r.get_primaries()}
        assert owners == masters, f"conversations should live on every master: {owners} vs {masters}"
    switches = sum(a != b for c in convs for a, b in zip(c.replicas, c.replicas[1:], strict=False))
    assert switches >= N_CONVERSATIONS * ROUNDS // 3, "turns should mostly follow one served elsewhere"
    print(f"{switches} of {N_CONVERSATIONS * ROUNDS} follow-up turns served by another replica")


async def test_control_separate_stores_lose_thinking(sim: Sim, gateways: GatewayFactory,
                                                     round_robin: list[RoundRobin]) -> None:
    """Control: the same client against replicas with separate (embedded) stores loses thinking on
    turns served by a replica that did not record the previous one. So the checks above measure
    the shared store, not the simulator or the client."""
    started = start_replicas(gateways, sim, "")
    rr = RoundRobin(started)
    round_robin.append(rr)
    conv = Conversation(0, stream=False, rounds=ROUNDS)
    await play_all(rr, [conv])
    for sp in started:
        sp.stop()
    assert conv.replicas == [0, 1, 2, 0]
    assert conv.thinking_starts()[:3] == ["thinking", "text", "text"]


async def _release_until(sim: Sim, done: asyncio.Event) -> None:
    """Keep releasing held streams (a stream that starts after a release is held again)."""
    async with httpx.AsyncClient() as client:
        while not done.is_set():
            await client.post(sim.url + "/_sim/release")
            try:
                await asyncio.wait_for(done.wait(), 0.05)
            except TimeoutError:
                pass


async def _wait_streams_open(sim: Sim, n: int) -> None:
    """Poll the simulator (another process: there is no event to await) until ``n`` streams are open."""
    async with httpx.AsyncClient() as client, asyncio.timeout(20):
        for _ in range(1000):
            if (await client.get(sim.url + "/_sim/stats")).json()["streams_open"] >= n:
                return
            await asyncio.sleep(0.02)


async def test_kill_9_one_replica_mid_stream(sim: Sim, replicas: list[ServerProcess], store_url: str,
                                             rejections: None, round_robin: list[RoundRobin]) -> None:
    rr = RoundRobin(replicas)
    round_robin.append(rr)
    # every streamed answer pauses after its first delta until /_sim/release
    convs = [Conversation(i, stream=True, rounds=ROUNDS, prompt_extra="[[sim:hold]] ") for i in range(N_CONVERSATIONS)]
    open_before = sim.stats()["streams_open"]
    cancelled_before = sim.stats()["streams_cancelled"]
    game = asyncio.ensure_future(play_all(rr, convs))
    done = asyncio.Event()
    releaser: asyncio.Future[None] | None = None
    try:
        await _wait_streams_open(sim, open_before + N_CONVERSATIONS)  # all 20 first turns in flight
        victim = replicas[1]
        os.kill(victim.proc.pid, signal.SIGKILL)
        assert victim.proc.wait(10) == -signal.SIGKILL
        releaser = asyncio.ensure_future(_release_until(sim, done))
        await asyncio.wait_for(game, 45)
    finally:
        done.set()
        game.cancel()
        if releaser is not None:
            await releaser
        sim.release()

    check_conversations(convs, store_url)
    # the victim had 7 of the 20 first streams (round robin), all cut and retried elsewhere
    assert rr.failed[1] >= 7 and set(rr.failed) == {1}, rr.failures
    assert sum(c.retries for c in convs) == rr.failed[1]
    assert sim.stats()["streams_cancelled"] - cancelled_before >= 7  # the cut reached the upstream
    assert rr.served[1] == 0  # it was killed before it finished any answer

"""A Redis Cluster master fails over while conversations run through three replicas.

The session's ``redis_cluster`` has no replicas (and keeps nothing on disk), so a restarted master
would come back empty; this module uses the session's ``cluster6`` (``tests/redis_fixtures.py``),
three masters each with a replica, and promotes the replica of the master that holds one
conversation's keys (``CLUSTER FAILOVER``, the coordinated manual failover: the replica catches up
before it takes over). That conversation
goes on after the failover with its history restored from the promoted node, while 19 others run
concurrently through the same round-robin client.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import pytest

from state.keys import conversation_keys, tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import ReplicatedCluster
from tests.support.cluster.roundrobin import KEY, SECRET, Conversation, RoundRobin, play, play_all, step

ROUNDS = 3
STORE_TROUBLE = re.compile(r"store (?:load|record) failed \(\w+\)")


def wait_for(predicate: object, what: str, timeout: float = 20) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling other processes: there is no event to await


@pytest.fixture()
def replicas(sim: Sim, gateways: GatewayFactory, cluster6: ReplicatedCluster) -> Iterator[list[ServerProcess]]:
    env = {"GATEWAY_REDIS_URL": cluster6.url, "GATEWAY_SECRET": SECRET, "GATEWAY_STORE_TIMEOUT_MS": "1000"}
    started = [gateways.start(sim.url, env) for _ in range(3)]
    yield started
    for sp in started:
        sp.stop()


def fail_over(cluster: ReplicatedCluster, key: str) -> tuple[int, int]:
    """Promote the replica of the master holding ``key``; wait until every node agrees."""
    wait_for(cluster.ready, "a settled topology (every master with a linked replica) before the failover")
    old, replica_ports = cluster.owner_of(key)
    with cluster.node(old).client() as c:
        assert c.exists(key), "the conversation's keys are not on the master that owns their slot"
    new = replica_ports[0]
    with cluster.node(new).client() as c:
        c.execute_command("CLUSTER", "FAILOVER")
    wait_for(lambda: all(cluster.owner_of(key, ask=n)[0] == new for n in cluster.nodes),
             "every node to see the promoted replica as the slot's master")
    return old, new


async def test_conversation_survives_failover_of_its_master(sim: Sim, replicas: list[ServerProcess],
                                                            cluster6: ReplicatedCluster) -> None:
    rejections = sim.stats()["rejections"]
    rr = RoundRobin(replicas)
    tenant = tenant_prefix(SECRET.encode(), KEY)
    target = Conversation(0, stream=True, rounds=ROUNDS)
    others = [Conversation(i, stream=i % 2 == 0, rounds=ROUNDS) for i in range(1, 20)]
    moved: list[tuple[int, int]] = []

    async def target_run() -> None:
        await step(rr, target)
        await step(rr, target)  # two turns recorded on the master of its slot
        meta = conversation_keys(tenant, target.scids[0]).meta
        moved.append(await asyncio.to_thread(fail_over, cluster6, meta))
        await play(rr, target)  # the rest of the loop reads and appends on the promoted node

    try:
        await asyncio.gather(target_run(), play_all(rr, others))
    finally:
        await rr.close()

    (old, new), = moved
    assert old != new
    assert sim.stats()["rejections"] == rejections, "the simulator rejected a request"
    assert all(c.finished for c in [target, *others])
    # the conversation whose master failed over: every turn restored, nothing lost
    assert target.thinking_starts() == ["thinking"] * (ROUNDS + 1), target.thinking_starts()
    assert len(set(target.scids)) == 1 and target.retries == 0, (target.scids, rr.failures)
    turns = conversation_keys(tenant, target.scids[0]).turns
    with cluster6.node(new).client() as c:
        assert c.llen(turns) == ROUNDS + 1  # all four turns, the two from before the failover included

    # Conversations with a request in flight on that master *during* the switch: every request
    # succeeds on the replica it was sent to (the store retries a dropped connection within its
    # timeout and maps anything the client library leaks to StoreUnavailable: never a 5xx). A store
    # call that still meets the switch is served statelessly ("store load failed (...); serving
    # statelessly" / "store record failed ...; turn not recorded"): that turn, or the next, may lose
    # its thinking, as the sanitize rules say, but only then.
    assert not rr.failures, rr.failures
    degraded = [c.index for c in others if c.thinking_starts() != ["thinking"] * (ROUNDS + 1)]
    if degraded:
        trouble = STORE_TROUBLE.findall("".join(sp.log() for sp in replicas))
        assert trouble, ("thinking lost without a store failure in the logs", degraded)

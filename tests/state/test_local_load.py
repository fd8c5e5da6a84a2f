"""A worker's own appends and the loads it answers itself (``state.convcache.appended``,
``EngineStore._local_load``).

Every backend (embedded, a real redis-server, a real 3-master Cluster): after a worker records turns, its
cache holds them (the next LOAD transfers nothing) and every load still equals a cold load; a load whose
replayed turns (``LoadQuery.replayed``) the worker holds takes no round trip and matches those turns as a
cold load does; anything it does not hold (a turn another worker appended, an unknown digest, a hinted
conversation no tool id names, another tenant, the cache off) goes to the store.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from state.engine import EngineStore
from state.errors import StoreError
from state.hashing import replay_digest
from state.keys import new_scid
from state.memory_store import MemoryStore
from state.records import TurnRecord
from state.store import LoadQuery, LoadResult, Store, TurnWrite
from tests.state.conftest import MakeStore
from tests.state.factories import TENANT_A, TENANT_B, turn
from tests.state.test_convcache import LoadSpy

T = TENANT_A


def plain(i: int, tag: str = "t") -> TurnRecord:
    """A turn the client receives exactly as stored (what the gateway records a replay digest for)."""
    t = turn(i, tag=tag)
    digest = replay_digest(t.content)
    assert digest is not None
    return dataclasses.replace(t, replay_digest=digest)


async def other_worker(make_store: MakeStore, store: Store, **kwargs: Any) -> Store:
    other = await make_store(**kwargs)
    if isinstance(store, MemoryStore):
        assert isinstance(other, MemoryStore)
        other._ks = store._ks  # the embedded store is one process: share its data
    return other


async def cold_load(make_store: MakeStore, store: Store, query: LoadQuery, tenant: str = T) -> LoadResult:
    """The same load by a worker that holds nothing."""
    cold = await other_worker(make_store, store, load_cache_bytes=0)
    return await cold.load(tenant, query)


def digests(*recs: TurnRecord) -> list[bytes]:
    return [r.replay_digest for r in recs]


async def test_own_appends_extend_the_cache_and_loads_stay_exact(make_store: MakeStore) -> None:
    store = await make_store(max_turns=4)
    spy = LoadSpy(store)
    scid = new_scid()
    for i in range(3):
        await store.record(T, TurnWrite(plain(i), scid=scid, expected_position=i))
    warm = await store.load(T, LoadQuery(scid=scid))
    assert spy.replies[-1][1:3] == (3, 0)  # the list from index 3 on: nothing to transfer
    assert warm == await cold_load(make_store, store, LoadQuery(scid=scid))
    for i in range(3, 7):  # past max_turns: trimmed from the front by the worker's own appends
        await store.record(T, TurnWrite(plain(i), scid=scid, expected_position=i))
    warm = await store.load(T, LoadQuery(scid=scid))
    assert spy.replies[-1][1:3] == (4, 0)
    assert warm.conversation is not None and [t.position for t in warm.conversation.turns] == [3, 4, 5, 6]
    assert warm == await cold_load(make_store, store, LoadQuery(scid=scid))

    other = await other_worker(make_store, store, max_turns=4)  # another worker appends: not known here
    await other.record(T, TurnWrite(plain(7, "o"), scid=scid, expected_position=7))
    await store.record(T, TurnWrite(plain(8), scid=scid, expected_position=8))
    warm = await store.load(T, LoadQuery(scid=scid))
    assert spy.replies[-1][1:3] == (2, 2)  # it knew up to 6 (start is 5 now): 7 and 8 come back
    assert warm == await cold_load(make_store, store, LoadQuery(scid=scid))

    late = new_scid()  # a conversation created at a later position (a client's first turn there)
    await store.record(T, TurnWrite(plain(5, "late"), scid=late, expected_position=5))
    warm = await store.load(T, LoadQuery(scid=late))
    assert spy.replies[-1][1:3] == (1, 0)
    assert warm == await cold_load(make_store, store, LoadQuery(scid=late))


async def test_a_load_of_held_turns_takes_no_round_trip(make_store: MakeStore) -> None:
    store = await make_store()
    scid = new_scid()
    recs = [plain(i) for i in range(4)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
    query = LoadQuery(scid=scid, tool_ids=["toolu_t_2", "toolu_t_3"], replayed=digests(*recs))
    local = await store.load(T, query)
    cold = await cold_load(make_store, store, query)
    assert local.round_trips == 0 and cold.round_trips == 1
    assert local.conversation == cold.conversation and local.conversations == cold.conversations
    assert local.tool_hits == cold.tool_hits  # the query's ids resolved among the held turns

    # without the header, the conversation is the hinted one, named by a tool id as an index hit names it
    hinted = LoadQuery(tool_ids=["toolu_t_3"], hint_scid=scid, replayed=digests(*recs))
    local, cold = await store.load(T, hinted), await cold_load(make_store, store, hinted)
    assert local.round_trips == 0 and local.conversation is None and cold.conversation is None
    assert local.conversations == cold.conversations and local.tool_hits == cold.tool_hits


async def test_a_hinted_fork_does_not_answer_for_the_turns_it_copied(make_store: MakeStore) -> None:
    """A fork holds copies of its parent's turns before the fork point: a replay of only those turns is the
    parent's as much as the fork's, so a hint naming the fork is no answer: the store's index says whose
    they are (the parent's), as a cold load finds. A replay reaching the fork's own turn is the fork's."""
    store = await make_store()
    parent = new_scid()
    recs = [plain(i) for i in range(3)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=parent, expected_position=i))
    own = plain(7, tag="own")
    fork = (await store.record(T, TurnWrite(own, scid=parent, expected_position=2, fork=True))).scid
    assert (await store.load(T, LoadQuery(scid=fork))).conversation is not None  # this worker holds the fork now
    copied = LoadQuery(tool_ids=["toolu_t_1"], hint_scid=fork, replayed=digests(*recs[:2]))
    local, cold = await store.load(T, copied), await cold_load(make_store, store, copied)
    assert local.round_trips >= 1 and {h.scid for h in local.tool_hits.values()} == {parent}
    assert local.tool_hits == cold.tool_hits
    reaching = LoadQuery(tool_ids=["toolu_own_7"], hint_scid=fork, replayed=digests(*recs[:2], own))
    local = await store.load(T, reaching)
    assert local.round_trips == 0 and {h.scid for h in local.tool_hits.values()} == {fork}


def ids(*recs: TurnRecord) -> list[list[str]]:
    """Each turn's tool ids as the gateway sends them (``Message.tool_use_ids``: a list)."""
    return [list(r.tool_use_ids()) for r in recs]


MANGLED = replay_digest([{"type": "text", "text": "the client's own rendering"}]) or b""


async def test_a_turn_the_client_changed_is_held_when_it_kept_the_tool_ids(make_store: MakeStore) -> None:
    """A replayed turn whose digest is no held turn's (thinking trimmed, signature dropped) is the held turn
    with exactly its tool ids: answered locally, the same as a cold load, for every recorded turn."""
    store = await make_store()
    scid = new_scid()
    recs = [plain(i) for i in range(4)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
        replayed = [MANGLED] * (i + 1)  # every turn so far changed by the client, the newest included
        query = LoadQuery(scid=scid, tool_ids=ids(rec)[0], replayed=replayed, replayed_tool_ids=ids(*recs[:i + 1]))
        local, cold = await store.load(T, query), await cold_load(make_store, store, query)
        assert local.round_trips == 0 and cold.round_trips == 1
        assert local.conversation == cold.conversation and local.tool_hits == cold.tool_hits


@pytest.mark.parametrize("changed", [False, True])
async def test_turns_trimmed_from_the_front_are_no_longer_held(make_store: MakeStore, changed: bool) -> None:
    store = await make_store(max_turns=3)
    scid = new_scid()
    recs = [plain(i) for i in range(5)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
        held = recs[max(0, i - 2):i + 1]
        query = LoadQuery(scid=scid, replayed=[MANGLED] * len(held) if changed else digests(*held),
                          replayed_tool_ids=ids(*held))
        assert (await store.load(T, query)).round_trips == 0  # what is held is answered (and indexed) here
    query = LoadQuery(scid=scid, replayed=[MANGLED] * 5 if changed else digests(*recs), replayed_tool_ids=ids(*recs))
    res = await store.load(T, query)  # turns 0 and 1 were trimmed by the worker's own appends
    assert res.round_trips == 1 and res == await cold_load(make_store, store, query)


@pytest.mark.parametrize("case", ["ids of no held turn", "fewer ids", "more ids", "ids reordered", "no ids",
                                  "no ids given"])
async def test_a_changed_turn_without_exactly_one_held_turns_ids_goes_to_the_store(
        make_store: MakeStore, case: str) -> None:
    store = await make_store()
    scid = new_scid()
    recs = [plain(i) for i in range(2)] + [turn(2, tag="two")]
    recs[2].content.append({"type": "tool_use", "id": "toolu_two_b", "name": "read_file", "input": {}})
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
    tool_ids: list[list[str]] = ids(*recs)
    last = tool_ids[2]
    tool_ids[2] = {"ids of no held turn": ["toolu_new"], "fewer ids": last[:1], "more ids": [*last, "toolu_x"],
                   "ids reordered": last[::-1], "no ids": [], "no ids given": last}[case]
    query = LoadQuery(scid=scid, replayed=[*digests(*recs[:2]), MANGLED],
                      replayed_tool_ids=[] if case == "no ids given" else tool_ids)
    res = await store.load(T, query)
    assert res.round_trips == 1 and res == await cold_load(make_store, store, query)


@pytest.mark.parametrize("case", ["unknown digest", "another worker's turn", "hint without tool ids",
                                  "another tenant", "cache off", "no digests"])
async def test_anything_not_held_goes_to_the_store(make_store: MakeStore, case: str) -> None:
    store = await make_store(load_cache_bytes=0 if case == "cache off" else 64 * 2**20)
    scid = new_scid()
    recs = [plain(i) for i in range(3)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
    replayed, tenant, query_scid, hint = digests(*recs), T, scid, None
    tool_ids, exact = ["toolu_t_2"], ["0" * 64]
    if case == "unknown digest":
        replayed[1] = replay_digest([{"type": "text", "text": "edited by the client"}]) or b""
    elif case == "another worker's turn":
        other = await other_worker(make_store, store)
        theirs = plain(3, "o")
        await other.record(T, TurnWrite(theirs, scid=scid, expected_position=3))
        replayed.append(theirs.replay_digest)
    elif case == "hint without tool ids":
        query_scid, hint, tool_ids = None, scid, []
    elif case == "another tenant":
        tenant = TENANT_B
    elif case == "no digests":
        replayed = []
    query = LoadQuery(scid=query_scid, tool_ids=tool_ids, exact_hashes=exact, hint_scid=hint, replayed=replayed)
    res = await store.load(tenant, query)
    assert res.round_trips >= 1
    assert res == await cold_load(make_store, store, query, tenant)
    if case == "another worker's turn":  # the load brought the cache up to date: now it is held
        assert res.conversation is not None and len(res.conversation.turns) == 4
        again = await store.load(T, query)
        assert again.round_trips == 0 and again.conversation == res.conversation


async def test_a_held_conversation_is_answered_as_the_worker_knows_it_not_refreshed(make_store: MakeStore) -> None:
    """The trade: a load answered locally does not see turns appended after the replayed ones, nor refresh
    TTLs; the next record does both (it appends at the position the replay implies, or forks)."""
    store = await make_store()
    assert isinstance(store, EngineStore)
    scid = new_scid()
    recs = [plain(i) for i in range(2)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
    other = await other_worker(make_store, store)
    await other.record(T, TurnWrite(plain(2, "o"), scid=scid, expected_position=2))  # a parallel branch
    local = await store.load(T, LoadQuery(scid=scid, replayed=digests(*recs)))
    assert local.round_trips == 0 and local.conversation is not None
    assert local.conversation.next_position == 2  # as this worker knows it
    res = await store.record(T, TurnWrite(plain(2), scid=scid, expected_position=2))
    assert res.forked and res.forked_from == scid  # the store still decides: position 2 is taken


@pytest.mark.parametrize("backend", ["redis"], indirect=True)
async def test_a_held_load_leaves_the_circuit_alone_and_an_open_circuit_is_not_answered_locally(
        make_store: MakeStore) -> None:
    """A load answered from what the worker holds never reaches the backend, so it tells the circuit breaker
    nothing (it used to count as a success and wipe the failures seen); while the circuit is open the
    worker does not answer from what it holds either: the load fails as every store call then does."""
    store = await make_store()
    assert isinstance(store, EngineStore)
    breaker = store.breaker  # type: ignore[attr-defined]
    scid = new_scid()
    recs = [plain(i) for i in range(3)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
    query = LoadQuery(scid=scid, replayed=digests(*recs))
    breaker.on_failure()
    assert breaker.consecutive_failures == 1
    assert (await store.load(T, query)).round_trips == 0
    assert breaker.consecutive_failures == 1
    for _ in range(breaker.failure_threshold):
        breaker.on_failure()
    assert breaker.state == "open"
    with pytest.raises(StoreError, match="circuit open"):
        await store.load(T, query)

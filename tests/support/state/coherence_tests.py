"""The coherence rule on every backend (embedded, a real redis-server, a real 3-master Cluster, TLS): what a worker
holds of a conversation serves only as of the head its own round trip reads (``state.coherence``).

Issue 31's field failure at the store's level: a worker that recorded a conversation's turns holds every turn a
request replays, but another replica recorded the newest one since. The load must still read Redis, find that
turn (the client dropped its message but kept its results: its tool id is the only evidence) and hand the
conversation back up to it, exactly as a worker that holds nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from state.coherence import serves
from state.engine import EngineStore
from state.keys import new_scid, replay_digest
from state.memory_store import MemoryStore
from state.records import TurnRecord
from state.store import LoadQuery, LoadResult, Store, TurnWrite
from tests.support.state.convcache_tests import LoadSpy
from tests.support.state.factories import TENANT_A, turn
from tests.support.state.fixtures import MakeStore

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


async def cold_load(make_store: MakeStore, store: Store, query: LoadQuery) -> LoadResult:
    """The same load by a worker that holds nothing."""
    cold = await other_worker(make_store, store, load_cache_bytes=0)
    return await cold.load(T, query)


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


async def test_a_worker_holding_every_replayed_turn_still_reads_the_turn_another_recorded(
        make_store: MakeStore) -> None:
    store = await make_store()
    scid = new_scid()
    recs = [plain(i) for i in range(3)]
    for i, rec in enumerate(recs):
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=i))
    other = await other_worker(make_store, store)
    newest = plain(3, "o")
    await other.record(T, TurnWrite(newest, scid=scid, expected_position=3))
    # the client dropped the newest turn's message and kept its results: its tool id, with or without the header
    for query in (LoadQuery(scid=scid, tool_ids=["toolu_o_3"]), LoadQuery(tool_ids=["toolu_o_3"], hint_scid=scid)):
        res = await store.load(T, query)
        assert res.round_trips >= 1
        conv = res.conversations[scid]
        assert [t.turn_id for t in conv.turns] == [r.turn_id for r in [*recs, newest]]
        assert res.tool_hits["toolu_o_3"].position == 3
        assert res == await cold_load(make_store, store, query)


async def test_a_record_reports_the_head_the_next_load_reads_until_another_record(make_store: MakeStore) -> None:
    store = await make_store()
    assert isinstance(store, EngineStore)
    scid = new_scid()
    first = await store.record(T, TurnWrite(plain(0), scid=scid, expected_position=0))
    second = await store.record(T, TurnWrite(plain(1), scid=scid, expected_position=1))
    assert first.head is not None and second.head is not None and first.head != second.head
    loaded = (await store.load(T, LoadQuery(scid=scid))).conversation
    assert loaded is not None and serves(second.head, loaded.head)
    assert not serves(first.head, loaded.head)
    other = await other_worker(make_store, store)
    await other.record(T, TurnWrite(plain(2, "o"), scid=scid, expected_position=2))
    after = (await store.load(T, LoadQuery(scid=scid))).conversation
    assert after is not None and not serves(second.head, after.head)  # another replica moved the head
    dup = await store.record(T, TurnWrite(plain(1), scid=scid, expected_position=1))
    assert dup.status == "duplicate" and dup.head is None  # a reply that does not say the head exactly: none


async def test_a_load_that_finds_nothing_new_hands_back_the_conversation_the_worker_holds(
        make_store: MakeStore) -> None:
    """Redis says in the round trip that nothing was recorded since: the worker's own conversation object comes back
    (its lookups built once, not per request); after another worker's record, a new one that holds the new turn."""
    store = await make_store()
    scid = new_scid()
    for i in range(3):
        await store.record(T, TurnWrite(plain(i), scid=scid, expected_position=i))
    first = (await store.load(T, LoadQuery(scid=scid))).conversation
    again = (await store.load(T, LoadQuery(scid=scid))).conversation
    assert first is not None and again is first
    other = await other_worker(make_store, store)
    await other.record(T, TurnWrite(plain(3, "o"), scid=scid, expected_position=3))
    after = (await store.load(T, LoadQuery(scid=scid))).conversation
    assert after is not first and after is not None and len(after.turns) == 4

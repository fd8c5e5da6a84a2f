"""The worker's conversation cache (``state.convcache``): a load transfers only the turns not seen yet.

Every backend (embedded, a real redis-server, a real 3-master Cluster): a cached load returns exactly
what a cold load returns, through appends, a gap, trimming past ``max_turns``, a restart at a later
start, an expiry + recreation under the same SCID (also within the same millisecond) and a fork; the
incremental LOAD reply holds only the new blobs; two workers on one Redis see each other's turns; the
cache keeps to its byte bound and never answers for another tenant.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from state import records
from state.coherence import Lru
from state.convcache import NOTHING_KNOWN, CachedConversation, ConversationCache, appended
from state.engine import EngineStore, Eval, Op, _parse_conversation
from state.errors import CodecError
from state.keys import conversation_keys, new_scid, replay_digest
from state.memory_store import MemoryStore
from state.records import ConversationState
from state.scripts import LOAD
from state.store import LoadQuery, LoadResult, Store, TurnWrite
from tests.support.state.factories import TENANT_A, TENANT_B, turn
from tests.support.state.fixtures import MakeStore

T = TENANT_A
ROOT = Path(__file__).resolve().parents[3]


class LoadSpy:
    """Wraps a store's round trip; keeps (ARGV, list index, blobs, bytes) of every LOAD reply."""

    def __init__(self, store: Store) -> None:
        assert isinstance(store, EngineStore)
        self.replies: list[tuple[tuple[Any, ...], int, int, int]] = []
        inner = store._roundtrip

        async def roundtrip(ops: Sequence[Op]) -> list[Any]:
            replies = await inner(ops)
            for op, reply in zip(ops, replies, strict=True):
                if isinstance(op, Eval) and op.script is LOAD and reply:
                    blobs = reply[1]
                    self.replies.append((op.args[1:], int(reply[2]), len(blobs), sum(len(b) for b in blobs)))
            return replies

        store._roundtrip = roundtrip  # type: ignore[method-assign]

    @property
    def last(self) -> tuple[int, int]:
        """(list index the last reply started at, number of blobs it carried)."""
        _, index, blobs, _ = self.replies[-1]
        return index, blobs


def _engine(store: Store) -> EngineStore:
    assert isinstance(store, EngineStore)
    return store


def _owner(raw_nodes: list[redis.Redis], key: str) -> redis.Redis:
    (client,) = [c for c in raw_nodes if c.keys(key)]
    return client


def _corrupt(store: Store, raw_nodes: list[redis.Redis], scid: str, index: int) -> None:
    """Overwrite the stored blob at list ``index`` with bytes no codec version decodes."""
    key = conversation_keys(T, scid).turns
    if isinstance(store, MemoryStore):
        store._ks.get(key)[index] = b"\x07not a turn"
    else:
        _owner(raw_nodes, key).lset(key, index, b"\x07not a turn")


def _expire(store: Store, raw_nodes: list[redis.Redis], scid: str) -> None:
    """What the TTL does to an idle conversation: its three keys are gone (the index entries stay)."""
    names = conversation_keys(T, scid).all()
    if isinstance(store, MemoryStore):
        store._ks.delete(*names)
    else:
        _owner(raw_nodes, names[0]).delete(*names)


async def _other_worker(make_store: MakeStore, store: Store, **kwargs: Any) -> Store:
    """Another worker on the same data: a second store object on the same Redis, or (embedded) one that
    shares the first one's keyspace."""
    other = await make_store(**kwargs)
    if isinstance(store, MemoryStore):
        assert isinstance(other, MemoryStore)
        other._ks = store._ks
    return other


async def _cold_load(store: Store, cold: Store | None, query: LoadQuery) -> LoadResult:
    """The same load with nothing cached: a fresh store object on the same Redis, or (embedded, where a
    second object would hold no data) the same store with its cache emptied for the call."""
    if cold is not None:
        return await cold.load(T, query)
    engine = _engine(store)
    kept, engine.conversation_cache = engine.conversation_cache, ConversationCache()
    try:
        return await store.load(T, query)
    finally:
        engine.conversation_cache = kept


async def test_a_cached_load_is_exactly_a_cold_load_through_every_kind_of_change(
        make_store: MakeStore, backend: str, raw_nodes: list[redis.Redis]) -> None:
    store = await make_store(max_turns=8)
    cold = None if backend == "memory" else await make_store(max_turns=8, load_cache_bytes=0)
    writer = await _other_worker(make_store, store, max_turns=8)  # turns this worker did not write itself
    spy = LoadSpy(store)
    scid = new_scid()

    async def same(query: LoadQuery | None = None) -> tuple[LoadResult, list[tuple[int, int]]]:
        """The cached load, checked against a cold one; and (list index, blobs) of its LOAD replies."""
        query = query or LoadQuery(scid=scid)
        before = len(spy.replies)
        warm = await store.load(T, query)
        replies = [(index, blobs) for _, index, blobs, _ in spy.replies[before:]]
        assert warm == await _cold_load(store, cold, query)
        if query.scid:
            assert await store.get_conversation(T, query.scid) == warm.conversation
        return warm, replies

    async def record(i: int, tag: str = "t", on: str | None = None) -> None:
        await writer.record(T, TurnWrite(turn(i, tag=tag), scid=on or scid, expected_position=i))

    for i in range(3):
        await record(i)
    _corrupt(store, raw_nodes, scid, 1)
    first, loads = await same()
    assert loads == [(0, 3)] and first.undecodable == 1
    assert first.conversation is not None and [t.position for t in first.conversation.turns] == [0, 2]
    again, loads = await same()
    assert loads == [(3, 0)] and again.undecodable == 1  # nothing new: no blob comes back
    await record(3)
    assert (await same())[1] == [(3, 1)]
    await record(6)  # a gap: positions 4 and 5 never received
    gap, loads = await same()
    assert loads == [(4, 3)] and gap.conversation is not None
    assert [t.position for t in gap.conversation.turns] == [0, 2, 3, 6]
    for i in (7, 8, 9):  # 10 positions > max_turns: trimmed from the front to start 2 (the bad blob goes)
        await record(i)
    trimmed, loads = await same()
    assert loads == [(5, 3)] and trimmed.undecodable == 0 and trimmed.conversation is not None
    assert trimmed.conversation.first_position == 2
    assert [t.position for t in trimmed.conversation.turns] == [2, 3, 6, 7, 8, 9]
    await record(10)
    await record(11)  # start 4: the cached 4..9 stay, 10 and 11 come back
    assert (await same())[1] == [(6, 2)]
    for i in range(12, 21):  # start 13: past everything cached, the whole list again
        await record(i)
    assert (await same())[1] == [(0, 8)]
    await record(40)  # a jump of max_turns or more: the lists restart at 40
    assert (await same())[1] == [(0, 1)]
    await record(41)
    assert (await same())[1] == [(1, 1)]

    _expire(store, raw_nodes, scid)  # expired, then recreated under the same SCID at the same positions
    await record(40, tag="new")
    await record(41, tag="new")
    recreated, loads = await same()
    assert loads == [(0, 2)] and recreated.conversation is not None
    assert [t.content[2]["id"] for t in recreated.conversation.turns] == ["toolu_new_40", "toolu_new_41"]

    fork = await writer.record(T, TurnWrite(turn(41, tag="f"), scid=scid, expected_position=41))
    assert fork.forked
    assert (await same())[1] == [(2, 0)]  # the parent is unchanged
    forked, loads = await same(LoadQuery(scid=fork.scid))
    assert loads == [(0, 2)] and forked.conversation is not None and forked.conversation.forked_from == scid
    await record(42, tag="f", on=fork.scid)
    assert (await same(LoadQuery(scid=fork.scid)))[1] == [(2, 1)]
    # the second round trip (conversations named only by index hits) and a hinted load use the cache too
    await record(43, tag="f", on=fork.scid)
    by_index, loads = await same(LoadQuery(tool_ids=["toolu_f_43"]))
    assert by_index.round_trips == 2 and fork.scid in by_index.conversations and loads == [(3, 1)]
    await record(44, tag="f", on=fork.scid)
    hinted, loads = await same(LoadQuery(tool_ids=["toolu_f_44"], hint_scid=fork.scid))
    assert hinted.round_trips == 1 and fork.scid in hinted.conversations and loads == [(4, 1)]


async def test_a_recreation_within_the_same_millisecond_is_not_mistaken_for_the_cached_one(
        make_store: MakeStore, raw_nodes: list[redis.Redis]) -> None:
    store = await make_store()
    _engine(store)._wall = lambda: 1_700_000_000.0  # every write in the same millisecond: same ``created``
    spy = LoadSpy(store)
    scid = new_scid()
    for i in range(2):
        await store.record(T, TurnWrite(turn(i), scid=scid, expected_position=i))
    assert (await store.get_conversation(T, scid)) is not None
    _expire(store, raw_nodes, scid)
    other = await _other_worker(make_store, store)  # recreated by another worker, in the same millisecond
    _engine(other)._wall = _engine(store)._wall
    for i in range(2):
        await other.record(T, TurnWrite(turn(i, tag="again"), scid=scid, expected_position=i))
    conv = await store.get_conversation(T, scid)
    assert spy.last == (0, 2)  # same created, same next: the turn id at next - 1 tells them apart
    assert conv is not None and [t.content[2]["id"] for t in conv.turns] == ["toolu_again_0", "toolu_again_1"]


async def test_the_incremental_reply_carries_only_the_new_turns(make_store: MakeStore) -> None:
    store = await make_store()
    writer = await _other_worker(make_store, store)
    spy = LoadSpy(store)
    scid = new_scid()
    blobs = [records.encode_turn(turn(i)) for i in range(51)]
    for i in range(50):
        await writer.record(T, TurnWrite(turn(i), scid=scid, expected_position=i))
    await store.load(T, LoadQuery(scid=scid))
    assert spy.replies[-1] == (NOTHING_KNOWN, 0, 50, sum(map(len, blobs[:50])))
    await writer.record(T, TurnWrite(turn(50), scid=scid, expected_position=50))
    res = await store.load(T, LoadQuery(scid=scid))
    known, index, count, nbytes = spy.replies[-1]
    assert known[1:] == ("50", turn(49).turn_id) and (index, count, nbytes) == (50, 1, len(blobs[50]))
    assert res.round_trips == 1 and res.conversation is not None and len(res.conversation.turns) == 51
    await store.load(T, LoadQuery(scid=scid))
    assert spy.replies[-1][1:] == (51, 0, 0)


async def test_two_workers_on_one_redis_see_each_others_turns(make_store: MakeStore, backend: str) -> None:
    if backend == "memory":
        pytest.skip("the embedded store is one process: there is no second worker")
    a, b = await make_store(max_turns=3), await make_store(max_turns=3)
    spy = LoadSpy(a)
    scid = new_scid()
    for i in range(2):
        await a.record(T, TurnWrite(turn(i), scid=scid, expected_position=i))
    await a.load(T, LoadQuery(scid=scid))
    await b.record(T, TurnWrite(turn(2, tag="b"), scid=scid, expected_position=2))
    seen = await a.load(T, LoadQuery(scid=scid, tool_ids=["toolu_b_2"]))
    assert spy.last == (2, 1) and seen.round_trips == 1 and seen.tool_hits["toolu_b_2"].position == 2
    for i in (3, 4):  # B appends twice more; trimmed to 3 turns: start 2
        await b.record(T, TurnWrite(turn(i, tag="b"), scid=scid, expected_position=i))
    conv = await a.get_conversation(T, scid)
    assert spy.last == (1, 2)
    assert conv is not None and [t.position for t in conv.turns] == [2, 3, 4]
    assert conv == await b.get_conversation(T, scid)


async def test_the_cache_keeps_to_its_byte_bound_least_recently_used_out(make_store: MakeStore) -> None:
    # bounded by what the decoded turns hold (``records.turn_cost``), not by their stored bytes
    per_conversation = sum(records.turn_cost(records.decode_turn(records.encode_turn(turn(i, tag="c"))))
                           for i in range(4))
    store = await make_store(load_cache_bytes=3 * per_conversation)
    cache = _engine(store).conversation_cache
    scids = [new_scid() for _ in range(5)]
    for scid in scids:
        for i in range(4):
            await store.record(T, TurnWrite(turn(i, tag="c"), scid=scid, expected_position=i))
    for scid in scids[:3]:
        await store.load(T, LoadQuery(scid=scid))
    assert len(cache) == 3 and cache.nbytes == 3 * per_conversation
    await store.load(T, LoadQuery(scid=scids[0]))  # now the most recently used
    for scid in scids[3:]:
        await store.load(T, LoadQuery(scid=scid))
        assert cache.nbytes <= cache.max_bytes
    assert [s for s in scids if cache.get(T, s) is not None] == [scids[0], scids[3], scids[4]]

    big = new_scid()  # larger than half the bound: never cached, always loaded whole and right
    for i in range(13):
        await store.record(T, TurnWrite(turn(i, tag="c"), scid=big, expected_position=i))
    spy = LoadSpy(store)
    for _ in range(2):
        res = await store.load(T, LoadQuery(scid=big))
        assert spy.last == (0, 13) and res.conversation is not None and len(res.conversation.turns) == 13
    assert cache.get(T, big) is None and cache.nbytes <= cache.max_bytes


async def test_the_cache_never_answers_for_another_tenant(make_store: MakeStore) -> None:
    store = await make_store()
    writer = await _other_worker(make_store, store)
    spy = LoadSpy(store)
    scid = new_scid()
    for i in range(2):
        await writer.record(TENANT_A, TurnWrite(turn(i, tag="a"), scid=scid, expected_position=i))
    await store.load(TENANT_A, LoadQuery(scid=scid))
    assert (await store.load(TENANT_B, LoadQuery(scid=scid))).conversation is None
    await writer.record(TENANT_B, TurnWrite(turn(0, tag="b"), scid=scid, expected_position=0))
    seen_by_b = await store.load(TENANT_B, LoadQuery(scid=scid))
    assert spy.replies[-1][0] == NOTHING_KNOWN and spy.last == (0, 1)  # nothing of A's entry was sent
    assert seen_by_b.conversation is not None
    assert [t.content[2]["id"] for t in seen_by_b.conversation.turns] == ["toolu_b_0"]
    seen_by_a = await store.load(TENANT_A, LoadQuery(scid=scid))
    assert spy.last == (2, 0) and seen_by_a.conversation is not None
    assert [t.content[2]["id"] for t in seen_by_a.conversation.turns] == ["toolu_a_0", "toolu_a_1"]
    cache = _engine(store).conversation_cache
    a_entry, b_entry = cache.get(TENANT_A, scid), cache.get(TENANT_B, scid)
    assert a_entry is not None and b_entry is not None and a_entry.turns != b_entry.turns


async def test_a_reply_that_does_not_continue_the_cache_fails_the_call_and_forgets_the_entry(
        store: Store, backend: str) -> None:
    scid = new_scid()
    for i in range(3):
        await store.record(T, TurnWrite(turn(i), scid=scid, expected_position=i))
    good = await store.get_conversation(T, scid)
    engine = _engine(store)
    inner = engine._roundtrip

    async def off_by_one(ops: Sequence[Op]) -> list[Any]:  # a reply claiming to start at index 2, not 3
        return [[r[0], r[1], 2] if isinstance(op, Eval) and op.script is LOAD else r
                for op, r in zip(ops, await inner(ops), strict=True)]

    engine._roundtrip = off_by_one  # type: ignore[method-assign]
    with pytest.raises(CodecError):  # a StoreError on every backend: the gateway serves statelessly
        await store.load(T, LoadQuery(scid=scid))
    assert engine.conversation_cache.get(T, scid) is None
    engine._roundtrip = inner  # type: ignore[method-assign]
    assert await store.get_conversation(T, scid) == good


def test_a_two_element_reply_is_the_whole_list() -> None:
    blobs = [records.encode_turn(turn(i)) for i in range(2)]
    flat = [b"created", b"1000", b"updated", b"2000", b"version", b"2", b"start", b"0", b"next", b"2"]
    conv, bad, entry = _parse_conversation("s" * 22, [flat, blobs], None, Lru(8))
    assert (conv, bad, entry) == _parse_conversation("s" * 22, [flat, blobs, 0], None, Lru(8))
    assert conv is not None and bad == 0 and entry == CachedConversation(
        created="1000", start=0, next=2, last_turn_id=turn(1).turn_id, turns=conv.turns,
        sizes=tuple(map(records.turn_cost, conv.turns)), undecodable=())


@pytest.mark.timeout(120)
@pytest.mark.process
def test_load_bench_short_form_runs() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "load_bench.py"), "--samples", "3",
                           "--sizes", "10,20"], capture_output=True, text=True, timeout=100, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 10 |") or line.startswith("| 20 |")]
    assert len(rows) == 2


def test_a_grown_state_takes_over_the_lookups_built_and_answers_as_a_fresh_one() -> None:
    """``ConversationState.grown_from``: a worker's own append gives a state whose lookups (by position, turn
    id, replay digest, tool id) are the previous state's plus the new turn, not rebuilt over the whole conversation,
    and answer exactly as a state built from the same turns."""
    def plain(i: int) -> Any:
        t = turn(i)
        return dataclasses.replace(t, replay_digest=replay_digest(t.content) or b"")

    scid = new_scid()
    entry = appended(None, scid, plain(0), 10, position=0, start=0, created="1", version=1, updated=1.0, is_new=True)
    for i in range(1, 6):
        assert entry is not None and entry.state is not None
        if i >= 3:  # lookups used (so built) before the append: carried over, not left to be rebuilt
            entry.state.turn_by_digest(b"")
            entry.state.turn_at(0)
            entry.state.turn_by_tool_id("")
        entry = appended(entry, scid, plain(i), 10, position=i, start=0, created="1", version=i + 1,
                         updated=1.0, is_new=False)
    assert entry is not None and entry.state is not None
    grown = entry.state
    assert None not in (grown._by_digest, grown._by_position, grown._by_tool_id)  # taken over
    fresh = ConversationState(scid=scid, created_at=0, updated_at=0, version=0, turns=grown.turns,
                              last_verified=None, first_position=0, next_position=6)
    for rec in grown.turns:
        assert rec.position is not None
        assert grown.turn_by_digest(rec.replay_digest) is fresh.turn_by_digest(rec.replay_digest) is rec
        assert grown.turn_at(rec.position) is fresh.turn_at(rec.position) is rec
        assert grown.turn_by_id(rec.turn_id) is fresh.turn_by_id(rec.turn_id) is rec
        for tid in rec.tool_use_ids():
            assert grown.turn_by_tool_id(tid) is fresh.turn_by_tool_id(tid) is rec
    assert dict(grown.by_position) == dict(fresh.by_position)
    with pytest.raises(ValueError):
        fresh.grown_from(fresh)


def _by_definition(state: ConversationState, ids: Sequence[str]) -> Any:
    """The turn a mangled replay's message names by its tool ids: the one turn with its first tool id, when
    that turn has exactly these tool ids."""
    rec = state.turn_by_tool_id(ids[0]) if ids else None
    return rec if rec is not None and rec.tool_use_ids() == tuple(ids) else None


@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3), min_size=1, max_size=8),
       st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=3), max_size=8))
def test_turns_by_tool_ids_are_the_one_turn_of_the_first_id_with_exactly_those_ids(
        recorded: list[list[str]], asked: list[list[str]]) -> None:
    """Turns sharing tool ids (an upstream numbering its calls per answer: such an id names no turn) and lists in
    another order, shorter or longer: one C-level lookup per replayed message answers as the definition, built at
    once or grown turn by turn."""
    def content(ids: list[str]) -> list[dict[str, Any]]:
        return [{"type": "text", "text": "t"}] + [{"type": "tool_use", "id": t, "name": "f", "input": {}}
                                                  for t in ids]

    scid = new_scid()
    recs = [dataclasses.replace(turn(i), content=content(ids), position=i) for i, ids in enumerate(recorded)]
    whole = ConversationState(scid=scid, created_at=0, updated_at=0, version=0, turns=tuple(recs),
                              last_verified=None, first_position=0, next_position=len(recs))
    grown = ConversationState(scid=scid, created_at=0, updated_at=0, version=0, turns=tuple(recs[:1]),
                              last_verified=None, first_position=0, next_position=1)
    grown.turns_by_tool_ids([])  # built, then carried over each append
    for n in range(2, len(recs) + 1):
        nxt = ConversationState(scid=scid, created_at=0, updated_at=0, version=0, turns=tuple(recs[:n]),
                                last_verified=None, first_position=0, next_position=n)
        nxt.grown_from(grown)
        grown = nxt
    queries = asked + recorded
    want = [_by_definition(whole, q) for q in queries]
    for q, got in zip(queries, want, strict=True):  # the definition's lookup: an id of several turns names none
        holders = [r for r in recs if q and q[0] in r.tool_use_ids()]
        assert got is (holders[0] if len(holders) == 1 and holders[0].tool_use_ids() == tuple(q) else None)
    assert all(map(lambda a, b: a is b, whole.turns_by_tool_ids(queries), want))
    assert all(map(lambda a, b: a is b, grown.turns_by_tool_ids(queries), want))

"""Embedded store specifics: TTL on an injected monotonic clock, refresh on use, bounded size."""

from __future__ import annotations

from state.engine import Eval
from state.keys import hash_tag, new_scid
from state.memory_store import MemoryStore
from state.store import LoadQuery, TurnWrite
from tests.support.state.factories import TENANT_A, TENANT_B, turn

T = TENANT_A


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_everything_expires_after_ttl() -> None:
    clock = Clock()
    store = MemoryStore(ttl_seconds=60, clock=clock)
    res = await store.record(T, TurnWrite(turn(0, fingerprint="fp")))
    clock.t += 59
    assert await store.get_conversation(T, res.scid) is not None
    assert (await store.load(TENANT_B, LoadQuery(scid=res.scid))).foreign
    clock.t += 61
    assert await store.get_conversation(T, res.scid) is None
    assert not (await store.load(TENANT_B, LoadQuery(scid=res.scid))).foreign  # the marker expired too
    gone = await store.load(T, LoadQuery(tool_ids=["toolu_t_0"], fingerprints=["fp"]))
    assert not gone.tool_hits and not gone.fingerprint_hits
    assert (await store.health()).detail == "0 keys"


async def test_use_refreshes_the_ttl() -> None:
    clock = Clock()
    store = MemoryStore(ttl_seconds=60, clock=clock)
    res = await store.record(T, TurnWrite(turn(0)))
    for _ in range(5):  # 5 x 50 s > 60 s, but each use refreshes
        clock.t += 50
        loaded = await store.load(T, LoadQuery(scid=res.scid, tool_ids=["toolu_t_0"]))
        assert loaded.conversation is not None and "toolu_t_0" in loaded.tool_hits
    clock.t += 50
    nxt = await store.record(T, TurnWrite(turn(1), scid=res.scid))
    assert (nxt.position, nxt.created) == (1, False)


async def test_an_expired_conversation_is_recreated_under_its_scid() -> None:
    clock = Clock()
    store = MemoryStore(ttl_seconds=10, clock=clock)
    scid = new_scid()
    await store.record(T, TurnWrite(turn(0), scid=scid))
    clock.t += 11
    res = await store.record(T, TurnWrite(turn(1), scid=scid, expected_position=1))
    assert res.created and res.position == 1 and res.scid == scid


async def test_max_keys_bounds_memory_evicting_oldest_first() -> None:
    clock = Clock()
    store = MemoryStore(max_keys=60, clock=clock)
    scids = []
    for i in range(30):
        clock.t += 1
        scids.append((await store.record(T, TurnWrite(turn(i, tag=str(i))))).scid)
    assert int((await store.health()).detail.split()[0]) <= 60
    assert await store.get_conversation(T, scids[0]) is None
    assert await store.get_conversation(T, scids[-1]) is not None


class _Seen(MemoryStore):
    """Notes the script calls of each round trip."""

    def __init__(self, one_slot: bool) -> None:
        super().__init__()
        self.one_slot_per_script = one_slot
        self.calls: list[list[tuple[str, tuple[str, ...]]]] = []

    async def _roundtrip(self, ops):  # type: ignore[no-untyped-def]
        self.calls.append([(op.script.name, tuple(op.keys)) for op in ops if isinstance(op, Eval)])
        return await super()._roundtrip(ops)


async def test_a_turns_index_keys_are_one_script_call_unless_a_script_may_touch_one_slot_only() -> None:
    """One call per round trip reads (GETEX_MANY) or writes (INDEX_PUT) all of a request's index keys; on Redis
    Cluster (``one_slot_per_script``) one per hash tag, since a script there may touch only one slot's keys."""
    for one_slot in (False, True):
        store = _Seen(one_slot)
        rec = turn(0, fingerprint="fp", signature="sig-a")
        rec.content.append({"type": "tool_use", "id": "toolu_second", "name": "f", "input": {}})
        res = await store.record(T, TurnWrite(rec))
        puts = [k for name, k in store.calls[-1] if name == "index_put"]
        tags = {hash_tag(key) for group in puts for key in group}
        assert sum(len(group) for group in puts) == 4 and len(tags) >= 2  # two tool ids, the signature, the path
        assert len(puts) == (len(tags) if one_slot else 1)
        assert all(len({hash_tag(key) for key in group}) == 1 for group in puts) or not one_slot
        await store.load(T, LoadQuery(tool_ids=["toolu_t_0", "toolu_second"], fingerprints=["fp"], scid=res.scid))
        gets = [k for name, k in store.calls[-1] if name == "getex_many"]
        read = {hash_tag(key) for group in gets for key in group}
        assert sum(map(len, gets)) == 3 and len(gets) == (len(read) if one_slot else 1)

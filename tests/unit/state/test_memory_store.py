"""Embedded store specifics: TTL on an injected monotonic clock, refresh on use, bounded size."""

from __future__ import annotations

from state.keys import new_scid
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

"""Round trips are counted where they are written: every write redis-py makes goes through
``AbstractConnection.send_packed_command`` (one call per pipeline per node), and every write of the
single-node path (``state.resp``) through ``_Connection.roundtrip`` (one ``transport.write`` each)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

from state.keys import exact_hash, new_scid
from state.resp import _Connection
from state.store import LoadQuery, Store, TurnWrite
from tests.support.state.factories import TENANT_A, turn

N = 500


class SendCounter:
    def __init__(self) -> None:
        self.sends: Counter[int] = Counter()  # writes per server port

    @property
    def total(self) -> int:
        return sum(self.sends.values())


@pytest.fixture()
def sends(monkeypatch: pytest.MonkeyPatch) -> Iterator[SendCounter]:
    counter = SendCounter()
    original = AbstractConnection.send_packed_command

    async def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        counter.sends[int(getattr(self, "port", 0))] += 1
        await original(self, command, check_health)

    lean = _Connection.roundtrip

    async def counting_lean(self: _Connection, payload: bytes, count: int, *rest: Any) -> list[Any]:
        assert self._transport is not None
        peer = self._transport.get_extra_info("peername")
        counter.sends[int(peer[1]) if isinstance(peer, tuple) else 0] += 1
        return await lean(self, payload, count, *rest)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    monkeypatch.setattr(_Connection, "roundtrip", counting_lean)
    yield counter


async def _replayed_history(store: Store) -> tuple[str, LoadQuery]:
    scid = new_scid()
    for i in range(N):
        await store.record(TENANT_A, TurnWrite(turn(i), scid=scid, expected_position=i))
    query = LoadQuery(
        scid=scid,
        tool_ids=[f"toolu_t_{i}" for i in range(N)],
        exact_hashes=[exact_hash(f"Let me think about t-{i}.\r\n") for i in range(N)],
        fingerprints=[f"fp-{i}" for i in range(N)],
    )
    return scid, query


async def test_500_turn_history_loads_in_one_pipelined_round_trip(
    store: Store, backend: str, sends: SendCounter
) -> None:
    scid, query = await _replayed_history(store)
    await store.load(TENANT_A, query)  # warm: every pooled connection has done its handshake
    before_store = getattr(store, "round_trips", 0)
    sends.sends.clear()

    res = await store.load(TENANT_A, query)

    assert res.round_trips == 1
    assert getattr(store, "round_trips", 0) - before_store == 1
    assert res.conversation is not None and len(res.conversation.turns) == N
    assert len(res.tool_hits) == N and len(res.exact_hits) == N
    assert all(loc.scid == scid for loc in res.tool_hits.values())
    if backend == "redis":
        assert sends.total == 1, sends.sends  # one write on one connection: one pipeline
    elif backend == "cluster":
        # one pipeline, split by node and sent concurrently: at most one write per node
        assert 1 <= sends.total <= 3 and max(sends.sends.values()) == 1, sends.sends


async def test_record_is_one_round_trip(store: Store, backend: str, sends: SendCounter) -> None:
    scid = new_scid()
    await store.record(TENANT_A, TurnWrite(turn(0), scid=scid))  # warm
    sends.sends.clear()
    res = await store.record(TENANT_A, TurnWrite(turn(1, fingerprint="fp"), scid=scid, fingerprints=["x"]))
    assert res.round_trips == 1 and res.status == "appended"
    if backend == "redis":
        assert sends.total == 1
    elif backend == "cluster":
        assert max(sends.sends.values()) == 1


async def _conversation(store: Store, tag: str, n: int = 5) -> str:
    scid = new_scid()
    for i in range(n):
        await store.record(TENANT_A, TurnWrite(turn(i, tag=tag), scid=scid, expected_position=i))
    return scid


async def test_a_right_hint_finds_the_conversation_in_one_round_trip(
        store: Store, backend: str, sends: SendCounter) -> None:
    """No SCID: the index names the conversation. Without a hint the conversation takes a second
    round trip; with the right hint it comes in the first."""
    scid = await _conversation(store, "h")
    query = LoadQuery(tool_ids=["toolu_h_3", "toolu_h_4"])
    cold = await store.load(TENANT_A, query)
    assert cold.round_trips == 2 and scid in cold.conversations
    sends.sends.clear()

    warm = await store.load(TENANT_A, LoadQuery(tool_ids=["toolu_h_3", "toolu_h_4"], hint_scid=scid))

    assert warm.round_trips == 1
    assert set(warm.conversations) == {scid} and len(warm.conversations[scid].turns) == 5
    assert warm.tool_hits == cold.tool_hits and warm.conversation is None  # a hint is not a header
    if backend == "redis":
        assert sends.total == 1, sends.sends


async def test_a_wrong_hint_is_dropped_and_costs_only_the_read(store: Store) -> None:
    right = await _conversation(store, "r")
    other = await _conversation(store, "o")  # same tenant, not the one the index names

    res = await store.load(TENANT_A, LoadQuery(tool_ids=["toolu_r_4"], hint_scid=other))

    assert res.round_trips == 2 and set(res.conversations) == {right}  # the guessed one is not reported
    assert {loc.scid for loc in res.tool_hits.values()} == {right}
    unknown = await store.load(TENANT_A, LoadQuery(tool_ids=["toolu_nobody_1"], hint_scid=other))
    assert unknown.conversations == {} and unknown.tool_hits == {}  # nothing names it: not loaded
    assert (await store.load(TENANT_A, LoadQuery(hint_scid=other))).conversations == {}  # no lookups: no load

"""Contract: finding records again (SCID, tool ids, exact thinking hashes, fingerprints), isolation; text is
no index (it never names a turn or a conversation)."""

from __future__ import annotations

import re

import redis

from state.keys import exact_hash, new_scid, scid_marker_key
from state.records import TurnRecord
from state.store import LoadQuery, Store, TurnWrite
from tests.support.state.factories import TENANT_A, TENANT_B, turn
from tests.support.state.fixtures import MakeStore

T = TENANT_A


async def _conversation(store: Store, n: int, *, tag: str = "t", scid: str | None = None) -> str:
    scid = scid or new_scid()
    for i in range(n):
        await store.record(T, TurnWrite(turn(i, tag=tag, fingerprint=f"fp-{tag}-{i}"), scid=scid,
                                        expected_position=i, fingerprints=[f"after-{tag}-{i}"]))
    return scid


async def test_empty_query_costs_nothing(store: Store) -> None:
    res = await store.load(T, LoadQuery())
    assert res.round_trips == 0 and res.conversation is None and not res.conversations


async def test_load_by_scid_is_one_round_trip_with_every_hit(store: Store) -> None:
    scid = await _conversation(store, 4)
    q = LoadQuery(
        scid=scid,
        tool_ids=[f"toolu_t_{i}" for i in range(4)] + ["toolu_unknown"],
        exact_hashes=[exact_hash(f"Let me think about t-{i}.\r\n") for i in range(4)],
        fingerprints=["fp-t-0", "after-t-3", "nope"],
    )
    res = await store.load(T, q)
    assert res.round_trips == 1 and res.unresolved == 0 and res.undecodable == 0
    assert res.conversation is not None and res.conversation.scid == scid
    assert [t.position for t in res.conversation.turns] == [0, 1, 2, 3]
    assert set(res.tool_hits) == {f"toolu_t_{i}" for i in range(4)}
    for i in range(4):
        loc = res.tool_hits[f"toolu_t_{i}"]
        assert (loc.scid, loc.position) == (scid, i)
        rec = res.record_for_tool(f"toolu_t_{i}")
        assert rec is not None and rec.content[2]["id"] == f"toolu_t_{i}"
    assert res.exact_hits[exact_hash("Let me think about t-2.\r\n")] == "sig-t-2=="
    assert res.fingerprint_hits == {"fp-t-0": scid, "after-t-3": scid}


async def test_text_is_no_index(store: Store, raw_nodes: list[redis.Redis]) -> None:
    """Agents write the same words in every conversation: a recorded turn's visible text and thinking are
    not indexed (only its tool ids, the exact text of its signed thinking and its path are)."""
    await store.record(T, TurnWrite(turn(0, text="Let me check the files.", fingerprint="fp-text")))
    names = [k.decode() for node in raw_nodes for k in node.scan_iter(b"tg:*")] if raw_nodes else \
        list(store._ks._data)  # type: ignore[attr-defined]  # the embedded store's keys
    index = [m.group(1) for k in names if (m := re.match(r"tg:\{[^:}]+:i\d+\}:([^:]+):", k))]  # tg:{<t>:i<b>}:<kind>:
    assert set(index) == {"tool", "x", "fp"}, names


async def test_exact_hash_is_strict_and_empty_thinking_is_not_indexed(store: Store) -> None:
    omitted = TurnRecord(content=[{"type": "thinking", "thinking": "", "signature": "sig-omitted"}])
    await store.record(T, TurnWrite(omitted))
    await store.record(T, TurnWrite(turn(0)))
    res = await store.load(T, LoadQuery(exact_hashes=[
        exact_hash(""), exact_hash("Let me think about t-0.\n"), exact_hash("Let me think about t-0.\r\n")]))
    assert list(res.exact_hits) == [exact_hash("Let me think about t-0.\r\n")]


async def test_unknown_scid_falls_back_to_index_hits_in_two_round_trips(store: Store) -> None:
    scid = await _conversation(store, 3)
    res = await store.load(T, LoadQuery(scid=new_scid(), tool_ids=["toolu_t_1"]))
    assert res.conversation is None and res.round_trips == 2
    assert res.tool_hits["toolu_t_1"].scid == scid and scid in res.conversations
    res = await store.load(T, LoadQuery(fingerprints=["after-t-2"]))  # no SCID at all
    assert res.round_trips == 2 and res.fingerprint_hits["after-t-2"] == scid and scid in res.conversations
    bad = await store.load(T, LoadQuery(scid="{bad}", tool_ids=["toolu_t_0"]))
    assert bad.conversation is None and bad.tool_hits["toolu_t_0"].scid == scid


async def test_second_round_trip_fetches_at_most_two_most_referenced(store: Store) -> None:
    a = await _conversation(store, 3, tag="a")
    b = await _conversation(store, 2, tag="b")
    c = await _conversation(store, 1, tag="c")
    q = LoadQuery(tool_ids=["toolu_a_0", "toolu_a_1", "toolu_a_2", "toolu_b_0", "toolu_b_1", "toolu_c_0"])
    res = await store.load(T, q)
    assert res.round_trips == 2 and set(res.conversations) == {a, b}
    assert set(res.tool_hits) == {"toolu_a_0", "toolu_a_1", "toolu_a_2", "toolu_b_0", "toolu_b_1"}
    assert res.unresolved == 1 and c not in res.conversations


async def test_max_fetch_zero_never_takes_a_second_round_trip(make_store: MakeStore) -> None:
    store = await make_store(max_fetch=0)
    await _conversation(store, 2)
    res = await store.load(T, LoadQuery(tool_ids=["toolu_t_0"]))
    assert res.round_trips == 1 and not res.tool_hits and res.unresolved == 1


async def test_fork_prefix_hits_resolve_inside_the_fork_in_one_round_trip(store: Store) -> None:
    scid = await _conversation(store, 3)
    fork = await store.record(T, TurnWrite(turn(2, tag="z"), scid=scid, expected_position=2))
    res = await store.load(T, LoadQuery(scid=fork.scid, tool_ids=["toolu_t_0", "toolu_t_1", "toolu_z_2"]))
    assert res.round_trips == 1 and set(res.conversations) == {fork.scid}
    assert {k: (v.scid, v.position) for k, v in res.tool_hits.items()} == {
        "toolu_t_0": (fork.scid, 0), "toolu_t_1": (fork.scid, 1), "toolu_z_2": (fork.scid, 2)}


async def test_trimmed_record_hits_are_dropped_not_dangling(make_store: MakeStore) -> None:
    store = await make_store(max_turns=2)
    scid = await _conversation(store, 4)
    res = await store.load(T, LoadQuery(scid=scid, tool_ids=["toolu_t_0", "toolu_t_3"]))
    assert res.round_trips == 1 and set(res.tool_hits) == {"toolu_t_3"} and res.unresolved == 1


async def test_isolation_between_tenants(store: Store) -> None:
    rec = turn(0, fingerprint="shared-fp")
    res = await store.record(TENANT_A, TurnWrite(rec, scid=new_scid(), fingerprints=["shared-after"]))
    q = LoadQuery(scid=res.scid, tool_ids=["toolu_t_0"],
                  exact_hashes=[exact_hash(rec.content[0]["thinking"])],
                  fingerprints=["shared-fp", "shared-after"])
    seen_by_a = await store.load(TENANT_A, q)
    assert seen_by_a.conversation is not None and len(seen_by_a.tool_hits) == 1
    assert len(seen_by_a.exact_hits) == 1
    assert len(seen_by_a.fingerprint_hits) == 2
    seen_by_b = await store.load(TENANT_B, q)
    assert seen_by_b.conversation is None and not seen_by_b.conversations
    assert not seen_by_b.tool_hits and not seen_by_b.exact_hits
    assert not seen_by_b.fingerprint_hits
    assert await store.get_conversation(TENANT_B, res.scid) is None
    # B writing under A's SCID creates B's own conversation and leaves A's untouched
    b_res = await store.record(TENANT_B, TurnWrite(turn(9, tag="b"), scid=res.scid))
    assert b_res.created and b_res.position == 0
    a_conv = await store.get_conversation(TENANT_A, res.scid)
    assert a_conv is not None and [t.turn_id for t in a_conv.turns] == [rec.turn_id]


async def test_a_scid_held_by_another_tenant_is_foreign_and_returns_nothing(
        make_store: MakeStore, raw_nodes: list[redis.Redis]) -> None:
    store = await make_store(ttl_seconds=1000)
    scid = await _conversation(store, 3)
    fork = await store.record(T, TurnWrite(turn(1, tag="f"), scid=scid, expected_position=1))
    assert fork.forked

    for named in (scid, fork.scid):
        seen_by_b = await store.load(TENANT_B, LoadQuery(scid=named, tool_ids=["toolu_t_0"]))
        assert seen_by_b.foreign and seen_by_b.round_trips == 1  # read in the same round trip
        assert seen_by_b.conversation is None and not seen_by_b.conversations and not seen_by_b.tool_hits
        seen_by_a = await store.load(T, LoadQuery(scid=named))
        assert not seen_by_a.foreign and seen_by_a.conversation is not None
    for query in (LoadQuery(scid=new_scid()), LoadQuery(tool_ids=["toolu_t_0"]),
                  LoadQuery(hint_scid=scid, tool_ids=["toolu_t_0"])):  # unknown SCID, no SCID, a hint
        assert not (await store.load(TENANT_B, query)).foreign
    # once B records under that SCID it is B's own conversation: a hit, not foreign
    await store.record(TENANT_B, TurnWrite(turn(7, tag="b"), scid=scid))
    mine = await store.load(TENANT_B, LoadQuery(scid=scid))
    assert not mine.foreign and mine.conversation is not None and len(mine.conversation.turns) == 1

    # Redis: the marker says nothing about the tenant, and lives as long as the conversation
    for client in raw_nodes:
        for key in client.keys(b"*:seen"):
            assert key in {scid_marker_key(scid).encode(), scid_marker_key(fork.scid).encode()}
            assert TENANT_A.encode() not in key and client.get(key) == b"1"
            assert 900 < client.ttl(key) <= 1000
    if raw_nodes:
        assert sum(len(c.keys(b"*:seen")) for c in raw_nodes) == 2


async def test_health_reports_ok(store: Store, backend: str) -> None:
    health = await store.health()
    assert health.ok and health.circuit == "closed"
    assert health.backend == {"memory": "memory", "redis": "redis", "cluster": "redis-cluster", "tls": "redis"}[backend]


async def test_an_index_entry_two_turns_wrote_is_no_evidence(store: Store) -> None:
    """The same tool id, thinking text and path recorded by two conversations (a client that numbers its calls
    itself, two conversations with the same prompt): the entries become ambiguous and find nothing, on every
    backend, while
    each conversation's own unique entries still find it; the same turn written again (a retry) or re-pointed
    at its fork stays unambiguous."""
    x, y = new_scid(), new_scid()
    shared = {"thinking": "Let me check the files.", "fingerprint": "fp-shared"}  # each with its own signature
    for scid, tag in ((x, "x"), (y, "y")):
        rec = turn(0, tag=tag, **shared)
        rec.content[2]["id"] = "call_0"
        await store.record(T, TurnWrite(rec, scid=scid, expected_position=0))
        own = turn(1, tag=tag, fingerprint=f"fp-{tag}")
        await store.record(T, TurnWrite(own, scid=scid, expected_position=1))
        await store.record(T, TurnWrite(own, scid=scid, expected_position=1))  # a retry: the same turn
    own_y = exact_hash("Let me think about y-1.\r\n")
    res = await store.load(T, LoadQuery(tool_ids=["call_0", "toolu_x_1"],
                                        exact_hashes=[exact_hash("Let me check the files."), own_y],
                                        fingerprints=["fp-shared", "fp-x"]))
    assert set(res.tool_hits) == {"toolu_x_1"} and res.tool_hits["toolu_x_1"].scid == x
    assert res.exact_hits == {own_y: "sig-y-1=="}
    assert res.fingerprint_hits == {"fp-x": x}
    assert res.ambiguous == 3
    # a fork re-points its turn's entries (the same turn): not ambiguous
    edited = turn(2, tag="fork", fingerprint="fp-edited")
    forked = await store.record(T, TurnWrite(edited, scid=x, expected_position=1, fork=True))
    assert forked.forked
    res = await store.load(T, LoadQuery(tool_ids=["toolu_fork_2"], fingerprints=["fp-edited"]))
    assert res.tool_hits["toolu_fork_2"].scid == forked.scid and res.fingerprint_hits == {"fp-edited": forked.scid}
    assert res.ambiguous == 0

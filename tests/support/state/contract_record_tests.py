"""Contract: recording turns. Runs against the embedded store, a real Redis and a real Redis Cluster."""

from __future__ import annotations

import pytest
import redis

from state import records
from state.keys import fork_scid, is_valid_scid, new_scid
from state.records import TurnRecord, VerifiedPair
from state.store import LoadQuery, Store, TurnWrite
from tests.support.state.factories import TENANT_A, turn
from tests.support.state.fixtures import MakeStore

T = TENANT_A


async def test_record_creates_conversation_and_get_returns_it_exactly(store: Store) -> None:
    rec = turn(0, provider={"gemini": {"thoughtSignature": "abc"}, "ids": [1, 2]}, fingerprint="fp-0")
    res = await store.record(T, TurnWrite(rec))
    assert res.status == "appended" and res.created and res.position == 0 and res.version == 1
    assert is_valid_scid(res.scid) and res.turn_id == rec.turn_id and not res.forked
    conv = await store.get_conversation(T, res.scid)
    assert conv is not None
    assert conv.scid == res.scid and conv.version == 1
    assert conv.first_position == 0 and conv.next_position == 1
    assert conv.created_at > 0 and conv.updated_at >= conv.created_at
    (got,) = conv.turns
    assert got.content == rec.content and got.provider == rec.provider
    assert (got.model, got.upstream, got.dialect) == ("claude-test", "anthropic", "anthropic")
    assert got.prefix_fingerprint == "fp-0" and got.turn_id == rec.turn_id and got.position == 0
    assert got.created_at == rec.created_at
    assert conv.last_verified == VerifiedPair(rec.content[0]["thinking"], rec.content[0]["signature"])


async def test_appends_advance_position_and_version(store: Store) -> None:
    scid = new_scid()
    for i in range(5):
        res = await store.record(T, TurnWrite(turn(i), scid=scid, expected_position=None if i % 2 else i))
        assert (res.position, res.version, res.status, res.created) == (i, i + 1, "appended", i == 0)
    conv = await store.get_conversation(T, scid)
    assert conv is not None
    assert [t.position for t in conv.turns] == [0, 1, 2, 3, 4]
    assert conv.version == 5 and conv.next_position == 5
    assert conv.last_verified == VerifiedPair("Let me think about t-4.\r\n", "sig-t-4==")


async def test_same_turn_recorded_twice_is_stored_once(store: Store) -> None:
    first = await store.record(T, TurnWrite(turn(0)))
    await store.record(T, TurnWrite(turn(1), scid=first.scid))
    again = await store.record(T, TurnWrite(turn(0), scid=first.scid))  # retry, no position
    assert (again.status, again.position, again.version) == ("duplicate", 0, 2)
    again = await store.record(T, TurnWrite(turn(1), scid=first.scid, expected_position=1))
    assert (again.status, again.position) == ("duplicate", 1)
    conv = await store.get_conversation(T, first.scid)
    assert conv is not None and len(conv.turns) == 2 and conv.version == 2


async def test_turn_without_thinking_keeps_last_verified_pair(store: Store) -> None:
    res = await store.record(T, TurnWrite(turn(0)))
    plain = TurnRecord(content=[{"type": "text", "text": "no thinking here"}])
    await store.record(T, TurnWrite(plain, scid=res.scid))
    unsigned = TurnRecord(content=[{"type": "thinking", "thinking": "unsigned"}])  # no signature
    await store.record(T, TurnWrite(unsigned, scid=res.scid))
    conv = await store.get_conversation(T, res.scid)
    assert conv is not None
    assert conv.last_verified == VerifiedPair("Let me think about t-0.\r\n", "sig-t-0==")


async def test_exotic_content_round_trips_byte_exact(store: Store) -> None:
    content = [
        {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBx...omitted=="},  # display: omitted
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
        {"type": "thinking", "thinking": "  line1\r\n\tline2 \u00a0 é 🧠 \u2028 end\n\n", "signature": "s2",
         "cache_control": {"type": "ephemeral"}, "future_field": [1, 2.5, None, True]},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
        {"type": "text", "text": "", "citations": None},
        {"type": "tool_use", "id": "toolu_01", "name": "t", "input": {}},
    ]
    rec = TurnRecord(content=content, provider={"raw": {"nested": {"k": "v"}}, "big": 2**63 - 1})
    res = await store.record(T, TurnWrite(rec))
    conv = await store.get_conversation(T, res.scid)
    assert conv is not None
    got = conv.turns[0]
    assert got.content == content and got.provider == rec.provider
    assert got.content[2]["thinking"].encode() == content[2]["thinking"].encode()
    assert list(got.content[2]) == list(content[2])  # key order kept
    assert conv.last_verified == VerifiedPair(content[2]["thinking"], "s2")


async def test_given_scid_that_does_not_exist_is_created(store: Store) -> None:
    scid = new_scid()
    res = await store.record(T, TurnWrite(turn(0), scid=scid, expected_position=3))
    assert (res.scid, res.position, res.created) == (scid, 3, True)
    conv = await store.get_conversation(T, scid)
    assert conv is not None and conv.first_position == 3 and [t.position for t in conv.turns] == [3]


async def test_bad_arguments_raise_value_error(store: Store) -> None:
    with pytest.raises(ValueError):
        await store.record(T, TurnWrite(turn(0), scid="bad{scid}with-braces!"))
    with pytest.raises(ValueError):
        await store.record("tenant:{x}", TurnWrite(turn(0)))
    with pytest.raises(ValueError):
        await store.record(T, TurnWrite(turn(0), expected_position=-1))
    with pytest.raises(ValueError):  # a fork needs the position it branches at
        await store.record(T, TurnWrite(turn(0), scid=new_scid(), fork=True))
    assert await store.get_conversation(T, "not a scid") is None


async def test_unencodable_record_raises_codec_error_before_io(store: Store) -> None:
    from state.errors import CodecError

    rec = TurnRecord(content=[{"type": "text", "text": "x"}], provider={"n": 2**70})
    with pytest.raises(CodecError):
        await store.record(T, TurnWrite(rec))


async def test_fork_when_client_rewrote_history(store: Store) -> None:
    base = await store.record(T, TurnWrite(turn(0)))
    scid = base.scid
    for i in (1, 2, 3):
        await store.record(T, TurnWrite(turn(i), scid=scid, expected_position=i))
    edited = turn(2, tag="edited")
    res = await store.record(T, TurnWrite(edited, scid=scid, expected_position=2))
    assert res.forked and res.status == "forked" and res.forked_from == scid and res.scid != scid
    assert res.position == 2 and res.round_trips == 2
    fork = await store.get_conversation(T, res.scid)
    assert fork is not None and fork.forked_from == scid
    assert [t.turn_id for t in fork.turns] == [turn(0).turn_id, turn(1).turn_id, edited.turn_id]
    assert [t.position for t in fork.turns] == [0, 1, 2] and fork.next_position == 3
    assert fork.last_verified == VerifiedPair("Let me think about edited-2.\r\n", "sig-edited-2==")
    old = await store.get_conversation(T, scid)
    assert old is not None and len(old.turns) == 4 and old.turns[2].turn_id == turn(2).turn_id
    # retrying the same forking write lands on the same fork
    again = await store.record(T, TurnWrite(edited, scid=scid, expected_position=2))
    assert (again.scid, again.status, again.forked, again.position) == (res.scid, "duplicate", True, 2)
    # the new turn's index entries point at the fork
    hit = await store.load(T, LoadQuery(tool_ids=["toolu_edited_2"]))
    assert hit.tool_hits["toolu_edited_2"].scid == res.scid
    # and the fork continues normally
    nxt = await store.record(T, TurnWrite(turn(3, tag="edited"), scid=res.scid, expected_position=3))
    assert (nxt.scid, nxt.position, nxt.status) == (res.scid, 3, "appended")


async def test_forced_fork_at_a_free_position(store: Store) -> None:
    """The gateway saw the client's path leave the conversation's (an edit answered at its tip): the
    turn goes to a fork although nothing holds its position."""
    base = await store.record(T, TurnWrite(turn(0)))
    scid = base.scid
    await store.record(T, TurnWrite(turn(1), scid=scid, expected_position=1))
    edited = turn(2, tag="edited")
    res = await store.record(T, TurnWrite(edited, scid=scid, expected_position=2, fork=True))
    assert (res.status, res.forked, res.forked_from, res.position, res.round_trips) == ("forked", True, scid, 2, 2)
    assert res.scid == fork_scid(scid, 2, edited.turn_id)
    fork = await store.get_conversation(T, res.scid)
    assert fork is not None and fork.forked_from == scid and fork.version == 1
    assert [t.turn_id for t in fork.turns] == [turn(0).turn_id, turn(1).turn_id, edited.turn_id]
    assert [t.position for t in fork.turns] == [0, 1, 2] and fork.next_position == 3
    assert fork.turns[1].content == turn(1).content
    old = await store.get_conversation(T, scid)
    assert old is not None and old.version == 2 and old.next_position == 2
    assert [t.turn_id for t in old.turns] == [turn(0).turn_id, turn(1).turn_id]
    # a retried forking write lands on the same fork and changes nothing
    again = await store.record(T, TurnWrite(edited, scid=scid, expected_position=2, fork=True))
    assert (again.scid, again.status, again.forked, again.position) == (res.scid, "duplicate", True, 2)
    assert await store.get_conversation(T, res.scid) == fork
    hit = await store.load(T, LoadQuery(tool_ids=["toolu_edited_2"]))
    assert hit.tool_hits["toolu_edited_2"].scid == res.scid
    # the turn already at the position is a retry there, never a fork
    dup = await store.record(T, TurnWrite(turn(1), scid=scid, expected_position=1, fork=True))
    assert (dup.scid, dup.status, dup.forked, dup.position) == (scid, "duplicate", False, 1)
    # the original continues at its free position
    nxt = await store.record(T, TurnWrite(turn(2), scid=scid, expected_position=2))
    assert (nxt.scid, nxt.status, nxt.position) == (scid, "appended", 2)
    # nothing to fork from: created as without fork
    fresh = new_scid()
    first = await store.record(T, TurnWrite(turn(0, tag="fresh"), scid=fresh, expected_position=0, fork=True))
    assert (first.scid, first.status, first.created, first.forked) == (fresh, "appended", True, False)


async def test_forced_fork_beyond_the_end_keeps_positions_absolute(make_store: MakeStore) -> None:
    store = await make_store(max_turns=4)
    base = await store.record(T, TurnWrite(turn(0)))
    await store.record(T, TurnWrite(turn(1), scid=base.scid))
    res = await store.record(T, TurnWrite(turn(3, tag="x"), scid=base.scid, expected_position=3, fork=True))
    fork = await store.get_conversation(T, res.scid)
    assert res.forked and fork is not None and [t.position for t in fork.turns] == [0, 1, 3]
    assert fork.next_position == 4
    far = await store.record(T, TurnWrite(turn(9, tag="x"), scid=base.scid, expected_position=9, fork=True))
    fork = await store.get_conversation(T, far.scid)
    assert far.forked and fork is not None and [t.position for t in fork.turns] == [9]
    assert fork.first_position == 9 and fork.next_position == 10


async def test_fork_without_a_verified_turn_inherits_the_prefix_pair(store: Store) -> None:
    base = await store.record(T, TurnWrite(turn(0)))
    await store.record(T, TurnWrite(turn(1), scid=base.scid))
    plain = TurnRecord(content=[{"type": "text", "text": "rewritten"}])
    res = await store.record(T, TurnWrite(plain, scid=base.scid, expected_position=1))
    fork = await store.get_conversation(T, res.scid)
    assert fork is not None and res.forked
    assert fork.last_verified == VerifiedPair("Let me think about t-0.\r\n", "sig-t-0==")


async def test_gap_positions_are_kept_absolute(store: Store) -> None:
    res = await store.record(T, TurnWrite(turn(0)))
    gap = await store.record(T, TurnWrite(turn(4), scid=res.scid, expected_position=4))
    assert gap.position == 4 and gap.status == "appended"
    conv = await store.get_conversation(T, res.scid)
    assert conv is not None and [t.position for t in conv.turns] == [0, 4] and conv.next_position == 5
    assert conv.turn_at(4) is not None and conv.turn_at(2) is None
    before = conv.head
    # a gap is a position the store never received (a turn whose record was deferred while the store was away):
    # received later, it fills the gap in place, and the conversation becomes a new incarnation
    filler = await store.record(T, TurnWrite(turn(2), scid=res.scid, expected_position=2))
    assert not filler.forked and filler.status == "appended" and filler.position == 2 and filler.scid == res.scid
    conv = await store.get_conversation(T, res.scid)
    assert conv is not None and [t.position for t in conv.turns] == [0, 2, 4] and conv.next_position == 5
    assert conv.head.created != before.created
    assert filler.head == conv.head
    again = await store.record(T, TurnWrite(turn(2), scid=res.scid, expected_position=2))
    assert again.status == "duplicate" and again.position == 2
    other = await store.record(T, TurnWrite(turn(2, tag="x"), scid=res.scid, expected_position=2))
    assert other.forked  # a position held by another turn is never rewritten in place


async def test_max_turns_trims_oldest_and_keeps_positions(make_store: MakeStore) -> None:
    store = await make_store(max_turns=5)
    res = await store.record(T, TurnWrite(turn(0)))
    for i in range(1, 8):
        await store.record(T, TurnWrite(turn(i), scid=res.scid))
    conv = await store.get_conversation(T, res.scid)
    assert conv is not None
    assert [t.position for t in conv.turns] == [3, 4, 5, 6, 7]
    assert conv.first_position == 3 and conv.next_position == 8 and conv.version == 8
    assert conv.turns[0].turn_id == turn(3).turn_id
    # a fork at a trimmed position copies nothing it does not have
    fork = await store.record(T, TurnWrite(turn(1, tag="x"), scid=res.scid, expected_position=1))
    fconv = await store.get_conversation(T, fork.scid)
    assert fconv is not None and [t.position for t in fconv.turns] == [1]
    # a fork keeps at most max_turns too
    fork2 = await store.record(T, TurnWrite(turn(7, tag="y"), scid=res.scid, expected_position=7))
    f2 = await store.get_conversation(T, fork2.scid)
    assert f2 is not None and [t.position for t in f2.turns] == [3, 4, 5, 6, 7]


async def test_every_key_has_a_ttl_and_use_refreshes_it(
    make_store: MakeStore, raw_nodes: list[redis.Redis], backend: str
) -> None:
    if backend == "memory":
        pytest.skip("memory TTLs are tested with an injected clock in test_memory_store.py")
    store = await make_store(ttl_seconds=1000)
    res = await store.record(T, TurnWrite(turn(0, fingerprint="fp"), scid=new_scid()))
    await store.record(T, TurnWrite(turn(1), scid=res.scid))
    all_keys = [(c, k) for c in raw_nodes for k in c.keys("*")]
    assert len(all_keys) >= 3 + 4
    for client, key in all_keys:
        assert 900 < client.ttl(key) <= 1000, key
        client.expire(key, 50)
    await store.load(T, LoadQuery(scid=res.scid, tool_ids=["toolu_t_0"]))
    refreshed = {k for c, k in all_keys if c.ttl(k) > 900}
    assert any(k.endswith(b":meta") for k in refreshed) and any(b":tool:" in k for k in refreshed)


async def test_codec_bytes_are_what_is_stored(raw_nodes: list[redis.Redis], store: Store, backend: str) -> None:
    if backend == "memory":
        pytest.skip("needs a real Redis")
    rec = turn(0)
    res = await store.record(T, TurnWrite(rec))
    (blob,) = [b for c in raw_nodes for k in c.keys(b"*:turns") for b in c.lrange(k, 0, -1)]
    assert blob[0] in (records.VERSION_MSGPACK, records.VERSION_ZLIB)
    assert records.decode_turn(blob, 0).content == rec.content and res.position == 0

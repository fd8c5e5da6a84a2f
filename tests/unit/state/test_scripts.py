"""Lua scripts on fakeredis (fast): the same engine over EVALSHA, plus static checks on the sources."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import fakeredis
import pytest

from state.engine import Eval
from state.keys import conversation_keys, new_scid
from state.redis_store import RedisStore
from state.scripts import ALL_SCRIPTS, RECORD
from state.store import LoadQuery, TurnWrite
from tests.support.state.factories import TENANT_A, turn

T = TENANT_A


@pytest.fixture()
async def fake_store() -> AsyncIterator[RedisStore]:
    client = fakeredis.FakeAsyncRedis()
    store = RedisStore(client, timeout_ms=2000, max_turns=4)
    await store.start()
    yield store
    await store.close()


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda s: s.name)
def test_scripts_touch_only_their_keys(script: object) -> None:
    source = script.source  # type: ignore[attr-defined]
    loop_vars = set(re.findall(r"for \w+, (\w+) in ipairs\(KEYS\)", source))
    for call in re.findall(r"redis\.call\('([A-Z]+)',\s*([^,)]+)", source):
        assert call[1].startswith("KEYS[") or call[1] in loop_vars, call
    assert not re.search(r"\bKEYS\b\s*\(|'KEYS'|'SCAN'", source)
    # a conversation's three keys; a gateway key's up to seven (ADMIT, RELEASE), all under the {gk} hash tag
    assert set(re.findall(r"KEYS\[(\d)\]", source)) <= {"1", "2", "3", "4", "5", "6", "7"}


async def test_record_script_semantics_on_fakeredis(fake_store: RedisStore) -> None:
    scid = new_scid()
    for i in range(6):
        res = await fake_store.record(T, TurnWrite(turn(i), scid=scid))
        assert res.position == i
    assert (await fake_store.record(T, TurnWrite(turn(5), scid=scid))).status == "duplicate"
    conv = await fake_store.get_conversation(T, scid)
    assert conv is not None and [t.position for t in conv.turns] == [2, 3, 4, 5]  # max_turns=4
    fork = await fake_store.record(T, TurnWrite(turn(4, tag="f"), scid=scid, expected_position=4))
    assert fork.forked and fork.position == 4
    fconv = await fake_store.get_conversation(T, fork.scid)
    assert fconv is not None and [t.position for t in fconv.turns] == [2, 3, 4]
    gap = await fake_store.record(T, TurnWrite(turn(9), scid=scid, expected_position=9))
    conv = await fake_store.get_conversation(T, scid)
    assert gap.position == 9 and conv is not None and [t.position for t in conv.turns] == [9]
    res = await fake_store.load(T, LoadQuery(scid=scid, tool_ids=["toolu_t_9", "toolu_f_4"]))
    assert set(res.tool_hits) == {"toolu_t_9", "toolu_f_4"} and res.round_trips == 2


async def test_record_reply_shapes(fake_store: RedisStore) -> None:
    ck = conversation_keys(T, new_scid())
    op = Eval(RECORD, ck.all(), ("a" * 64, b"\x01\x90", "", 1, 60, 10, b""))
    (reply,) = await fake_store._roundtrip([op])
    assert reply == [b"ok", 0, 1, 1, 0, b"1"]  # + start and meta's created (the worker's cache: convcache)
    (reply,) = await fake_store._roundtrip([op])
    assert reply == [b"dup", 0, 1, 0]
    other = Eval(RECORD, ck.all(), ("b" * 64, b"\x01\x90", 0, 1, 60, 10, b""))
    (reply,) = await fake_store._roundtrip([other])
    assert reply == [b"conflict", 0, 1, 0, 0, [], []]


async def test_noscript_reloads_and_replays(fake_store: RedisStore) -> None:
    await fake_store.client.script_flush()
    res = await fake_store.record(T, TurnWrite(turn(0)))
    assert res.status == "appended" and res.round_trips == 1

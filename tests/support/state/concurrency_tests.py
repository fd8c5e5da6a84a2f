"""Concurrent appends to one conversation: none lost, none duplicated, retries stored once."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from state.keys import new_scid
from state.store import Store, TurnWrite
from tests.support.state.factories import TENANT_A, turn
from tests.support.state.fixtures import MakeStore

N = 200
REPO = Path(__file__).resolve().parents[3]


async def _append_all(store: Store, scid: str, tag: str) -> None:
    results = await asyncio.gather(
        *(store.record(TENANT_A, TurnWrite(turn(i, tag=tag), scid=scid)) for i in range(N)))
    assert all(r.status == "appended" and r.scid == scid for r in results)


async def _check(store: Store, scid: str, tags: tuple[str, str]) -> None:
    conv = await store.get_conversation(TENANT_A, scid)
    assert conv is not None
    assert [t.position for t in conv.turns] == list(range(2 * N))  # contiguous, nothing lost
    ids = [t.turn_id for t in conv.turns]
    assert len(set(ids)) == 2 * N  # nothing duplicated
    assert set(ids) == {turn(i, tag=tag).turn_id for tag in tags for i in range(N)}
    assert conv.version == 2 * N


async def test_two_store_instances_append_200_each_at_once(make_store: MakeStore, backend: str) -> None:
    first = await make_store()
    second = first if backend == "memory" else await make_store()  # separate connection pools
    scid = new_scid()
    await asyncio.gather(_append_all(first, scid, "a"), _append_all(second, scid, "b"))
    retries = await asyncio.gather(
        *(s.record(TENANT_A, TurnWrite(turn(i, tag=tag), scid=scid))
          for s, tag in ((first, "a"), (second, "b")) for i in range(0, N, 7)))
    assert all(r.status == "duplicate" for r in retries)
    await _check(first, scid, ("a", "b"))


async def test_two_processes_append_200_each_at_once(
    make_store: MakeStore, store_url: str | None, backend: str
) -> None:
    if backend == "memory":
        pytest.skip("the embedded store is per process")
    assert store_url is not None
    store = await make_store()
    scid = new_scid()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.state._writer", store_url, TENANT_A, scid, "child", str(N),
        cwd=REPO, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    try:
        assert (await asyncio.wait_for(child.stdout.readline(), 30)).strip() == b"ready"
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        await _append_all(store, scid, "parent")
        assert (await asyncio.wait_for(child.stdout.readline(), 30)).strip() == b"done"
        assert await asyncio.wait_for(child.wait(), 30) == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    await _check(store, scid, ("parent", "child"))

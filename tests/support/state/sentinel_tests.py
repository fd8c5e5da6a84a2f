"""``redis+sentinel://``: the store finds the master through a real Redis Sentinel."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from state.factory import open_store
from state.keys import new_scid
from state.store import LoadQuery, TurnWrite
from tests.redis_fixtures import RedisServer, _wait_until, find_redis_binaries, free_port
from tests.support.state.factories import TENANT_A, turn


@pytest.fixture()
def sentinel(redis_server: RedisServer, tmp_path: Path) -> Iterator[int]:
    server_bin, _ = find_redis_binaries()
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor tgmaster 127.0.0.1 {redis_server.port} 1\n")
    proc = subprocess.Popen([server_bin, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    def knows_master() -> bool:
        try:
            return client.sentinel_get_master_addr_by_name("tgmaster") is not None
        except (redis.RedisError, OSError):
            return False

    try:
        _wait_until(knows_master, "sentinel to know the master", proc)
        yield port
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


async def test_store_through_sentinel(redis_url: str, sentinel: int) -> None:
    store = open_store(f"redis+sentinel://127.0.0.1:{sentinel}/tgmaster/0", timeout_ms=1000)
    await store.start()
    try:
        assert (await store.health()).ok
        scid = new_scid()
        rec = turn(0, tag="sentinel")
        res = await store.record(TENANT_A, TurnWrite(record=rec, scid=scid))
        assert res.status == "appended"
        loaded = await store.load(TENANT_A, LoadQuery(scid=scid, tool_ids=["toolu_sentinel_0"]))
        assert loaded.conversation is not None and loaded.conversation.turns[0].content == rec.content
        assert "toolu_sentinel_0" in loaded.tool_hits
    finally:
        await store.close()


def test_sentinel_url_needs_a_service_name() -> None:
    with pytest.raises(ValueError, match="service name"):
        open_store("redis+sentinel://127.0.0.1:26379")

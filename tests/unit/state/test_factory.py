"""open_store URL handling."""

from __future__ import annotations

import pytest
from redis.asyncio.cluster import RedisCluster

from state.factory import open_store
from state.memory_store import MemoryStore
from state.redis_store import RedisStore
from state.store import Store


@pytest.mark.parametrize("url", [None, ""])
async def test_no_url_is_the_embedded_store(url: str | None) -> None:
    store = open_store(url, ttl_seconds=5, max_turns=7)
    assert isinstance(store, MemoryStore) and isinstance(store, Store)
    assert (store.ttl_seconds, store.max_turns) == (5, 7)


async def test_single_node_urls() -> None:
    store = open_store("redis://:pw@127.0.0.1:6390/2", timeout_ms=250)
    assert isinstance(store, RedisStore) and store.backend == "redis" and store.timeout_s == 0.25
    kwargs = store.client.connection_pool.connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["port"]) == ("pw", 2, 6390)
    await store.close()
    tls = open_store("rediss://127.0.0.1:6390")
    assert isinstance(tls, RedisStore)
    await tls.close()


async def test_cluster_url() -> None:
    store = open_store("redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002")
    assert isinstance(store, RedisStore) and store.backend == "redis-cluster"
    client = store.client
    assert isinstance(client, RedisCluster)
    assert [(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()] == [
        ("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)]
    assert client.connection_kwargs["password"] == "p@ss"
    await store.close()


@pytest.mark.parametrize("url", ["memcached://x", "redis+cluster://nohostport", "redis+cluster://h:port"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        open_store(url)

"""Fixtures for the state tests: one ``make_store`` factory parametrised over every backend.

``backend`` is "memory" (embedded), "redis" (real single redis-server), "cluster" (real 3-master
Redis Cluster) or "tls" (real single redis-server reached by ``rediss://`` only); the Redis servers come from
``tests/redis_fixtures.py`` and are flushed per test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis

from state.factory import open_store
from state.store import Store

MakeStore = Callable[..., Awaitable[Store]]
BACKENDS = ["memory", "redis", "cluster", "tls"]
# Generous per-call timeout for functional tests on a busy CI box; the fault test uses 100 ms.
FUNCTIONAL_TIMEOUT_MS = 3000


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def store_url(request: pytest.FixtureRequest, backend: str) -> str | None:
    if backend == "redis":
        return str(request.getfixturevalue("redis_url"))
    if backend == "cluster":
        return str(request.getfixturevalue("redis_cluster_url"))
    if backend == "tls":
        return str(request.getfixturevalue("redis_tls_url"))
    return None


@pytest.fixture()
async def make_store(store_url: str | None) -> AsyncIterator[MakeStore]:
    """``await make_store(**open_store_kwargs)``: a started store; closed after the test."""
    stores: list[Store] = []

    async def make(**kwargs: Any) -> Store:
        kwargs.setdefault("timeout_ms", FUNCTIONAL_TIMEOUT_MS)
        store = open_store(store_url, **kwargs)
        await store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


@pytest.fixture()
async def store(make_store: MakeStore) -> Store:
    return await make_store()


@pytest.fixture()
def raw_nodes(request: pytest.FixtureRequest, backend: str) -> Iterator[list[redis.Redis]]:
    """Sync clients to every Redis node of the backend under test (empty for memory)."""
    clients: list[redis.Redis] = []
    if backend == "redis":
        request.getfixturevalue("redis_url")
        clients = [request.getfixturevalue("redis_server").client()]
    elif backend == "cluster":
        request.getfixturevalue("redis_cluster_url")
        clients = [n.client() for n in request.getfixturevalue("redis_cluster").nodes]
    elif backend == "tls":
        request.getfixturevalue("redis_tls_url")
        clients = [request.getfixturevalue("redis_tls_server").client()]
    yield clients
    for c in clients:
        c.close()

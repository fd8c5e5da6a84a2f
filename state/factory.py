"""``open_store(url, ...)``: the one place that turns configuration into a ``Store``.

URLs:

- ``None`` / ``""``: the embedded ``MemoryStore`` (one process only).
- ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS; redis-py's ``ssl_*`` settings in the
  query, e.g. ``?ssl_ca_certs=/etc/redis-tls/ca.pem``): a single Redis node.
- ``redis+cluster://[[user]:password@]host:port[,host:port...]`` (``rediss+cluster://`` for TLS): a
  Redis Cluster through ``redis.asyncio.cluster.RedisCluster``; the hosts are startup nodes.
- ``redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/db]``: the master of
  ``<service>`` as Redis Sentinel names it (the hosts are sentinels; the password is the master's),
  followed through failovers by redis-py's Sentinel connection pool.

The returned store is not connected yet: ``await store.start()`` (never raises for an unreachable
Redis), ``await store.close()`` at shutdown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from state import keys
from state.breaker import CircuitBreaker
from state.convcache import DEFAULT_MAX_BYTES
from state.engine import NO_LIMITS, StorageLimits
from state.memory_store import MemoryStore
from state.records import DEFAULT_TURN_CACHE_ENTRIES
from state.redis_store import RedisStore, budget_seconds
from state.resp import RespNode
from state.store import Store

_CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
SCHEMES = ("redis", "rediss", "redis+sentinel", *_CLUSTER_SCHEMES)  # what ``open_store`` opens


def check_store_url(url: str) -> None:
    """ValueError, in one line, for a store URL ``open_store`` cannot open (e.g. ``localhost:6390``: no scheme)."""
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise ValueError(f"unsupported store URL scheme {scheme!r} (use redis://, rediss://, redis+cluster://, "
                         "redis+sentinel:// or nothing for in-memory)")


def describe_store(url: str | None) -> str:
    """The store a URL names, for the startup banner: backend, scheme, hosts, port, db, user; never the password
    (``password=<redacted>`` when there is one)."""
    if not url:
        return "backend=memory (embedded, this process only)"
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    path = [p for p in parts.path.split("/") if p]
    fields: dict[str, str] = {"scheme": parts.scheme}
    if parts.scheme == "redis+sentinel":
        fields = {"backend": "redis-sentinel", **fields, "sentinels": hosts,
                  "service": path[0] if path else "?", "db": path[1] if len(path) > 1 else "0"}
    elif parts.scheme in _CLUSTER_SCHEMES:
        fields = {"backend": "redis-cluster", **fields, "nodes": hosts}
    else:
        try:
            port = str(parts.port or 6379)
        except ValueError:
            port = "?"
        fields = {"backend": "redis", **fields, "host": parts.hostname or "localhost", "port": port,
                  "db": path[0] if path else "0"}
    if parts.username:
        fields["user"] = unquote(parts.username)
    if parts.password:
        fields["password"] = "<redacted>"
    return " ".join(f"{k}={v}" for k, v in fields.items())


DEFAULT_TIMEOUT_MS = 250  # GATEWAY_STORE_TIMEOUT_MS: Redis's time to answer a round trip once written


def open_store(url: str | None, *, ttl_seconds: int = keys.DEFAULT_TTL_SECONDS,
               max_turns: int = keys.DEFAULT_MAX_TURNS, timeout_ms: int = DEFAULT_TIMEOUT_MS,
               failure_threshold: int = 3, cooldown_seconds: float = 2.0, max_fetch: int = 2,
               max_connections: int = 64, clock: Callable[[], float] = time.monotonic,
               load_cache_bytes: int = DEFAULT_MAX_BYTES, decoded_turns: int = DEFAULT_TURN_CACHE_ENTRIES,
               limits: StorageLimits = NO_LIMITS) -> Store:
    """Build the store for ``url`` (see module doc). ``clock`` drives the breaker (memory: TTLs).
    ``load_cache_bytes``: this worker's cache of loaded conversations (``state.convcache``; 0 = off);
    ``decoded_turns``: how many decoded turns it keeps (``codec.decode_turn``; 0 = off)."""
    if not url:
        return MemoryStore(ttl_seconds=ttl_seconds, max_turns=max_turns, max_fetch=max_fetch, clock=clock,
                           load_cache_bytes=load_cache_bytes, decoded_turns=decoded_turns, limits=limits)
    breaker = CircuitBreaker(failure_threshold, cooldown_seconds, clock)
    timeout_s = timeout_ms / 1000
    common: dict[str, Any] = {
        # a read waits timeout_ms for Redis's reply; a connect may also wait for a busy worker's event loop
        "socket_timeout": timeout_s, "socket_connect_timeout": budget_seconds(timeout_ms),
        # one immediate retry on a fresh connection (a pooled socket may be dead after a Redis
        # restart, a reply may not have come in time); the whole call stays bounded by the store's budget.
        "retry": Retry(NoBackoff(), 1), "max_connections": max_connections,
    }
    check_store_url(url)
    parts = urlsplit(url)
    client: Redis | RedisCluster
    also_close: tuple[Redis, ...] = ()
    node: RespNode | None = None
    if parts.scheme in ("redis", "rediss"):
        client = Redis.from_url(url, **common)
        node = RespNode.for_client(client, reply_timeout=timeout_s)
    elif parts.scheme == "redis+sentinel":
        client, also_close = _sentinel_master(parts, common)
    elif parts.scheme in _CLUSTER_SCHEMES:
        client = RedisCluster(
            startup_nodes=_cluster_nodes(parts.netloc), ssl=_CLUSTER_SCHEMES[parts.scheme],
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None, **common,
        )
    else:  # (unreachable: ``check_store_url``)
        raise ValueError(f"unsupported store URL scheme {parts.scheme!r}")
    return RedisStore(client, timeout_ms=timeout_ms, breaker=breaker, ttl_seconds=ttl_seconds,
                      max_turns=max_turns, max_fetch=max_fetch, max_concurrency=max_connections,
                      also_close=also_close, load_cache_bytes=load_cache_bytes, node=node, decoded_turns=decoded_turns,
                      limits=limits)


def _sentinel_master(parts: SplitResult, common: dict[str, Any]) -> tuple[Redis, tuple[Redis, ...]]:
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError("redis+sentinel:// needs /<service name>[/<db>] after the sentinel hosts")
    sentinels = [(n.host, n.port) for n in _cluster_nodes(parts.netloc)]
    timeout = common["socket_timeout"]
    sentinel = Sentinel(sentinels, socket_timeout=timeout, socket_connect_timeout=timeout)
    client: Redis = sentinel.master_for(
        path[0], redis_class=Redis, db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None, **common)
    client.auto_close_connection_pool = True  # the store owns this pool: close it with the client
    return client, tuple(sentinel.sentinels)


def _cluster_nodes(netloc: str) -> list[ClusterNode]:
    hosts = netloc.rpartition("@")[2]
    nodes = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"cluster node {item!r} must be host:port")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    if not nodes:
        raise ValueError("the URL needs at least one host:port")
    return nodes

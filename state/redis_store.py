"""``RedisStore``: the engine over a single Redis node or a Redis Cluster (redis-py asyncio).

- One ``_roundtrip`` = one pipeline (``transaction=False``): EVALSHA for the scripts (conversation
  updates and reads, index reads batched per hash-tag bucket), SET EX for index writes and EXISTS for
  the SCID marker. On a single node reached over plain TCP, TLS or a unix socket the pipeline goes through
  ``state.resp.RespNode`` (one write, replies parsed by hiredis, no per-command Python of redis-py);
  Sentinel goes through redis-py's pipeline. On a
  cluster the pipeline is split by node and sent to all nodes concurrently; it is still one round
  trip of latency. Scripts are loaded on ``start()`` (SCRIPT LOAD, every primary); a NOSCRIPT reply
  (restarted node, failover) reloads them and replays the pipeline once: every op in it is idempotent.
- ``timeout_ms`` bounds Redis, not the worker: each round trip must be answered within it, measured from
  when its commands are written (``RespNode``; on redis-py's paths, its ``socket_timeout`` per read), so
  a saturated replica whose event loop runs late does not mistake its own lag for a slow Redis (a reply
  already in the socket is read, not given up on). A round trip that times out is retried once at once,
  on a fresh connection, waiting ``RETRY_PATIENCE`` timeouts for its reply (every op is idempotent;
  redis-py's paths retry it in their ``Retry``). The whole
  call, queueing for a connection and the worker's own scheduling included, is bounded by
  ``budget_s`` = max(2 s, 8 x ``timeout_ms``).
- The circuit breaker: a refused, reset or rejected connection (an outage) counts as a failure, and
  ``failure_threshold`` in a row open it; a timeout opens it only once timeouts have lasted
  ``CircuitBreaker.slow_seconds`` (``on_timeout``). While it is open calls fail at once (``CircuitOpen``)
  without touching the network. Any Redis or socket error becomes ``StoreUnavailable`` (``StoreTimeout``
  for a timeout).
- Any other exception a backend call leaks (redis-py can leak transport internals, e.g. an
  ``AttributeError``/``TypeError`` on a ``None`` writer while a Cluster master fails over, redis-py
  issue #4287; or a reply of an unexpected shape) is also ``StoreUnavailable``, logged with its
  traceback: the gateway then serves statelessly instead of failing the request with a 500.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from state import keys, records
from state.breaker import CircuitBreaker
from state.convcache import DEFAULT_MAX_BYTES
from state.engine import NO_LIMITS, Arg, EngineStore, Eval, Exists, Op, StorageLimits
from state.errors import CircuitOpen, StoreError, StoreTimeout, StoreUnavailable
from state.resp import ReplyTimeout, RespNode, tls_reason
from state.scripts import ALL_SCRIPTS
from state.store import StoreHealth

log = logging.getLogger("thinkgate.state")
T = TypeVar("T")
_BACKEND_ERRORS = (RedisError, RedisClusterException, OSError, TimeoutError)
START_TIMEOUT_SECONDS = 2.0
MIN_BUDGET_SECONDS = 2.0  # a whole call's bound, the worker's own queueing included (see module doc)
BUDGET_TIMEOUTS = 8       # ... or this many store timeouts, if longer
# The retry of a round trip that timed out waits this many store timeouts for its reply: a Redis paused for a
# moment (a fork, a slow disk, a SIGSTOP on a box so loaded that 300 ms become 700) is waited out, not
# mistaken for a missing one (1.25 s in all at the default 250 ms, still inside the call's budget).
RETRY_PATIENCE = 4
_TIMEOUTS = (TimeoutError, RedisTimeoutError)  # ReplyTimeout, redis-py's read timeout, the budget's
RETRY_PAUSES_SECONDS = (0.05, 0.2)
# Worth one more round trip: the connection went away, or the cluster is moving slots. The
# AttributeError/TypeError are redis-py transport internals leaking from a connection that was closed
# under it (redis-py issue #4287); a fresh connection does not have the problem.
_TRANSIENT = (RedisConnectionError, ClusterDownError, TryAgainError, AttributeError, TypeError)


def budget_seconds(timeout_ms: int) -> float:
    """The bound of a whole store call (see module doc) for a store timeout of ``timeout_ms``."""
    return max(MIN_BUDGET_SECONDS, BUDGET_TIMEOUTS * timeout_ms / 1000)


def failure(exc: BaseException) -> str:
    """What a failed call reports (``StoreUnavailable``, ``StoreHealth.detail``, the start warning): the exception's
    class, and for a TLS failure its reason too (a wrong CA, a missing client certificate: configuration to fix,
    which the class alone does not name). Other messages are not repeated (they can carry reply data)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return f"{type(exc).__name__}: TLS: {tls_reason(cause)}"
        cause = cause.__cause__ or cause.__context__
    return type(exc).__name__


def _log_unexpected(backend: str, exc: BaseException) -> None:
    log.error("state store %s failed with an unexpected %s; treated as unavailable", backend,
              type(exc).__name__, exc_info=exc)


class RedisStore(EngineStore):
    """``Store`` over ``redis.asyncio.Redis`` (backend "redis") or ``RedisCluster`` ("redis-cluster")."""

    def __init__(self, client: Redis | RedisCluster, *, timeout_ms: int = 250,
                 breaker: CircuitBreaker | None = None, ttl_seconds: int = keys.DEFAULT_TTL_SECONDS,
                 max_turns: int = keys.DEFAULT_MAX_TURNS, max_fetch: int = 2, max_concurrency: int = 64,
                 wall_clock: Callable[[], float] | None = None,
                 also_close: tuple[Redis, ...] = (), load_cache_bytes: int = DEFAULT_MAX_BYTES,
                 node: RespNode | None = None, decoded_turns: int = records.DEFAULT_TURN_CACHE_ENTRIES,
                 limits: StorageLimits = NO_LIMITS) -> None:
        """``also_close``: further clients the store owns (e.g. the Sentinel connections).
        ``load_cache_bytes``: see ``EngineStore``. ``node``: the single node ``client`` talks to, for the
        round trips (``RespNode.for_client``); None sends them through redis-py's pipeline."""
        extra: dict[str, Any] = {"wall_clock": wall_clock} if wall_clock else {}
        super().__init__(ttl_seconds=ttl_seconds, max_turns=max_turns, max_fetch=max_fetch,
                         load_cache_bytes=load_cache_bytes, decoded_turns=decoded_turns, limits=limits, **extra)
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be > 0")
        self._client = client
        self._node = node
        self._also_close = also_close
        self._cluster = self.one_slot_per_script = isinstance(client, RedisCluster)
        self.backend = "redis-cluster" if self._cluster else "redis"
        self.timeout_s = timeout_ms / 1000
        self.budget_s = budget_seconds(timeout_ms)
        self.breaker = breaker or CircuitBreaker()
        self.round_trips = 0  # pipelines executed (diagnostics; tests count at the socket too)
        # redis-py's async pools raise MaxConnectionsError instead of waiting when exhausted; one
        # round trip holds at most one connection per node, so this bound keeps every pool within
        # max_connections (= max_concurrency) and makes excess calls queue, inside their timeout.
        self._slots = asyncio.Semaphore(max_concurrency)
        self._closed = False

    @property
    def client(self) -> Redis | RedisCluster:
        return self._client

    async def start(self) -> None:
        try:
            async with asyncio.timeout(max(self.timeout_s, START_TIMEOUT_SECONDS)), self._slots:
                await self._load_scripts()
        except Exception as exc:  # _BACKEND_ERRORS, or whatever else the client leaks
            log.warning("state store %s not reachable at start (%s); will retry on use", self.backend, failure(exc))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._node is not None:
                self._node.close()
            for client in (self._client, *self._also_close):
                try:
                    await client.aclose()
                except Exception as exc:  # a half-dead connection must not fail the shutdown
                    log.warning("state store %s: error while closing (%s)", self.backend, type(exc).__name__)

    async def health(self) -> StoreHealth:
        if not self.breaker.acquire():
            return StoreHealth(False, self.backend, self.breaker.state, "circuit open")
        try:
            async with asyncio.timeout(self.budget_s), self._slots:
                await self._client.ping()
        except _TIMEOUTS:
            self.breaker.on_timeout()
            return StoreHealth(False, self.backend, self.breaker.state, "timeout")
        except Exception as exc:  # _BACKEND_ERRORS, or whatever else the client leaks
            self.breaker.on_failure()
            if not isinstance(exc, _BACKEND_ERRORS):
                _log_unexpected(self.backend, exc)
            return StoreHealth(False, self.backend, self.breaker.state, failure(exc))
        except BaseException:
            self.breaker.on_abandon()
            raise
        self.breaker.on_success()
        return StoreHealth(True, self.backend, self.breaker.state)

    async def _guarded(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if not self.breaker.acquire():
            raise CircuitOpen(f"{self.backend}: circuit open")
        try:
            async with asyncio.timeout(self.budget_s):
                result = await fn(*args)
        except _TIMEOUTS as exc:  # a slow store, not a missing one (``CircuitBreaker.on_timeout``)
            self.breaker.on_timeout()
            raise StoreTimeout(f"{self.backend}: timeout") from exc
        except _BACKEND_ERRORS as exc:
            self.breaker.on_failure()
            raise StoreUnavailable(f"{self.backend}: {failure(exc)}") from exc
        except StoreError:  # raised on purpose by the engine (e.g. CodecError): not the backend's fault
            self.breaker.on_abandon()
            raise
        except Exception as exc:  # leaked by the client library (or a malformed reply): still unavailable
            self.breaker.on_failure()
            _log_unexpected(self.backend, exc)
            raise StoreUnavailable(f"{self.backend}: {type(exc).__name__}") from exc
        except BaseException:  # cancelled
            self.breaker.on_abandon()
            raise
        self.breaker.on_success()
        return result

    async def _load_scripts(self) -> None:
        for script in ALL_SCRIPTS:
            sha = await self._client.script_load(script.source)
            if sha != script.sha:  # pragma: no cover - would be a redis bug
                raise RedisError(f"SCRIPT LOAD returned {sha} for {script.name}")

    async def _execute(self, ops: Sequence[Op], reply_timeout: float | None = None) -> list[Any]:
        self.round_trips += 1
        if self._node is not None:
            return await self._node.execute([_command(op) for op in ops], reply_timeout)
        pipe: Any = self._client.pipeline() if self._cluster else self._client.pipeline(transaction=False)
        for op in ops:
            if isinstance(op, Exists):
                # through the method, not execute_command("EXISTS", ...): on a Cluster the latter timed out
                # during a failover (tests/process/reliability/test_cluster_failover_store.py; cause not pinned down)
                pipe.exists(op.key)
            else:
                pipe.execute_command(*_command(op))
        return list(await pipe.execute(raise_on_error=False))

    async def _roundtrip(self, ops: Sequence[Op]) -> list[Any]:
        """One pipeline. A connection the server dropped (a restart; a Cluster failover: the old
        master closes its clients while the slots move) is retried after a short pause, once on a
        single node and twice on a Cluster (the client needs a moment to learn the new topology);
        a reply that did not come within the store timeout, once at once on a fresh connection
        (redis-py's paths do that in their own ``Retry``); always within the call's budget: every op
        is idempotent (a replayed append is a "dup")."""
        pauses = RETRY_PAUSES_SECONDS if self._cluster else RETRY_PAUSES_SECONDS[:1]
        async with self._slots:
            for pause in pauses:
                try:
                    return await self._attempt(ops)
                except _TRANSIENT as exc:
                    log.info("state store %s: %s; retrying the round trip in %.2f s", self.backend,
                             type(exc).__name__, pause)
                await asyncio.sleep(pause)
            return await self._attempt(ops)

    async def _attempt(self, ops: Sequence[Op]) -> list[Any]:
        try:
            return await self._attempt_once(ops)
        except ReplyTimeout:
            log.info("state store %s: no reply within %.0f ms; retrying the round trip once", self.backend,
                     self.timeout_s * 1000)
        return await self._attempt_once(ops, RETRY_PATIENCE * self.timeout_s)

    async def _attempt_once(self, ops: Sequence[Op], reply_timeout: float | None = None) -> list[Any]:
        replies = await self._execute(ops, reply_timeout)
        if any(isinstance(r, NoScriptError) for r in replies):
            log.info("state store %s lost its scripts (restart/failover); reloading", self.backend)
            await self._load_scripts()
            replies = await self._execute(ops)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies


def _command(op: Op) -> tuple[Arg, ...]:
    """The Redis command of one op (both paths send exactly this)."""
    if isinstance(op, Eval):
        return ("EVALSHA", op.script.sha, len(op.keys), *op.keys, *op.args)
    if isinstance(op, Exists):
        return ("EXISTS", op.key)
    return ("SET", op.key, op.value, "EX", op.ttl)

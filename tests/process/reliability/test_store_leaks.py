"""Regression: whatever a Redis client leaks, the store raises ``StoreUnavailable`` and the gateway degrades.

During a Redis Cluster failover redis-py's asyncio client can leak transport internals instead of a
``ConnectionError`` (an ``AttributeError``/``TypeError`` on a ``None`` writer, redis-py issue #4287).
``RedisStore`` only translated ``RedisError``/``OSError``/``TimeoutError``, so those escaped the
pipeline's ``except StoreError`` and became a 500 "Internal gateway error" (or a cut stream when the
record ran at the end of a stream). Every store call now turns any leaked exception into
``StoreUnavailable`` (counted by the breaker); requests are then served statelessly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ClusterDownError
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from state.errors import StoreUnavailable
from state.keys import conversation_keys, new_scid, tenant_prefix
from state.redis_store import RedisStore
from state.store import LoadQuery, TurnWrite
from tests.process_fixtures import GatewayFactory, Sim, free_port, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.reliability.hostile import Keyspace
from tests.support.reliability.loops import access_lines
from tests.support.state.factories import TENANT_A, turn

LEAKS: dict[str, Callable[[], BaseException]] = {
    "attribute_error": lambda: AttributeError("'NoneType' object has no attribute 'write'"),
    "type_error": lambda: TypeError("'NoneType' object is not callable"),
    "index_error": lambda: IndexError("pop from an empty deque"),
    "key_error": lambda: KeyError("slots"),
    "runtime_error": lambda: RuntimeError("Event loop is closed"),
}


class LeakyPipeline:
    def __init__(self, leak: Callable[[], BaseException] | None, reply: list[Any] | None = None,
                 failures: list[int] | None = None) -> None:
        self.leak, self.reply, self.ops = leak, reply, 0
        self.failures = failures  # leak only while failures[0] > 0 (counted down), else always

    def __getattr__(self, command: str) -> Callable[..., None]:
        """Any queued command (``execute_command``, ``set``, ``exists``...): counted, answered by ``execute``."""
        def queue(*args: Any, **kwargs: Any) -> None:
            self.ops += 1
        return queue

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.leak is not None and (self.failures is None or self.failures[0] > 0):
            if self.failures is not None:
                self.failures[0] -= 1
            raise self.leak()
        return list(self.reply or [])


def leaky_store(leak: Callable[[], BaseException] | None, reply: list[Any] | None = None,
                failures: list[int] | None = None, cluster: bool = False, timeout_ms: int = 200) -> RedisStore:
    """A ``RedisStore`` whose client (never connected) leaks ``leak()`` from every pipeline and PING."""
    client: Any = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", free_port())]) if cluster \
        else Redis(host="127.0.0.1", port=free_port())

    async def ping(**kwargs: Any) -> bool:
        raise (leak or (lambda: AttributeError("ping")))()

    client.pipeline = lambda **kw: LeakyPipeline(leak, reply, failures)  # type: ignore[method-assign]
    client.ping = ping  # type: ignore[method-assign]
    client.script_load = ping  # type: ignore[assignment,method-assign]
    return RedisStore(client, timeout_ms=timeout_ms)


@pytest.mark.parametrize("leak", sorted(LEAKS))
@pytest.mark.process
async def test_every_store_call_turns_a_leaked_exception_into_store_unavailable(leak: str) -> None:
    store = leaky_store(LEAKS[leak])
    await store.start()  # never raises
    with pytest.raises(StoreUnavailable) as e1:
        await store.load(TENANT_A, LoadQuery(scid=new_scid(), tool_ids=["toolu_1"]))
    with pytest.raises(StoreUnavailable):
        await store.record(TENANT_A, TurnWrite(turn(0)))
    with pytest.raises(StoreUnavailable):
        await store.get_conversation(TENANT_A, new_scid())
    assert isinstance(e1.value.__cause__, type(LEAKS[leak]()))
    assert store.breaker.state == "open"  # three failures: counted like any backend failure
    health = await store.health()
    assert not health.ok and health.circuit == "open"
    await store.close()


@pytest.mark.process
async def test_a_malformed_reply_is_unavailable_not_a_crash() -> None:
    # a LOAD reply whose meta hash has an odd number of items: zip(strict=True) raises ValueError
    store = leaky_store(None, reply=[[[b"start"], []]])
    with pytest.raises(StoreUnavailable):
        await store.load(TENANT_A, LoadQuery(scid=new_scid()))
    with pytest.raises(StoreUnavailable):
        await store.get_conversation(TENANT_A, new_scid())
    await store.close()


@pytest.mark.parametrize("leak", [lambda: RedisConnectionError("Connection closed by server."),
                                  LEAKS["attribute_error"], lambda: ClusterDownError("CLUSTERDOWN")],
                         ids=["closed by server", "leaked writer", "cluster down"])
@pytest.mark.process
async def test_a_dropped_connection_is_retried_once(leak: Callable[[], BaseException]) -> None:
    """A failover closes the old master's connections: the round trip is replayed once (idempotent)."""
    failures = [1]
    store = leaky_store(leak, reply=[[]], failures=failures)
    assert await store.get_conversation(TENANT_A, new_scid()) is None  # succeeded on the retry
    assert failures == [0] and store.breaker.consecutive_failures == 0
    failures[0] = 2  # twice in a row: unavailable
    with pytest.raises(StoreUnavailable):
        await store.get_conversation(TENANT_A, new_scid())
    assert store.breaker.consecutive_failures == 1
    await store.close()


@pytest.mark.process
async def test_a_cluster_round_trip_is_retried_twice() -> None:
    """On a Cluster the client may need a moment to learn the new topology: two retries (50, 200 ms)."""
    failures = [2]
    store = leaky_store(lambda: RedisConnectionError("Connection closed by server."), reply=[[]],
                        failures=failures, cluster=True, timeout_ms=1000)
    assert store.backend == "redis-cluster"
    assert await store.get_conversation(TENANT_A, new_scid()) is None
    assert failures == [0] and store.breaker.consecutive_failures == 0
    failures[0] = 3
    with pytest.raises(StoreUnavailable):
        await store.get_conversation(TENANT_A, new_scid())
    await store.close()


@pytest.mark.process
async def test_cancellation_is_not_a_failure() -> None:
    import asyncio

    store = leaky_store(lambda: asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await store.load(TENANT_A, LoadQuery(scid=new_scid()))
    assert store.breaker.consecutive_failures == 0
    await store.close()


BODY = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [{"role": "user", "content": "[[sim:tools=1]] weather?"}]}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
async def test_gateway_serves_statelessly_when_the_client_leaks(sim: Sim, stream: bool) -> None:
    store = leaky_store(LEAKS["attribute_error"])
    app = create_app(Settings(anthropic_base_url=sim.url, secret="leak-secret"), store=store)
    headers = {"x-api-key": "sk-leaky"}
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=10) as client:
        for _ in range(5):  # before and after the breaker opens
            r = await client.post("/v1/messages", json={**BODY, "stream": stream}, headers=headers)
            assert r.status_code == 200, r.text
            assert ("message_stop" in r.text) if stream else r.json()["stop_reason"] == "tool_use"
        ready = await client.get("/readyz")  # (a store never reached since the start: not ready, issue 32)
        assert ready.status_code == 503 and ready.json()["store"]["ok"] is False
        assert ready.json()["status"] == "store_never_reached"
        export = await client.get(f"/gateway/conversations/{new_scid()}", headers=headers)
        # the export has no stateless fallback: an honest, retryable 503 in the Anthropic envelope
        assert export.status_code == 503 and export.json()["error"]["type"] == "api_error"


# ---------------------------------------------------------------- a failed write is not reported as recorded

FAULTS = {  # name -> (make the store's record fail, undo it)
    # Redis refuses every write (reads still work): the record's script and SETs fail at once, none applies.
    "write refused (OOM)": (lambda r: r.client().config_set("maxmemory", 1),
                            lambda r: r.client().config_set("maxmemory", 0)),
    # Redis hangs: the record runs out of GATEWAY_STORE_TIMEOUT_MS. The bytes already sent may still be
    # executed once Redis is thawed, so only the report is checked for this one, not the keyspace.
    "timed out (SIGSTOP)": (RedisServer.pause, RedisServer.resume),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_record_that_failed_is_logged_as_not_recorded(sim: Sim, gateways: GatewayFactory,
                                                        private_redis: RedisServer, fault: str) -> None:
    """Turn 1 is recorded. Turn 2 streams; the simulator holds it after its first delta (so the load is
    done and the record is still to come), the fault starts, the stream is released. The client still
    gets its whole answer, the access log says ``recorded=false`` and, when the write was refused, the
    conversation still holds exactly turn 1. Once the fault is over, the background retry records turn 2
    (issue 22: a turn whose record failed is not lost), and the conversation's export shows both."""
    start, undo = FAULTS[fault]
    secret, key = "record-fail-secret-0123456789abcdef", f"sk-record-fail-{new_scid()}"
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": private_redis.url, "GATEWAY_SECRET": secret,
                                  "GATEWAY_STORE_TIMEOUT_MS": "300", "GATEWAY_LOG_FORMAT": "json",
                                  "GATEWAY_LOG_LEVEL": "INFO"})
    sdk = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0,
                              default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    history: list[Any] = [{"role": "user", "content": f"[[sim:hold]] [[sim:tools=1]] weather? {new_scid()}"}]
    first = sdk.messages.with_raw_response.create(messages=history, **_PARAMS)  # not streamed: not held
    scid, answer = first.headers["x-ag-conversation-id"], first.parse()
    history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "sunny"}
                                             for b in answer.content if b.type == "tool_use"]}]
    keys = conversation_keys(tenant_prefix(secret.encode(), key), scid)
    with private_redis.client() as c:
        assert c.llen(keys.turns) == 1 and c.llen(keys.tids) == 1

    try:
        with sdk.messages.stream(messages=history, extra_headers={"x-ag-conversation-id": scid}, **_PARAMS) as s:
            for ev in s:
                if ev.type == "content_block_delta":  # held here by the simulator: the load is long done
                    break
            with private_redis.client() as c:
                before = Keyspace(c).snapshot()
            start(private_redis)
            sim.release()
            final = s.get_final_message()
        assert final.stop_reason == "end_turn"  # served whole, just not recorded
        if fault.startswith("write refused"):
            with private_redis.client() as c:
                assert c.llen(keys.turns) == 1 and c.llen(keys.tids) == 1, "the failed turn was stored"
                after = Keyspace(c).snapshot()
                changed = {k for k in before.dumps.keys() | after.dumps.keys()
                           if before.dumps.get(k) != after.dumps.get(k)}
                assert not changed, f"the failed record wrote {changed}"
    finally:
        undo(private_redis)
        sdk.close()
    with private_redis.client() as c:  # the background retry's attempts: 0.1 s, 0.5 s, 1 s, 2 s, 4 s after
        deadline = time.monotonic() + 15
        while c.llen(keys.turns) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # another process's doing: nothing to await but its effect
        assert c.llen(keys.turns) == 2 and c.llen(keys.tids) == 2, "the failed turn was never recorded"
    export = httpx.get(f"{gw.url}/gateway/conversations/{scid}", headers={"x-api-key": key}, timeout=10)
    assert export.status_code == 200 and len(export.json()["turns"]) == 2, export.text
    if fault.startswith("write refused"):  # (a SIGSTOPped Redis may run the first write itself on SIGCONT)
        assert metric_sum(gw, "gateway_record_retries_total", outcome="recorded") == 1
    gw.stop()  # drains: every access-log line is written
    lines = [rec for rec in access_lines(gw.log_lines()) if rec.get("endpoint") == "messages"]
    assert [(rec["status"], rec["scid"], rec["recorded"]) for rec in lines] == [(200, scid, True),
                                                                                (200, scid, False)], lines


_PARAMS: dict[str, Any] = {"model": "claude-opus-4-5", "max_tokens": 4096,
                           "thinking": {"type": "enabled", "budget_tokens": 2048},
                           "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}

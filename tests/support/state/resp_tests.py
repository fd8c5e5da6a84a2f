"""``state.resp``: the single-node round trips, against a real redis-server (and a fake server for a broken
stream). The store's contract, fault and round-trip tests run over it too (``open_store`` uses it for
``redis://``); these pin the client's own rules."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import AuthenticationError, InvalidResponse, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from state.errors import StoreUnavailable
from state.factory import open_store
from state.keys import new_scid
from state.redis_store import RedisStore
from state.resp import RespNode, pack, pack_commands
from state.store import LoadQuery, TurnWrite
from tests.redis_fixtures import RedisServer, running
from tests.support.state.factories import TENANT_A, turn


def _node(url: str) -> RespNode:
    node = RespNode.for_client(Redis.from_url(url))
    assert node is not None
    return node


@pytest.fixture()
async def node(redis_url: str) -> AsyncIterator[RespNode]:
    n = _node(redis_url)
    yield n
    n.close()


@pytest.mark.parametrize("args", [
    ("SET", "k", b"v", "EX", 60),
    ("EVALSHA", "a" * 40, 2, "{t}:k1", "{t}:k2", b"\x00\xff\r\n", "", -1, 0, "caf\u00e9 \U0001f914"),
    ("EXISTS", b""),
])
def test_pack_sends_what_redis_py_sends(args: tuple[Any, ...]) -> None:
    assert pack(args) == b"".join(Connection().pack_command(*args))


def test_pack_commands_is_the_commands_back_to_back_and_takes_subclasses() -> None:
    import enum

    class Ttl(enum.IntEnum):
        DAY = 86400

    class Name(str):
        pass

    class Blob(bytes):
        pass

    commands = [("SET", Name("k"), Blob(b"v"), "EX", Ttl.DAY), ("EXISTS", "k")]
    assert pack_commands(commands) == pack(("SET", "k", b"v", "EX", 86400)) + pack(("EXISTS", "k"))


@pytest.mark.parametrize("bad", [True, 1.5, None, ["list"]])
def test_pack_refuses_what_it_cannot_send_exactly(bad: object) -> None:
    with pytest.raises(TypeError):
        pack(("SET", "k", bad))  # type: ignore[arg-type]


async def test_replies_in_order_with_errors_in_place(node: RespNode) -> None:
    script = "return {KEYS[1], ARGV[1], 7, false}"
    with redis.Redis.from_url(node_url(node)) as admin:
        sha = admin.script_load(script)
    replies = await node.execute([
        ("SET", "s", b"x" * 10, "EX", 60), ("LPUSH", "s", "oops"), ("GET", "s"), ("GET", "missing"),
        ("EVALSHA", sha, 1, "k", b"a"), ("EVALSHA", "0" * 40, 0), ("EXISTS", "s", "missing"),
    ])
    assert replies[0] == b"OK"
    assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
    assert replies[2] == b"x" * 10 and replies[3] is None
    assert replies[4] == [b"k", b"a", 7, None]
    assert isinstance(replies[5], NoScriptError)  # the class RedisStore reloads scripts on
    assert replies[6] == 1


def node_url(node: RespNode) -> str:
    host, port = node._address
    return f"redis://{host}:{port}/0"


async def test_large_values_both_ways_and_replies_split_across_reads(node: RespNode) -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: many socket writes and reads
    replies = await node.execute([("SET", "big", big), ("GET", "big"), ("STRLEN", "big")])
    assert replies == [b"OK", big, len(big)]


def test_it_runs_on_uvloop(redis_url: str) -> None:
    """The served gateway runs on uvloop, whose transports are not asyncio's classes."""
    import uvloop

    async def roundtrips() -> list[Any]:
        node = _node(redis_url)
        try:
            return [await node.execute([("SET", "uv", b"1"), ("GET", "uv")]), await node.execute([("PING",)])]
        finally:
            node.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(roundtrips()) == [[b"OK", b"1"], [b"PONG"]]


async def test_connections_are_pooled_and_only_as_many_as_run_at_once(node: RespNode) -> None:
    for _ in range(50):
        assert await node.execute([("PING",)]) == [b"PONG"]
    assert node.connections_made == 1
    got = await asyncio.gather(*(node.execute([("INCR", "n")]) for _ in range(8)))
    assert sorted(r[0] for r in got) == list(range(1, 9))
    assert node.connections_made <= 8
    made = node.connections_made
    await asyncio.gather(*(node.execute([("PING",)]) for _ in range(made)))
    assert node.connections_made == made  # all back in the pool, none opened again


async def test_a_round_trip_that_does_not_finish_closes_its_connection(redis_url: str, node: RespNode) -> None:
    """Cancelled while its reply is pending (a hung or slow Redis): that socket is closed, never reused, so
    no later round trip can read the late reply as its own."""
    await node.execute([("PING",)])
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await node.execute([("CLIENT", "SETNAME", "tg-slow"), ("BLPOP", "never", "5")])
    assert await node.execute([("ECHO", "mine")]) == [b"mine"]
    assert node.connections_made == 2
    with redis.Redis.from_url(redis_url) as admin:  # the server sees the socket go (long before BLPOP's 5 s)
        deadline = time.monotonic() + 3
        while any(c.get("name") == "tg-slow" for c in admin.client_list()):
            assert time.monotonic() < deadline, "the cancelled round trip's connection is still open"
            await asyncio.sleep(0.01)  # polling the server's client list: no event to await


async def test_a_connection_the_server_dropped_fails_as_redis_py_would(redis_url: str, node: RespNode) -> None:
    """A killed connection is a redis-py ``ConnectionError`` (RedisStore retries those once)."""
    await node.execute([("CLIENT", "SETNAME", "tg-victim")])
    with redis.Redis.from_url(redis_url) as admin:
        victims = [c for c in admin.client_list() if c.get("name") == "tg-victim"]
        assert len(victims) == 1
        admin.client_kill(victims[0]["addr"])
    try:
        assert await node.execute([("PING",)]) == [b"PONG"]  # the loss was seen first: a new connection
    except RedisConnectionError:
        assert await node.execute([("PING",)]) == [b"PONG"]  # or seen by this round trip
    assert node.connections_made == 2


async def test_a_store_retries_a_dropped_connection_within_the_call(redis_url: str) -> None:
    store = open_store(redis_url, timeout_ms=3000)
    assert isinstance(store, RedisStore) and store._node is not None
    await store.start()
    try:
        scid = new_scid()
        await store.record(TENANT_A, TurnWrite(turn(0), scid=scid, expected_position=0))
        with redis.Redis.from_url(redis_url) as admin:
            admin.client_kill_filter(_type="normal", skipme=True)
        res = await store.load(TENANT_A, LoadQuery(scid=scid))
        assert res.conversation is not None and len(res.conversation.turns) == 1
    finally:
        await store.close()


async def test_username_password_and_db_are_sent_on_connect(redis_url: str) -> None:
    host_port = redis_url.removeprefix("redis://").split("/")[0]
    with redis.Redis.from_url(redis_url) as admin:
        admin.acl_setuser("tg-resp", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
        try:
            node = _node(f"redis://tg-resp:s3cret@{host_port}/3")
            await node.execute([("SET", "where", b"db3")])
            node.close()
            assert admin.get("where") is None
            with redis.Redis.from_url(f"redis://{host_port}/3") as db3:
                assert db3.get("where") == b"db3"
            wrong = _node(f"redis://tg-resp:nope@{host_port}/3")
            with pytest.raises(AuthenticationError):
                await wrong.execute([("PING",)])
            store = open_store(f"redis://tg-resp:nope@{host_port}/3", timeout_ms=2000)
            with pytest.raises(StoreUnavailable):  # a refused login is the store being unavailable
                await store.load(TENANT_A, LoadQuery(scid=new_scid()))
            await store.close()
        finally:
            admin.acl_deluser("tg-resp")
            with redis.Redis.from_url(f"redis://{host_port}/3") as db3:
                db3.flushdb()


@pytest.fixture(scope="module")
def unix_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path]]:
    sock = tmp_path_factory.mktemp("sock") / "redis.sock"
    for server in running(RedisServer(extra_args=("--unixsocket", str(sock), "--unixsocketperm", "700"))):
        yield server, sock


@pytest.mark.process
async def test_a_unix_socket_url_uses_the_socket(unix_redis: tuple[RedisServer, Path]) -> None:
    _, sock = unix_redis
    node = RespNode.for_client(Redis.from_url(f"unix://{sock}?db=1"))
    assert node is not None
    try:
        assert (await node.execute([("SET", "u", b"1")])) == [b"OK"]
        info = (await node.execute([("CLIENT", "INFO")]))[0]
        assert b"db=1" in info and b"laddr=" + str(sock).encode() in info
    finally:
        node.close()


async def test_closing_the_node_closes_connections_in_use_when_their_round_trip_ends(node: RespNode) -> None:
    await node.execute([("PING",)])
    slow = asyncio.ensure_future(node.execute([("CLIENT", "SETNAME", "tg-in-use"), ("BLPOP", "nothing", "0.2")]))
    await asyncio.sleep(0)  # the round trip is written; its connection is in use
    node.close()
    assert await slow == [b"OK", None]
    assert node._idle == []


async def test_sentinel_stays_on_redis_py() -> None:
    store = open_store("redis+sentinel://127.0.0.1:26379/tgmaster/0")
    assert isinstance(store, RedisStore) and store._node is None
    await store.close()


@contextlib.asynccontextmanager
async def _fake_server(answer: bytes) -> AsyncIterator[int]:
    """A TCP server that answers every read with ``answer`` (a broken or chatty 'Redis')."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                writer.write(answer)
                await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()


@pytest.mark.process
async def test_a_reply_that_is_not_resp_is_an_error_and_closes_the_connection() -> None:
    async with _fake_server(b"?this is not RESP\r\n") as port:
        node = RespNode(port=port)
        with pytest.raises(InvalidResponse):
            await node.execute([("PING",)])
        with pytest.raises(InvalidResponse):
            await node.execute([("PING",)])
        assert node.connections_made == 2  # the broken connection was not reused
        node.close()


@pytest.mark.process
async def test_more_replies_than_asked_close_the_connection() -> None:
    """A server out of step (two replies to one command): the extra reply must not answer the next round
    trip; the connection is dropped and the next round trip opens a new one."""
    async with _fake_server(b"+ONE\r\n+TWO\r\n") as port:
        node = RespNode(port=port)
        first = await node.execute([("PING",)])
        assert first == [b"ONE"]
        second = await node.execute([("PING",)])
        assert second == [b"ONE"] and node.connections_made == 2
        node.close()


@pytest.mark.process
async def test_refused_connections_are_redis_connection_errors() -> None:
    from tests.redis_fixtures import free_port

    node = RespNode(port=free_port())
    with pytest.raises(RedisConnectionError):
        await node.execute([("PING",)])


@pytest.mark.parametrize("message", [
    "NOSCRIPT No matching script. Please use EVAL.", "READONLY You can't write against a read only replica.",
    "LOADING Redis is loading the dataset in memory", "EXECABORT Transaction discarded because of previous errors.",
    "OOM command not allowed when used memory > 'maxmemory'.", "NOPERM this user has no permissions",
    "NOAUTH Authentication required.", "WRONGPASS invalid username-password pair or user is disabled.",
    "ERR max number of clients reached", "ERR invalid password", "ERR unknown command 'FOO'",
    "WRONGTYPE Operation against a key holding the wrong kind of value", "BUSY Redis is busy running a script.",
])
def test_an_error_reply_is_the_exception_redis_py_makes_of_it(message: str) -> None:
    """Error replies become the exceptions redis-py's own parser makes (its table is private API, so the store
    keeps its own; redis-py's is the oracle here, so a change on its side shows)."""
    from redis._parsers.base import BaseParser

    from state.resp import reply_error
    want = BaseParser.parse_error(message)
    got = reply_error(message)
    assert type(got) is type(want) and got.args == want.args

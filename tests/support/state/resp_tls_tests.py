"""``state.resp`` over TLS (``rediss://``): the context is redis-py's own, against a real TLS-only redis-server
(``--port 0 --tls-port``, certificates made per session by ``tests/tls_certs.py``). The store's contract tests run
over TLS too (backend "tls" in ``tests/support/state/fixtures.py``); the timeout rule with a SIGSTOPped server in
``tests/process/state/test_loop_lag.py``; a served gateway in ``tests/process/e2e/test_store_tls.py``."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis
import uvloop
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from state import tls
from state.errors import StoreUnavailable
from state.factory import open_store
from state.keys import new_scid
from state.redis_store import RedisStore
from state.resp import ReplyTimeout, RespNode
from state.store import LoadQuery, TurnWrite
from tests.redis_fixtures import RedisServer, running_tls
from tests.support.state.factories import TENANT_A, turn
from tests.tls_certs import TlsFiles


def _node(url: str, **kwargs: Any) -> RespNode:
    node = RespNode.for_client(Redis.from_url(url), **kwargs)
    assert node is not None and node._tls is not None
    return node


def _with(url: str, **query: object) -> str:
    """``url`` with its query replaced by ``query``."""
    return url.partition("?")[0] + "?" + "&".join(f"{k}={quote(str(v))}" for k, v in query.items())


# ------------------------------------------------------------------ the context: redis-py's, setting by setting

def _what_a_context_does(context: ssl.SSLContext) -> dict[str, Any]:
    return {"verify_mode": context.verify_mode, "check_hostname": context.check_hostname,
            "minimum_version": context.minimum_version, "maximum_version": context.maximum_version,
            "verify_flags": context.verify_flags, "options": context.options, "ca_certs": context.get_ca_certs(),
            "ciphers": [c["name"] for c in context.get_ciphers()]}


CLIENTS: dict[str, Callable[[TlsFiles], Redis]] = {
    "defaults": lambda f: Redis.from_url("rediss://127.0.0.1:6390/0"),
    "ca file": lambda f: Redis.from_url(f"rediss://127.0.0.1:6390/0?ssl_ca_certs={f.ca}"),
    "ca directory": lambda f: Redis.from_url(f"rediss://127.0.0.1:6390/0?ssl_ca_path={f.ca.parent}"),
    "ca data": lambda f: Redis(host="127.0.0.1", ssl=True, ssl_ca_data=f.ca.read_text()),
    "no verification": lambda f: Redis.from_url("rediss://127.0.0.1:6390/0?ssl_cert_reqs=none"),
    "optional, no hostname check": lambda f: Redis.from_url(
        f"rediss://127.0.0.1:6390/0?ssl_cert_reqs=optional&ssl_check_hostname=false&ssl_ca_certs={f.ca}"),
    "TLS 1.3 at least, ciphers": lambda f: Redis(host="127.0.0.1", ssl=True, ssl_min_version=ssl.TLSVersion.TLSv1_3,
                                                ssl_ciphers="ECDHE+AESGCM"),
    "minimum version from the URL": lambda f: Redis.from_url("rediss://127.0.0.1:6390/0?ssl_min_version=772"),
    "verify flags": lambda f: Redis(host="127.0.0.1", ssl=True, ssl_include_verify_flags=[ssl.VERIFY_X509_STRICT],
                                    ssl_exclude_verify_flags=[ssl.VERIFY_X509_TRUSTED_FIRST]),
    "client certificate": lambda f: Redis(host="127.0.0.1", ssl=True, ssl_ca_certs=str(f.ca),
                                          ssl_certfile=str(f.client_cert), ssl_keyfile=str(f.client_key)),
}


@pytest.mark.parametrize("name", list(CLIENTS))
def test_the_context_is_the_one_redis_py_connects_with(name: str, tls_files: TlsFiles) -> None:
    """redis-py's own ``SSLConnection`` built from the same settings is the oracle (a redis-py upgrade that
    changes what it builds shows here)."""
    kwargs = CLIENTS[name](tls_files).connection_pool.connection_kwargs
    ours = tls.client_context(kwargs)
    assert ours is not None
    assert _what_a_context_does(ours) == _what_a_context_does(SSLConnection(**kwargs).ssl_context.get())


def test_every_tls_setting_of_the_installed_redis_py_is_mirrored() -> None:
    assert tls.UNMIRRORED == frozenset()


def test_a_setting_it_does_not_mirror_keeps_the_client_on_redis_py(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RespNode.for_client(Redis.from_url("rediss://127.0.0.1:6390/0?ssl_sni=other")) is None  # not redis-py's
    monkeypatch.setattr(tls, "UNMIRRORED", frozenset({"ssl_from_a_newer_redis_py"}))
    assert RespNode.for_client(Redis.from_url("rediss://127.0.0.1:6390/0")) is None
    store = open_store("rediss://127.0.0.1:6390/0")
    assert isinstance(store, RedisStore) and store._node is None


def test_a_bad_setting_fails_when_the_store_is_built_as_redis_py_says() -> None:
    with pytest.raises(redis.RedisError, match="Invalid SSL Certificate Requirements Flag: sometimes"):
        open_store("rediss://127.0.0.1:6390/0?ssl_cert_reqs=sometimes")


# ------------------------------------------------------------------ a real TLS-only redis-server

async def test_a_rediss_store_takes_the_fast_path_over_tls(redis_tls_url: str) -> None:
    store = open_store(redis_tls_url, timeout_ms=3000)
    assert isinstance(store, RedisStore) and store._node is not None and store._node._tls is not None
    await store.start()
    try:
        scid = new_scid()
        await store.record(TENANT_A, TurnWrite(turn(0), scid=scid, expected_position=0))
        loaded = await store.load(TENANT_A, LoadQuery(scid=scid, tool_ids=["toolu_t_0"]))
        assert loaded.conversation is not None and "toolu_t_0" in loaded.tool_hits
        [conn] = store._node._idle
        assert conn._tls is not None and conn._tls.version() in ("TLSv1.2", "TLSv1.3")
        assert store._node.connections_made == 1
    finally:
        await store.close()


@pytest.mark.parametrize("trust", ["another CA", "the system's CAs only"])
async def test_a_server_it_cannot_verify_is_refused_with_the_reason(
        redis_tls_url: str, tls_files: TlsFiles, trust: str) -> None:
    url = _with(redis_tls_url, ssl_ca_certs=tls_files.other_ca) if trust == "another CA" else _with(redis_tls_url)
    node = _node(url)
    with pytest.raises(RedisConnectionError, match=r"^Error connecting to Redis over TLS: SSLCertVerificationError: "
                       r"certificate verify failed: (self-signed certificate in certificate chain|unable to get "
                       r"local issuer certificate)$"):
        await node.execute([("PING",)])
    store = open_store(url, timeout_ms=2000)
    with pytest.raises(StoreUnavailable, match="TLS: SSLCertVerificationError: certificate verify failed"):
        await store.load(TENANT_A, LoadQuery(scid=new_scid()))
    await store.close()


async def test_no_verification_when_the_url_asks_for_none(redis_tls_url: str) -> None:
    node = _node(_with(redis_tls_url, ssl_cert_reqs="none"))
    assert await node.execute([("PING",)]) == [b"PONG"]
    node.close()


async def test_username_password_and_db_are_sent_over_tls(
        redis_tls_url: str, redis_tls_server: RedisServer) -> None:
    hostport, query = redis_tls_url.removeprefix("rediss://").split("/")[0], redis_tls_url.partition("?")[2]
    with redis_tls_server.client() as admin:
        admin.acl_setuser("tg-tls", enabled=True, passwords=["+s3cret-over-tls"], keys=["*"], commands=["+@all"])
        try:
            node = _node(f"rediss://tg-tls:s3cret-over-tls@{hostport}/5?{query}")
            assert await node.execute([("SET", "where", b"db5"), ("ACL", "WHOAMI")]) == [b"OK", b"tg-tls"]
            node.close()
            assert admin.get("where") is None
            admin.select(5)  # (this client's connection only)
            assert admin.get("where") == b"db5"
            admin.flushdb()
        finally:
            admin.acl_deluser("tg-tls")


@pytest.fixture(scope="module")
def mtls_server(tls_files: TlsFiles, redis_tls_server: RedisServer) -> Iterator[RedisServer]:
    """A TLS server that requires a client certificate (``--tls-auth-clients yes``)."""
    yield from running_tls(tls_files, auth_clients=True, server_bin=redis_tls_server.server_bin)


async def test_client_certificates_are_presented(mtls_server: RedisServer, tls_files: TlsFiles) -> None:
    assert "ssl_certfile=" in mtls_server.url
    node = _node(mtls_server.url)
    assert await node.execute([("SET", "who", b"client"), ("GET", "who")]) == [b"OK", b"client"]
    node.close()
    without = _node(_with(mtls_server.url, ssl_ca_certs=tls_files.ca))
    with pytest.raises(RedisConnectionError):  # (asyncio reads the server's RST before its alert: no reason)
        await without.execute([("PING",)])
    without.close()


def test_a_missing_client_certificate_is_named_on_uvloop(mtls_server: RedisServer, tls_files: TlsFiles) -> None:
    """The served gateway runs on uvloop, which reads the server's TLS alert: the reason reaches the store's error."""
    async def refused() -> str:
        store = open_store(_with(mtls_server.url, ssl_ca_certs=tls_files.ca), timeout_ms=2000)
        try:
            with pytest.raises(StoreUnavailable) as err:
                await store.load(TENANT_A, LoadQuery(scid=new_scid()))
            return str(err.value)
        finally:
            await store.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        said = runner.run(refused())
    assert "ConnectionError: TLS: SSLError: TLSV13_ALERT_CERTIFICATE_REQUIRED" in said, said


# ------------------------------------------------------------------ the timeout rule, inside the TLS layer

async def _a_reply_held_by_the_tls_layer(url: str) -> tuple[list[Any], float]:
    """A round trip whose reply reaches the TLS layer while the application side of the connection is paused
    (flow control: the transport goes on reading the socket into its TLS buffer), so the socket is empty when
    the timer fires; reading resumes after three timeouts. Returns the replies and how long they took."""
    timeout = 0.1
    node = _node(url, reply_timeout=timeout)
    try:
        await node.execute([("PING",)])  # a pooled, connected socket
        [conn] = node._idle
        transport = conn._transport
        assert transport is not None and conn._tls_buffered is not None
        transport.pause_reading()
        t0 = time.monotonic()
        call = asyncio.ensure_future(node.execute([("ECHO", b"already here")]))
        deadline = t0 + 5
        while not conn._tls_buffered():  # polling the transport's buffer: there is no event for "arrived"
            assert time.monotonic() < deadline and not call.done()
            await asyncio.sleep(0.001)
        assert not conn._unread_in_socket(), "the socket still holds the reply: not the case under test"
        asyncio.get_running_loop().call_later(3 * timeout, transport.resume_reading)
        return await call, time.monotonic() - t0
    finally:
        node.close()


async def test_a_reply_inside_the_tls_layer_is_not_timed_out(redis_tls_url: str) -> None:
    replies, took = await _a_reply_held_by_the_tls_layer(redis_tls_url)
    assert replies == [b"already here"] and took >= 0.29  # (resumed 0.3 s after; uvloop counts whole ms)


def test_a_reply_inside_the_tls_layer_is_not_timed_out_on_uvloop(redis_tls_url: str) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        replies, took = runner.run(_a_reply_held_by_the_tls_layer(redis_tls_url))
    assert replies == [b"already here"] and took >= 0.29  # (resumed 0.3 s after; uvloop counts whole ms)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_tls_server_that_does_not_answer_still_times_out(restartable_tls_redis: RedisServer, loop: str) -> None:
    async def hung() -> None:
        node = _node(restartable_tls_redis.url, reply_timeout=0.1)
        await node.execute([("PING",)])
        restartable_tls_redis.pause()
        try:
            t0 = time.monotonic()
            with pytest.raises(ReplyTimeout, match="no reply within 100 ms"):
                await node.execute([("PING",)])
            assert 0.09 <= time.monotonic() - t0 < 1.0  # (uvloop's clock counts whole milliseconds)
            # that connection was closed; a new one's handshake is a round trip the same timeout bounds (the hung
            # server's kernel accepts the TCP connection, then nothing answers the ClientHello)
            t0 = time.monotonic()
            with pytest.raises(ReplyTimeout, match="no TLS handshake within 100 ms"):
                await node.execute([("PING",)])
            assert 0.09 <= time.monotonic() - t0 < 1.0  # (uvloop's clock counts whole milliseconds)
        finally:
            restartable_tls_redis.resume()
            node.close()
        assert await node.execute([("PING",)]) == [b"PONG"]  # (a closed node still serves, closing as it goes)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop if loop == "uvloop" else None) as runner:
        runner.run(hung())

"""``RespNode``: the store's pipelined round trips to one Redis node, without redis-py's per-command machinery.

A gateway request makes two store round trips of about ten commands each (EVALSHA for the scripts, SET EX
for the index writes, EXISTS). redis-py's pipeline spends tens of microseconds of Python per command on
them (queueing, packing, a response callback and a timeout context per reply): about a millisecond of CPU
per request, the largest share of what the store costs the gateway. Here a round trip is one write of the
packed commands (packed by ``pack``) and one future that an ``asyncio.Protocol`` resolves when hiredis
has parsed as many replies as commands were sent.

What it keeps of redis-py: the client's connection settings (host and port or unix socket path, db,
username, password, and for ``rediss://`` the TLS context redis-py would connect with, ``state.tls``;
``RespNode.for_client``), redis-py's exception classes (error replies become the same
``ResponseError``/``NoScriptError``/... instances redis-py's hiredis parser makes (``reply_error``, from its
public exception classes), returned in place as with ``raise_on_error=False``; a lost or refused connection,
a failed TLS handshake, is its ``ConnectionError``), so ``RedisStore``'s retry, NOSCRIPT reload and error
handling are unchanged. Sentinel and Cluster stay on redis-py (``for_client`` answers None), and so does a
TLS client with a setting ``state.tls`` does not mirror. The replies are those of ``execute_command``: no
response callbacks (a SET answers ``b"OK"``, not ``True``).

The store timeout is measured here, from the moment a round trip's commands are written (``reply_timeout``):
time spent before (waiting for a connection, for the worker's event loop) is not Redis's. And when the timer
fires but the reply is already waiting in the socket, unread because the worker's event loop was busy (a
saturated replica runs its timers late and its reads later still), the reply is not given up on: the timer is
set again (``ReplyTimeout`` only for a reply that has not arrived). The caller's own budget bounds the rest.
On TLS "waiting" also counts what the TLS layer holds: bytes it took from the socket but has not decrypted
and handed over (``get_read_buffer_size``: the transport goes on reading into it while the application side
is paused), and plaintext OpenSSL decrypted but nobody read (``SSLObject.pending``): the socket's readability
alone misses a reply that is already off the wire, whenever the loop's TLS layer has taken it in.

A connection serves one round trip at a time and goes back to the pool only after all its replies were
read; a round trip that does not finish (cancelled, timed out, protocol error) closes its connection,
so no later round trip can read a stale reply. The caller bounds how many run at once (``RedisStore``'s
semaphore), and so the number of connections.
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import Callable, Sequence
from typing import Any, cast

import hiredis
from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, ConnectionPool, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError

from state.engine import Arg
from state.tls import client_context


class ReplyTimeout(TimeoutError):
    """Redis did not answer a round trip within ``reply_timeout`` of its write (the reply is not in the socket)."""


def pack(args: Sequence[Arg]) -> bytes:
    """One command in RESP (an array of bulk strings), as redis-py's encoder would send it."""
    return pack_commands((args,))


def pack_commands(commands: Sequence[Sequence[Arg]]) -> bytes:
    """Commands in RESP, back to back (one pipeline's write)."""
    out: list[bytes] = []
    add = out.append
    for args in commands:
        add(b"*%d\r\n" % len(args))
        for a in args:
            kind = type(a)  # (exact types first: the common cases, without isinstance's subclass walk)
            b: bytes
            if kind is bytes:
                b = a  # type: ignore[assignment]
            elif kind is str:
                b = a.encode()  # type: ignore[union-attr]
            elif kind is int:
                b = b"%d" % a  # type: ignore[str-format]
            else:
                b = _arg(a)
            add(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


def _arg(a: object) -> bytes:
    if isinstance(a, bytes):
        return bytes(a)
    if isinstance(a, str):
        return str(a).encode()
    if isinstance(a, int) and not isinstance(a, bool):
        return b"%d" % a
    raise TypeError(f"a command argument must be bytes, str or int, not {type(a).__name__}")


# An error reply's class by its code, as redis-py's parsers map them (their table is private API): the codes a
# single node answers with (cluster redirections never reach this path).
_ERRORS: dict[str, type[rx.RedisError]] = {
    "NOSCRIPT": rx.NoScriptError, "READONLY": rx.ReadOnlyError, "LOADING": rx.BusyLoadingError,
    "EXECABORT": rx.ExecAbortError, "OOM": rx.OutOfMemoryError, "NOPERM": rx.NoPermissionError,
    "NOAUTH": rx.AuthenticationError, "WRONGPASS": rx.AuthenticationError,
}
_ERR_MESSAGES: dict[str, type[rx.RedisError]] = {
    "max number of clients reached": rx.ConnectionError, "invalid password": rx.AuthenticationError,
    "Client sent AUTH, but no password is set": rx.AuthenticationError,
}


def reply_error(message: str) -> rx.RedisError:
    """The exception an error reply (``CODE message``) stands for, as redis-py raises it."""
    code, _, rest = message.partition(" ")
    if code == "ERR":
        return _ERR_MESSAGES.get(rest, ResponseError)(rest)
    cls = _ERRORS.get(code)
    return cls(rest) if cls is not None else ResponseError(message)


def tls_reason(exc: ssl.SSLError) -> str:
    """What an ``SSLError`` says in one line, e.g. ``SSLCertVerificationError: certificate verify failed: unable
    to get local issuer certificate``."""
    reason = getattr(exc, "verify_message", None) or exc.reason or str(exc)
    detail = f"certificate verify failed: {reason}" if isinstance(exc, ssl.SSLCertVerificationError) else reason
    return f"{type(exc).__name__}: {detail}"


class _Connection(asyncio.Protocol):
    """One socket to the node; ``roundtrip`` writes a batch and awaits that many replies."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=reply_error)
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._tls: ssl.SSLObject | None = None
        self._tls_buffered: Callable[[], int] | None = None
        self._waiter: asyncio.Future[list[Any]] | None = None
        self._expected = 0
        self._replies: list[Any] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        self._tls = transport.get_extra_info("ssl_object")
        if self._tls is not None:  # (a TLS transport's own method, on asyncio's and uvloop's, not on Transport)
            self._tls_buffered = getattr(transport, "get_read_buffer_size", None)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # nothing asked: a stray reply means the stream is out of step
            self.close()
            return
        try:
            self._reader.feed(data)
            while len(self._replies) < self._expected:
                reply = self._reader.gets()
                if reply is False:
                    return
                self._replies.append(reply)
        except InvalidResponse as exc:
            waiter.set_exception(exc)
            self.close()
            return
        if self._reader.has_data():  # more than was asked for: the stream is out of step
            self.close()
        waiter.set_result(self._replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if isinstance(exc, ssl.SSLError):  # e.g. the server's alert: "tlsv13 alert certificate required"
                lost = RedisConnectionError(f"Connection closed over TLS: {tls_reason(exc)}")
                lost.__cause__ = exc
                waiter.set_exception(lost)
            else:
                waiter.set_exception(RedisConnectionError("Connection closed by server."))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def close(self) -> None:
        self.closed = True
        if self._transport is None:
            return
        if self._tls is not None:
            # no TLS close_notify exchange: a connection given up on may face a hung server, and the shutdown
            # would keep the socket open (up to 30 s) waiting for its answer; Redis needs none
            self._transport.abort()
        else:
            self._transport.close()

    async def roundtrip(self, payload: bytes, count: int, reply_timeout: float | None = None) -> list[Any]:
        """Write ``payload`` and await ``count`` replies; ``ReplyTimeout`` when none arrived ``reply_timeout`` seconds
        after the write (see the module doc)."""
        if self.closed or self._transport is None or self._transport.is_closing():
            raise RedisConnectionError("Connection closed by server.")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[Any]] = loop.create_future()
        self._waiter, self._expected, self._replies = waiter, count, []
        timer: asyncio.TimerHandle | None = None
        try:
            self._transport.write(payload)
            if reply_timeout is not None:
                timer = loop.call_later(reply_timeout, self._expire, waiter, reply_timeout)
            return await waiter
        except BaseException:
            self.close()  # replies may still be on their way: never reuse this socket
            raise
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _expire(self, waiter: asyncio.Future[list[Any]], timeout: float) -> None:
        if waiter.done() or waiter is not self._waiter:
            return
        if self._unread():  # Redis answered in time; the loop has not read it yet: read it, don't give up
            asyncio.get_running_loop().call_later(timeout, self._expire, waiter, timeout)
            return
        waiter.set_exception(ReplyTimeout(f"no reply within {timeout * 1000:.0f} ms of the write"))

    def _unread(self) -> bool:
        """Bytes that arrived and were not handed to ``data_received`` yet: in the socket, or inside the TLS layer
        (see the module doc)."""
        return self._unread_in_tls() or self._unread_in_socket()

    def _unread_in_tls(self) -> bool:
        return self._tls is not None and bool(self._tls.pending() or (self._tls_buffered and self._tls_buffered()))

    def _unread_in_socket(self) -> bool:
        if self._fd < 0:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(0))


class RespNode:
    """A pool of ``_Connection`` to one Redis node (see module doc)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 6379, path: str | None = None, db: int = 0,
                 username: str | None = None, password: str | None = None,
                 reply_timeout: float | None = None, tls: ssl.SSLContext | None = None) -> None:
        """``reply_timeout``: seconds Redis has to answer a round trip once it is written (None: no bound here).
        ``tls``: connect over TLS with this context (``state.tls.client_context``), ``host`` as the server name."""
        self.reply_timeout = reply_timeout
        self._address = (host, port)
        self._path = path
        self._tls = tls
        auth: list[Arg] | None = ["AUTH", *([username] if username else []), password] if password else None
        choose_db: list[Arg] | None = ["SELECT", db] if db else None
        self._handshake: list[list[Arg]] = [c for c in (auth, choose_db) if c is not None]
        self._idle: list[_Connection] = []
        self._closed = False
        self.connections_made = 0

    @classmethod
    def for_client(cls, client: Redis, reply_timeout: float | None = None) -> RespNode | None:
        """The node ``client`` talks to, for a plain TCP, TLS or unix-socket connection; None for anything else
        (Sentinel, credential providers, a TLS setting ``state.tls`` does not mirror...), which stays on redis-py."""
        pool = client.connection_pool
        kw = pool.connection_kwargs
        if kw.get("credential_provider") is not None or kw.get("protocol") not in (None, 2, "2"):
            return None
        common: dict[str, Any] = {"db": int(kw.get("db") or 0), "username": kw.get("username"),
                                  "password": kw.get("password"), "reply_timeout": reply_timeout}
        tcp = type(pool) is ConnectionPool  # (not Sentinel's subclass)
        host, port = kw.get("host", "localhost"), int(kw.get("port", 6379))
        if pool.connection_class is Connection and tcp:
            return cls(host=host, port=port, **common)
        if pool.connection_class is SSLConnection and tcp:
            context = client_context(kw)
            return cls(host=host, port=port, tls=context, **common) if context is not None else None
        if pool.connection_class is UnixDomainSocketConnection and kw.get("path"):
            return cls(path=kw["path"], **common)
        return None

    async def execute(self, commands: Sequence[Sequence[Arg]], reply_timeout: float | None = None) -> list[Any]:
        """Send ``commands`` in one write; their replies in order (error replies as exception instances).
        ``reply_timeout``: this round trip's, instead of the node's."""
        payload = pack_commands(commands)
        timeout = reply_timeout or self.reply_timeout
        conn = await self._acquire(timeout)
        replies = await conn.roundtrip(payload, len(commands), timeout)
        if self._closed:
            conn.close()
        else:
            self._idle.append(conn)
        return replies

    async def _acquire(self, reply_timeout: float | None) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return await self._connect(reply_timeout)

    async def _connect(self, reply_timeout: float | None) -> _Connection:
        """A new connection; over TLS its handshake is a round trip Redis must answer within ``reply_timeout``
        (a hung server accepts the TCP connection in its kernel, and then says nothing)."""
        loop = asyncio.get_running_loop()
        handshake = asyncio.timeout(reply_timeout if self._tls is not None else None)
        try:
            async with handshake:
                if self._path is not None:
                    _, conn = await loop.create_unix_connection(_Connection, self._path)
                else:
                    _, conn = await loop.create_connection(_Connection, *self._address, ssl=self._tls)
        except TimeoutError as exc:
            if handshake.expired():
                raise ReplyTimeout(f"no TLS handshake within {(reply_timeout or 0) * 1000:.0f} ms") from None
            raise RedisConnectionError(f"Error connecting to Redis: {type(exc).__name__}") from exc
        except ssl.SSLError as exc:  # (an OSError) the reason: a configuration error to name, not a "connection error"
            raise RedisConnectionError(f"Error connecting to Redis over TLS: {tls_reason(exc)}") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {type(exc).__name__}") from exc
        self.connections_made += 1
        if self._handshake:
            replies = await conn.roundtrip(pack_commands(self._handshake), len(self._handshake), self.reply_timeout)
            for reply in replies:
                if isinstance(reply, Exception):
                    conn.close()
                    raise reply
        return conn

    def close(self) -> None:
        """Close the idle connections now, and those in use when their round trip ends."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()


__all__ = ["ReplyTimeout", "RespNode", "ResponseError", "pack", "pack_commands", "tls_reason"]

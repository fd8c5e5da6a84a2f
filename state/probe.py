"""A start-up check of the store's address and credentials: a wrong Redis password, or a host name that does not
resolve (the resolver answers that no such name exists), is an operator's mistake that no retry mends, so ``thinkgate
serve`` stops with one line (exit 2) instead of starting and serving every request statelessly. A Redis that cannot
be reached (refused, timed out, a resolver that does not answer) may be an outage: the gateway starts, serves
statelessly until it is back (``RedisStore.start`` never raises), and reports itself not ready until the store
answered once (``/readyz``, ``GATEWAY_STATELESS_START``)."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

from redis.exceptions import AuthenticationError, ResponseError

from state.factory import open_store
from state.redis_store import RedisStore

PROBE_TIMEOUT_S = 3.0
_AUTH_REPLIES = ("NOAUTH", "WRONGPASS", "invalid password", "invalid username-password")


def is_auth_failure(exc: BaseException) -> bool:
    """Redis refused the credentials (a server without a password given one says so as an error reply too)."""
    if isinstance(exc, AuthenticationError):
        return True
    return isinstance(exc, ResponseError) and any(s in str(exc) for s in _AUTH_REPLIES)


async def check_host(url: str) -> None:
    """ValueError when the host of a single-node ``redis://``/``rediss://`` URL is a name the resolver says does not
    exist; nothing when it resolves, or the resolver does not answer within ``PROBE_TIMEOUT_S`` (an outage)."""
    parsed = urlsplit(url)
    host = parsed.hostname
    if parsed.scheme not in ("redis", "rediss") or not host:
        return
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await asyncio.get_running_loop().getaddrinfo(host, parsed.port or 6379)
    except socket.gaierror as e:
        if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            raise ValueError(f"the Redis host {host!r} does not resolve ({e.strerror})") from None
    except TimeoutError:
        return


async def check_credentials(url: str) -> None:
    """ValueError (one line, no secret in it) when the store at ``url`` has a host that does not resolve or refuses
    its credentials; nothing when it accepts them or cannot be reached within ``PROBE_TIMEOUT_S``."""
    await check_host(url)
    store = open_store(url, timeout_ms=int(PROBE_TIMEOUT_S * 1000))
    if not isinstance(store, RedisStore):
        return
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await store.client.ping()
    except Exception as exc:  # anything else (refused, timeout, DNS): an outage, not configuration
        cause: BaseException | None = exc
        while cause is not None and not is_auth_failure(cause):
            cause = cause.__cause__ or cause.__context__  # cluster and sentinel clients wrap the reply
        if cause is not None:
            raise ValueError(f"the Redis server refused the credentials in the URL ({type(cause).__name__})") \
                from None
    finally:
        await store.close()

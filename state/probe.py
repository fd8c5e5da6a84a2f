"""A start-up check of the store's credentials: a wrong Redis password is an operator's mistake that no retry
mends, so ``thinkgate serve`` stops with one line (exit 2) instead of starting "ready" and serving every request
statelessly. An unreachable Redis is not a mistake of configuration: the gateway starts and serves statelessly
until it is back (``RedisStore.start`` never raises), as it does for an outage while running."""

from __future__ import annotations

import asyncio

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


async def check_credentials(url: str) -> None:
    """ValueError (one line, no secret in it) when the store at ``url`` refuses its credentials; nothing when it
    accepts them or cannot be reached within ``PROBE_TIMEOUT_S``."""
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

"""A request under a gateway key, from admission to release.

Gateway keys as clients hold them: ``tgk_<id>_<secret>``, a 12-hex-digit id (public: it names the key's record)
and 256 random bits (``new_key``). Only the secret's SHA-256 is stored; a presented key is hashed and the store
compares the hashes (``state.scripts.ADMIT``), so a wrong secret costs what a right one does.

``admit`` reads the request's credential: a gateway key (``parse``) is checked, and its limits taken, in one store
round trip (``state.scripts.ADMIT``): known, not revoked or expired, its tokens per minute not used up, its requests
per minute (GCRA: a burst of up to ``rpm`` requests, then one every ``60000/rpm`` ms) and requests in flight within
bounds. Replicas share the counters, so two or ten of them admit what one would. A refusal is the client's own
dialect's error: 401 for a key that is not valid (one message for unknown, revoked, expired or malformed: the answer
says nothing of which), 429 with ``retry-after`` for a limit. A request that carries no gateway key is the client's
own key forwarded, as before (unless ``GATEWAY_REQUIRE_GATEWAY_KEYS``). The store away: 503, or with
``GATEWAY_LIMITS_FAIL_OPEN`` the keys this worker admitted before are admitted without limits (``AdmittedKeys``).

``upstream_headers`` gives a request under a gateway key the credential thinkgate holds for its upstream
(``GATEWAY_UPSTREAM_API_KEYS``) in place of the client's, which never leaves the gateway; ``release`` gives back
the concurrency slot and counts the tokens of the answer.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from starlette.responses import Response, StreamingResponse

from gateway.dialects import prices
from gateway.dialects.canonical import token_counts
from gateway.errors import ClientError, GatewayError
from gateway.ops import metrics
from gateway.pipeline.identify import CREDENTIAL_HEADERS, credential_of
from state.coherence import Lru
from state.errors import StoreError
from state.gateway_keys import Admission

if TYPE_CHECKING:
    from gateway.app.deps import Gateway
    from gateway.app.settings import Settings
    from gateway.dialects.canonical import Turn
    from gateway.pipeline.exchange import Exchange


log = logging.getLogger("thinkgate.access")
INVALID = "invalid gateway key"
ADMITTED_KEYS = 1024  # keys a worker remembers having admitted (the fail-open estimate)


@dataclass(frozen=True, slots=True)
class Grant:
    """A request admitted under a gateway key: its id and name, the models it may use (patterns; empty: any), and
    whether it holds a concurrency slot."""

    key_id: str
    name: str
    models: tuple[str, ...]
    held: bool

    def allows(self, model: str) -> bool:
        return not self.models or any(fnmatch.fnmatchcase(model, p) for p in self.models)


class AdmittedKeys:
    """The gateway keys (id and secret hash) this worker admitted, with their grants: what it admits with the store
    away, when ``GATEWAY_LIMITS_FAIL_OPEN`` says so. Bounded (LRU); holds no conversation state."""

    def __init__(self, limit: int = ADMITTED_KEYS) -> None:
        self._known: Lru[tuple[str, str], Grant] = Lru(limit)

    def remember(self, key: tuple[str, str], grant: Grant) -> None:
        self._known.put(key, grant)

    def forget(self, key: tuple[str, str]) -> None:
        self._known.pop(key)

    def get(self, key: tuple[str, str]) -> Grant | None:
        return self._known.get(key)


async def admit(headers: Mapping[str, str], gw: Gateway) -> Grant | None:
    """The grant of a request under a gateway key; None: it carries none (the client's own key is forwarded)."""
    cred = credential_of(headers)
    parsed = parse(cred) if cred else None
    if parsed is None:
        if gw.settings.require_gateway_keys:
            metrics.observe_admission("missing")
            raise ClientError(401, "this gateway requires a gateway key", "authentication_error")
        return None
    key_id, digest = parsed
    if not key_id or gw.store is None:
        metrics.observe_admission("invalid")
        raise ClientError(401, INVALID, "authentication_error")
    try:
        found = await gw.store.admit(key_id, digest, int(time.time() * 1000))
    except StoreError:
        known = gw.admitted.get(parsed) if gw.settings.limits_fail_open else None
        if known is None:
            metrics.observe_admission("unavailable")
            raise GatewayError(503, "the gateway's key store is unavailable; try again", "overloaded_error",
                               headers={"retry-after": "1"}) from None
        metrics.observe_admission("unlimited")
        return Grant(known.key_id, known.name, known.models, False)
    if found.status == "ok":
        grant = Grant(key_id, found.name, tuple(p for p in found.models.split(",") if p), found.held)
        gw.admitted.remember(parsed, grant)
        metrics.observe_admission("ok")
        return grant
    if found.status in ("rpm", "tpm", "concurrency", "budget"):
        metrics.observe_admission(found.status)
        wait = max(1, math.ceil(found.retry_ms / 1000))
        if found.status == "budget":  # (OpenAI's words for a spent quota; a retry before the period ends is in vain)
            raise ClientError(429, f"gateway key budget spent for this period; it renews in {wait} s",
                              "rate_limit_error", "insufficient_quota", headers={"retry-after": str(wait)})
        raise ClientError(429, f"gateway key rate limit reached ({_LIMITS[found.status]}); retry in {wait} s",
                          "rate_limit_error", headers={"retry-after": str(wait), **_limit_headers(found, wait)})
    gw.admitted.forget(parsed)
    metrics.observe_admission("invalid")
    raise ClientError(401, INVALID, "authentication_error")


_LIMITS = {"rpm": "requests per minute", "tpm": "tokens per minute", "concurrency": "requests in flight"}


def _limit_headers(found: Admission, wait: int) -> dict[str, str]:
    """The rate-limit headers of the limit that refused, in each dialect's names (the error renderer keeps the
    client's: Anthropic's ``anthropic-ratelimit-*``, OpenAI's ``x-ratelimit-*``)."""
    what = {"rpm": "requests", "tpm": "tokens"}.get(found.status)
    if what is None or not found.limit:
        return {}
    reset = datetime.now(UTC) + timedelta(seconds=wait)
    return {f"anthropic-ratelimit-{what}-limit": str(found.limit), f"anthropic-ratelimit-{what}-remaining": "0",
            f"anthropic-ratelimit-{what}-reset": reset.strftime("%Y-%m-%dT%H:%M:%SZ"),
            f"x-ratelimit-limit-{what}": str(found.limit), f"x-ratelimit-remaining-{what}": "0",
            f"x-ratelimit-reset-{what}": f"{wait}s"}


NEEDS_KEY = "the route of model {model} serves requests with a gateway key only"


def check_model(grant: Grant | None, model: str, settings: Settings, upstream: str, cloud: bool) -> None:
    """A model the key may not use: 403 in the client's dialect. A route that serves gateway keys only, without one:
    401. Requests routed to ``upstream`` must carry a gateway key when every request must
    (``GATEWAY_REQUIRE_GATEWAY_KEYS``), this route's must (``GATEWAY_KEYS_REQUIRED_FOR``), or it is a cloud
    platform's (``cloud``), paid with the gateway's own credential (unless ``GATEWAY_CLOUD_WITHOUT_KEYS``)."""
    if grant is None and (upstream in settings.keys_required_for or (cloud and not settings.cloud_without_keys)):
        metrics.observe_admission("missing")
        raise ClientError(401, NEEDS_KEY.format(model=model[:200]), "authentication_error")
    if grant is not None and not grant.allows(model):
        raise ClientError(403, f"this gateway key may not use model {model[:200]}", "permission_error")


def upstream_headers(headers: Mapping[str, str], grant: Grant | None, upstream: str, gw: Gateway) -> Mapping[str, str]:
    """The client's headers as the upstream's header rules read them: under a gateway key, its credential swapped
    for the one thinkgate holds for ``upstream`` (none configured: a 401, nothing forwarded). An upstream that signs
    its requests with a cloud credential of its own (``Upstream.auth``) gets no client credential at all."""
    if getattr(gw.upstreams.get(upstream), "auth", None) is not None:
        return {k: v for k, v in headers.items() if k not in CREDENTIAL_HEADERS}
    if grant is None:
        return headers
    key = gw.settings.upstream_key(upstream)
    if key is None:
        raise ClientError(401, f"no upstream credential is configured for {upstream}; gateway keys cannot use it",
                          "authentication_error")
    return {**{k: v for k, v in headers.items() if k not in CREDENTIAL_HEADERS}, "x-api-key": key}


def without_key_query(query: str, grant: Grant | None) -> str:
    """A Gemini client's ``?key=`` (its gateway key) is not forwarded: the upstream gets thinkgate's credential."""
    if grant is None or not query:
        return query
    return "&".join(p for p in query.split("&") if not p.startswith("key="))


async def release(grant: Grant | None, turn: Turn | None, gw: Gateway, model: str = "") -> None:
    """After the answer: the concurrency slot back; the turn's tokens (input, output with thinking, cache reads and
    writes) counted against the key's tokens per minute, its cost (``prices``) against its budget, both in its
    usage of the day, by model."""
    if grant is None or gw.store is None:
        return
    usage = turn.usage if turn is not None else {}
    tokens = prices.billed_tokens(usage)
    if not grant.held and not tokens:
        return
    cost = prices.cost_micros(gw.prices, model, usage)
    label = model[:100].replace(" ", "_") or "other"
    fields = {f"{label} {kind}": n for kind, n in token_counts(usage).items() if kind in prices.BILLED}
    if cost:
        fields[f"{label} cost"] = cost
    metrics.observe_key_usage(gw.key_labels.of(grant.name), token_counts(usage), cost)
    try:
        await gw.store.release(grant.key_id, grant.held, tokens, int(time.time() * 1000), cost, fields)
    except StoreError as e:  # the slot expires by itself (10 minutes); the tokens are not counted
        log.warning("gateway key %s: release failed (%s)", grant.name, type(e).__name__)


def released_after(response: Response, grant: Grant, ex: Exchange, gw: Gateway) -> Response:
    """``response`` whose end gives the grant back (``release``), in the background: a whole answer's as it is
    handed to the server, a stream's once its last byte went or its client left. The server does not wait for the
    round trip (a keep-alive connection's next request would), so a count lands just after its answer (``settled``
    awaits those in flight)."""
    if not isinstance(response, StreamingResponse):
        _later(release(grant, ex.plan.turn, gw, ex.request.model if ex.request is not None else ""))
        return response
    body = response.body_iterator

    async def relayed() -> AsyncIterator[Any]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            _later(release(grant, ex.plan.turn, gw, ex.request.model if ex.request is not None else ""))

    response.body_iterator = relayed()
    return response


_PENDING: set[asyncio.Task[None]] = set()


async def settled() -> None:
    """Until every release in flight landed (the app's shutdown: no count is lost; tests)."""
    while _PENDING:
        await asyncio.gather(*list(_PENDING), return_exceptions=True)


def _later(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` in the background, keeping a reference to it until it is done."""
    task = asyncio.get_running_loop().create_task(work)
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)


# --- the key as clients hold it ---

PREFIX = "tgk_"
_KEY_RE = re.compile(r"tgk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


def new_key() -> tuple[str, str, str]:
    """(key id, secret hash, the key as the client gets it: shown once, never stored)."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return key_id, secret_hash(secret), f"{PREFIX}{key_id}_{secret}"


def parse(credential: str) -> tuple[str, str] | None:
    """(key id, secret hash) of a gateway key; None: the credential is not one (a client's upstream key)."""
    if not credential.startswith(PREFIX):
        return None
    m = _KEY_RE.fullmatch(credential)
    return (m[1], secret_hash(m[2])) if m else ("", "")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()

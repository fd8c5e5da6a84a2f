"""The client's credential, read from its headers: the one rule both the tenant (``identity.tenant_of``) and every
upstream's auth header (``dialects``, ``openai_compat``) use, so a request is always recorded under the tenant of
the key it is billed to. Used by protocols and stages alike, so it depends on nothing but the error type."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.errors import ClientError

# the headers a credential comes in: each may be sent once (or repeated with the same value)
KEY_HEADERS = ("x-api-key", "x-goog-api-key")  # a key as it is; ``authorization`` carries a bearer token
CREDENTIAL_HEADERS = frozenset({*KEY_HEADERS, "authorization"})
CONFLICTING = ("the request carries different API keys in {names}; send one credential "
               "(x-api-key, x-goog-api-key or Authorization: Bearer)")


def credential_of(headers: Mapping[str, str]) -> str | None:
    """The request's API key: ``x-api-key``, ``x-goog-api-key`` or a bearer token. A request that carries two
    different keys is refused (400): recorded under one and billed to the other is what it would otherwise get."""
    found: dict[str, str] = {}
    for name in KEY_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            found[name] = value
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        found["authorization"] = token.strip()
    keys = set(found.values())
    if len(keys) > 1:
        raise ClientError(400, CONFLICTING.format(names=" and ".join(found)), "invalid_request_error")
    return keys.pop() if keys else None

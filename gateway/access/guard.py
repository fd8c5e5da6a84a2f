"""The operator's surfaces behind a bearer token: ``/admin/*`` (``GATEWAY_ADMIN_TOKEN``; unset: no admin API) and
``/metrics`` (``GATEWAY_METRICS_TOKEN``; unset: open). Compared in constant time; no token: 401, a wrong one: 403."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from gateway.errors import ClientError


def check(headers: Mapping[str, str], token: str | None, *, required: bool) -> None:
    """Refuse a request that does not carry ``token`` as its bearer. ``token`` None: the surface is open, or (when
    ``required``) switched off (404)."""
    if token is None:
        if required:
            raise ClientError(404, "the admin API is off (GATEWAY_ADMIN_TOKEN is not set)", "not_found_error")
        return
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise ClientError(401, "a bearer token is required", "authentication_error",
                          headers={"www-authenticate": "Bearer"})
    if not hmac.compare_digest(presented.strip().encode(), token.encode()):
        raise ClientError(403, "the bearer token is not this gateway's", "permission_error")

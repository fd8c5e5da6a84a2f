"""The client's credential, read from its headers (the tenant is derived from it: ``identity.tenant_of``; upstream
headers carry it on: ``dialects``). Used by protocols and stages alike, so it depends on nothing."""

from __future__ import annotations

from collections.abc import Mapping


def credential_of(headers: Mapping[str, str]) -> str | None:
    key = headers.get("x-api-key") or headers.get("x-goog-api-key")
    if key:
        return key
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None

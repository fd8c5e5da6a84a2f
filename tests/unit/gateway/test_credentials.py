"""``credential_of``: the one rule for the request's key (tenant and upstream auth alike)."""

from __future__ import annotations

import pytest

from gateway.errors import ClientError
from gateway.pipeline.identify import credential_of
from gateway.surfaces.common import gemini_headers


@pytest.mark.parametrize(("headers", "key"), [
    ({"x-api-key": "a"}, "a"),
    ({"x-goog-api-key": "g"}, "g"),
    ({"authorization": "Bearer t"}, "t"),
    ({"authorization": "Basic t"}, None),
    ({"x-api-key": "a", "x-goog-api-key": "a", "authorization": "Bearer a"}, "a"),
    ({}, None),
])
def test_one_key(headers: dict[str, str], key: str | None) -> None:
    assert credential_of(headers) == key


@pytest.mark.parametrize(("headers", "names"), [
    ({"x-api-key": "sk-one", "x-goog-api-key": "gk-two"}, "x-api-key and x-goog-api-key"),
    ({"x-goog-api-key": "gk-two", "authorization": "Bearer tok-three"}, "x-goog-api-key and authorization"),
    ({"x-api-key": "sk-one", "authorization": "Bearer tok-three"}, "x-api-key and authorization"),
])
def test_two_different_keys_are_refused(headers: dict[str, str], names: str) -> None:
    with pytest.raises(ClientError) as e:
        credential_of(headers)
    assert e.value.status == 400 and names in e.value.message
    assert not any(key in e.value.message for key in ("sk-one", "gk-two", "tok-three"))  # never the keys


def test_the_gemini_upstream_gets_the_tenants_key() -> None:
    """Before: ``x-goog-api-key`` won upstream while ``x-api-key`` made the tenant."""
    assert gemini_headers({"x-api-key": "k"}) == {"x-goog-api-key": "k"}
    assert gemini_headers({"authorization": "Bearer k"}) == {"x-goog-api-key": "k"}

"""``gateway.surfaces.model_lists`` (list shapes, Anthropic paging, the per-worker TTL cache) and the dialect an error
takes
on a path two protocols share or no surface owns (``surfaces.dialect_for_request``)."""

from __future__ import annotations

import orjson
import pytest

from gateway.dialects.routing import Router, parse_routes
from gateway.errors import ClientError
from gateway.surfaces.model_lists import (
    Listed,
    ModelLists,
    anthropic_list,
    gemini_list,
    openai_list,
    parse_list,
    route_models,
)
from gateway.surfaces.table import dialect_for_request

MODELS = [Listed(m, "anthropic", created_at="2025-11-24T00:00:00Z") for m in ("a", "b", "c")]


def test_anthropic_pages_as_the_api_does() -> None:
    first = anthropic_list(MODELS, {"limit": "2"})
    assert [m["id"] for m in first["data"]] == ["a", "b"] and first["has_more"] is True
    assert (first["first_id"], first["last_id"]) == ("a", "b")
    second = anthropic_list(MODELS, {"limit": "2", "after_id": "b"})
    assert [m["id"] for m in second["data"]] == ["c"] and second["has_more"] is False
    before = anthropic_list(MODELS, {"limit": "1", "before_id": "c"})
    assert [m["id"] for m in before["data"]] == ["b"] and before["has_more"] is True
    assert anthropic_list([], {})["data"] == [] and anthropic_list([], {})["first_id"] is None
    with pytest.raises(ClientError):
        anthropic_list(MODELS, {"limit": "0"})


def test_parse_each_upstreams_list_and_render_each_shape() -> None:
    gem = parse_list("models", "gemini", orjson.dumps({"models": [{"name": "models/gemini-3-pro-preview",
                                                                    "displayName": "Gemini 3 Pro"}, "junk"]}))
    assert [(m.id, m.display_name) for m in gem] == [("gemini-3-pro-preview", "Gemini 3 Pro")]
    assert gemini_list(gem) == {"models": [{"name": "models/gemini-3-pro-preview", "displayName": "Gemini 3 Pro"}]}
    oai = parse_list("data", "responses", orjson.dumps({"object": "list", "data": [
        {"id": "gpt-5", "created": 7, "owned_by": "system"}, {"id": ""}]}))
    assert openai_list(oai) == {"object": "list", "data": [{"id": "gpt-5", "object": "model", "created": 7,
                                                            "owned_by": "responses"}]}
    assert parse_list("data", "anthropic", b"<html>") == []


def test_routes_that_name_a_model_are_listed_once() -> None:
    router = Router(parse_routes("google/=openrouter@https://o/api/v1,gemini-3-flash-preview=generic@https://g,"
                                 "gpt-5=responses@https://r/v1,gpt-5-mini=openai,deepseek-=deepseek@https://d"))
    listed = [Listed("gpt-5", "responses")]
    assert [(m.id, m.owner) for m in route_models(router, ["generic", "responses", "openai", "openrouter"], listed)] \
        == [("gemini-3-flash-preview", "generic")]  # gpt-5-mini goes to gpt-5's route first; gpt-5 is listed
    assert route_models(router, ["anthropic"], []) == []


def test_lists_are_kept_per_tenant_and_upstream_until_their_ttl() -> None:
    lists = ModelLists(ttl=60)
    lists.put("t1", "anthropic", MODELS)
    assert lists.get("t1", "anthropic") == MODELS and lists.get("t2", "anthropic") is None
    expired = ModelLists(ttl=-1)
    expired.put("t1", "anthropic", MODELS)
    assert expired.get("t1", "anthropic") is None
    small = ModelLists(max_lists=1)
    small.put("t1", "a", MODELS)
    small.put("t2", "a", MODELS)
    assert small.get("t1", "a") is None and small.get("t2", "a") == MODELS


@pytest.mark.parametrize(("path", "headers", "query", "dialect"), [
    ("/v1/models", {"authorization": "Bearer k"}, "", "openai"),
    ("/v1/models", {"x-api-key": "k", "anthropic-version": "2023-06-01"}, "", "anthropic"),
    ("/v1/models", {"x-goog-api-key": "k"}, "", "openai"),  # Gemini lists on /v1beta/models
    ("/v1/nothing", {"authorization": "Bearer k"}, "", "openai"),
    ("/v1/nothing", {"x-goog-api-key": "k"}, "", "gemini"),
    ("/v1/nothing", {}, "key=k", "gemini"),
    ("/v1/nothing", {}, "", "anthropic"),
    ("/v1/chat/completions", {"x-api-key": "k"}, "", "openai"),  # a surface's own dialect, whatever the headers
    ("/v1/messages", {"authorization": "Bearer k"}, "", "anthropic"),
])
def test_error_dialect_of_a_request(path: str, headers: dict[str, str], query: str, dialect: str) -> None:
    assert dialect_for_request(path, headers, query) == dialect

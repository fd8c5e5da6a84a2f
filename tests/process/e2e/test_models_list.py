"""``GET /v1/models`` and ``GET /v1beta/models`` through a real `thinkgate serve` with every upstream kind at the
simulator: the official SDKs' ``models.list()`` in their own shapes, from the upstreams' own lists (only the models
the routing table sends there); unknown paths and methods answered 404/405 in the client's dialect, no redirect."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.gemini.helpers import gateway_env

KEY = "sk-models-list-0123456789abcdef0123"


@pytest.fixture(scope="module")
def gw(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    # claude-haiku-* goes elsewhere (Gemini's OpenAI layer here): the Anthropic list leaves it out
    env = gateway_env(sim)
    env["GATEWAY_ROUTES"] += f",claude-haiku-=generic@{sim.url}/v1beta/openai"
    return gateways.start(sim.url, env)


def test_openai_sdk_lists_the_models_of_the_openai_kind_upstreams(gw: ServerProcess) -> None:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0) as client:
        models = list(client.models.list())
    # each upstream's own list (every simulator profile has one, as the real upstreams do: issue 34 item 1), only the
    # models the routing table sends to it: OpenRouter's google/ and anthropic/ ones (not its deepseek/ one), the
    # DeepSeek profile's, Gemini's OpenAI layer's gemini-3-flash-preview, the Responses upstream's
    assert [(m.id, m.object, m.owned_by) for m in models] == [
        ("google/gemini-3-pro-preview", "model", "openrouter"), ("anthropic/claude-sonnet-4.5", "model", "openrouter"),
        ("anthropic/claude-opus-4.5", "model", "openrouter"), ("deepseek-chat", "model", "deepseek"),
        ("deepseek-reasoner", "model", "deepseek"), ("gemini-3-flash-preview", "model", "generic"),
        ("gpt-5", "model", "responses"), ("gpt-5-codex", "model", "responses"), ("gpt-5.1", "model", "responses")]


def test_anthropic_sdk_lists_and_pages_the_anthropic_upstreams_models(gw: ServerProcess) -> None:
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        assert [m.id for m in client.models.list()] == ["claude-opus-4-5", "claude-sonnet-4-5"]
        page = client.models.list(limit=1)
        assert [m.id for m in page.data] == ["claude-opus-4-5"] and page.has_more and page.last_id == "claude-opus-4-5"
        assert [m.id for m in page] == ["claude-opus-4-5", "claude-sonnet-4-5"]  # the SDK follows after_id
        assert client.models.list(limit=1).data[0].type == "model"


def test_gemini_list_and_its_key_query(gw: ServerProcess) -> None:
    r = httpx.get(gw.url + "/v1beta/models", params={"key": KEY})
    assert r.status_code == 200
    assert [m["name"] for m in r.json()["models"]] == ["models/gemini-3-pro-preview", "models/gemini-2.5-pro"]


def test_openai_sdk_retrieves_one_model_as_the_list_shows_it(gw: ServerProcess) -> None:
    """``models.retrieve`` is ``GET /v1/models/{id}``, under Gemini's ``/v1/models/`` prefix: the method and the bearer
    token make it OpenAI's (it answered 405 in Google's envelope)."""
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0) as client:
        listed = {m.id: m for m in client.models.list()}
        for model_id in ("gpt-5.1", "gemini-3-flash-preview"):
            got = client.models.retrieve(model_id)
            assert got == listed[model_id] and got.object == "model"
        with pytest.raises(openai.NotFoundError) as e:
            client.models.retrieve("gpt-nope")
    assert e.value.status_code == 404 and e.value.code == "model_not_found"
    assert e.value.message.startswith("Error code: 404") and "The model `gpt-nope` does not exist" in e.value.message


def test_anthropic_sdk_retrieves_one_model_as_the_list_shows_it(gw: ServerProcess) -> None:
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        listed = {m.id: m for m in client.models.list()}
        got = client.models.retrieve("claude-sonnet-4-5")
        assert got == listed["claude-sonnet-4-5"] and got.type == "model"
        with pytest.raises(anthropic.NotFoundError) as e:
            client.models.retrieve("claude-haiku-4-5")  # routed elsewhere: not the Anthropic upstream's
    assert e.value.body["error"] == {"type": "not_found_error", "message": "model: claude-haiku-4-5"}  # type: ignore[index]


def test_gemini_sdk_gets_one_model_and_generate_content_stays_geminis(gw: ServerProcess) -> None:
    """``models.get`` is ``GET /v1beta/models/{id}``; ``POST /v1/models/{id}:generateContent`` (the same prefix) still
    generates, and ``GET`` there with Google's key is a lookup in Google's envelope."""
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types

    client = genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(base_url=gw.url))
    got = client.models.get(model="gemini-3-pro-preview")
    assert got.name == "models/gemini-3-pro-preview"
    with pytest.raises(genai_errors.ClientError) as e:
        client.models.get(model="gemini-nope")
    assert (e.value.code, e.value.status) == (404, "NOT_FOUND")
    r = httpx.post(gw.url + "/v1/models/gemini-3-pro-preview:generateContent", headers={"x-goog-api-key": KEY},
                   json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status_code == 200 and r.json()["candidates"][0]["content"]["parts"], r.text
    r = httpx.get(gw.url + "/v1/models/gemini-3-pro-preview", headers={"x-goog-api-key": KEY})
    assert r.status_code == 200 and r.json()["name"] == "models/gemini-3-pro-preview"


@pytest.mark.parametrize(("path", "method", "headers", "status", "shape"), [
    ("/v1/responsez", "POST", {"authorization": f"Bearer {KEY}"}, 404, "openai"),
    ("/v1/nothing", "GET", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, 404, "anthropic"),
    ("/v1beta/nothing", "GET", {"x-goog-api-key": KEY}, 404, "gemini"),
    ("/v1/models", "POST", {"authorization": f"Bearer {KEY}"}, 405, "openai"),
    ("/v1/models", "DELETE", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, 405, "anthropic"),
    ("/v1/chat/completions", "GET", {"authorization": f"Bearer {KEY}"}, 405, "openai"),
    ("/v1/models/", "GET", {"authorization": f"Bearer {KEY}"}, 404, "openai"),  # a lookup of no id: never a redirect
    ("/v1/models/gpt-5", "DELETE", {"authorization": f"Bearer {KEY}"}, 405, "gemini"),
    ("/v1/models/gemini-3-pro-preview:generateContent", "PUT", {"x-goog-api-key": KEY}, 405, "gemini"),
    ("/v1/chat/completions/", "POST", {"authorization": f"Bearer {KEY}"}, 404, "openai"),
])
def test_unknown_paths_and_methods_answer_in_the_clients_dialect(gw: ServerProcess, path: str, method: str,
                                                                 headers: dict[str, str], status: int,
                                                                 shape: str) -> None:
    r = httpx.request(method, gw.url + path, headers=headers, json={}, follow_redirects=False)
    assert r.status_code == status, r.text
    body = r.json()
    if shape == "openai":
        assert set(body["error"]) == {"message", "type", "param", "code"}
    elif shape == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] in ("not_found_error", "invalid_request_error")
    else:
        google = {404: "NOT_FOUND", 405: "UNIMPLEMENTED"}[status]  # google.rpc.Code (docs/upstream-rules.md)
        assert body["error"]["code"] == status and body["error"]["status"] == google


def test_a_model_the_upstream_answered_for_is_listed_though_no_list_names_it(gw: ServerProcess) -> None:
    """Issue 34 item 1: a model a client used (here ``claude-opus-4-7``, which the simulator answers for but does not
    list) is in that tenant's list from then on; another tenant's list does not show it."""
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        assert "claude-opus-4-7" not in [m.id for m in client.models.list()]
        client.messages.create(model="claude-opus-4-7", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert "claude-opus-4-7" in [m.id for m in client.models.list()]
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY + "-other", max_retries=0) as other:
        assert "claude-opus-4-7" not in [m.id for m in other.models.list()]

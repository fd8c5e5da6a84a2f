"""/v1/chat/completions on the wire: upstream request, errors in the OpenAI envelope, odd bodies.

Real `thinkgate serve` in front of the real simulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.process_fixtures import ServerProcess, Sim
from tests.support.openai.helpers import MODEL, WEATHER_TOOL

AUTH = {"authorization": "Bearer sk-test-wire-openai"}


@pytest.fixture()
def client(gateway: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test-wire-openai", max_retries=0) as c:
        yield c


def post(gateway: ServerProcess, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(gateway.url + "/v1/chat/completions", content=raw, timeout=10,
                      headers={"content-type": "application/json", **(AUTH if headers is None else headers)})


def assert_envelope(r: httpx.Response, status: int, etype: str, needle: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == etype and needle in err["message"]
    return err  # type: ignore[no-any-return]


def test_upstream_request_is_anthropic_with_x_api_key(sim: Sim, gateway: ServerProcess) -> None:
    r = post(gateway, {"model": MODEL, "messages": [{"role": "system", "content": "S"},
                                                    {"role": "user", "content": "hello"}],
                       "max_tokens": 300, "stop": ["\n\n"]})
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "chat.completion" and r.headers["x-ag-conversation-id"]
    last = sim.last()
    assert last["body"] == {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "system": "S",
                            "max_tokens": 300, "stop_sequences": ["\n\n"]}
    assert last["headers"]["x-api-key"] == "sk-test-wire-openai"
    assert last["headers"]["anthropic-version"] == "2023-06-01" and "authorization" not in last["headers"]


@pytest.mark.parametrize(("body", "needle"), [
    (b"{not json", "not valid JSON"),
    (b"", "empty"),
    ([1, 2], "JSON object"),
    ({"model": MODEL}, "messages"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "q"}], "temperature": "hot"}, "temperature"),
])
def test_bad_bodies_are_400_in_the_openai_envelope(gateway: ServerProcess, body: Any, needle: str) -> None:
    assert_envelope(post(gateway, body), 400, "invalid_request_error", needle)


def test_invalid_tool_arguments_are_a_clear_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "r"}])
    assert "messages.1.tool_calls.0.function.arguments" in info.value.message


@pytest.mark.parametrize("model", ["gpt-4o", "o3-mini"])  # no GATEWAY_OPENAI_BASE_URL (Gemini has a default)
def test_models_without_a_configured_upstream(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "q"}])
    assert info.value.code == "model_not_supported"
    assert f"no upstream configured for model {model}" in info.value.message


def test_upstream_errors_keep_status_and_message(client: openai.OpenAI, gateway: ServerProcess) -> None:
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "[[sim:fault=ratelimit:3]]"}])
    assert limited.value.status_code == 429 and "exceed the rate limit" in limited.value.message
    assert limited.value.response.headers["retry-after"] == "3"
    assert limited.value.body == {"message": limited.value.body["message"], "type": "rate_limit_error",  # type: ignore
                                  "param": None, "code": "rate_limit_error"}
    r = post(gateway, {"model": MODEL, "messages": [{"role": "user", "content": "[[sim:fault=overloaded]]"}]})
    assert_envelope(r, 529, "server_error", "Overloaded")
    unauthenticated = post(gateway, {"model": MODEL, "messages": [{"role": "user", "content": "q"}]}, headers={})
    assert_envelope(unauthenticated, 401, "authentication_error", "x-api-key")


def test_midstream_upstream_failure_raises_in_the_sdk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, stream=True, messages=[
        {"role": "user", "content": "[[sim:fault=midstream]] a longer answer please"}])
    got: list[Any] = []
    with pytest.raises(openai.APIError) as info:
        got.extend(stream)
    assert "Overloaded" in info.value.message and got, "content before the failure was relayed"


def test_method_and_unknown_paths_use_the_openai_envelope(gateway: ServerProcess) -> None:
    r = httpx.get(gateway.url + "/v1/chat/completions")
    assert r.status_code == 405 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_responses_shaped_body_is_answered_as_a_chat_completion(sim: Sim, gateway: ServerProcess) -> None:
    tool = WEATHER_TOOL["function"]
    body = {"model": MODEL, "instructions": "Be terse.", "max_output_tokens": 4000,
            "tools": [{"type": "function", **tool}],  # flat, no ``function`` wrapper
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "[[sim:tools=1]] weather?"}]}]}
    first = post(gateway, body)
    assert first.status_code == 200, first.text
    msg = first.json()["choices"][0]["message"]
    call = msg["tool_calls"][0]
    body["input"] += [{"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                       "arguments": call["function"]["arguments"]},
                      {"type": "function_call_output", "call_id": call["id"], "output": "sunny"}]
    second = post(gateway, body)
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["finish_reason"] == "stop"
    assert sim.last()["body"]["system"] == "Be terse."


def test_anthropic_tool_results_inside_openai_messages(gateway: ServerProcess) -> None:
    first = post(gateway, {"model": MODEL, "tools": [WEATHER_TOOL],
                           "messages": [{"role": "user", "content": "[[sim:tools=1]] mixed dialects"}]})
    msg = first.json()["choices"][0]["message"]
    results = [{"type": "tool_result", "tool_use_id": c["id"], "content": "ok"} for c in msg["tool_calls"]]
    second = post(gateway, {"model": MODEL, "tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "[[sim:tools=1]] mixed dialects"}, msg, {"role": "user", "content": results}]})
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["finish_reason"] == "stop"

"""One credential, one tenant (issue 22): the key a request is recorded under is the key it is billed to. A request
whose headers carry two different keys (``x-api-key`` and ``x-goog-api-key``, or a bearer token) is refused with a
400 in the client's dialect before anything reaches the upstream; the Gemini upstream gets the same key the tenant
was derived from."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.process_fixtures import ServerProcess, Sim

PROMPT = [{"role": "user", "content": "hi"}]


def test_two_keys_on_the_anthropic_surface_are_a_400(gateway: ServerProcess, sim: Sim) -> None:
    before = sim.stats()["requests"]
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-one", max_retries=0,
                             default_headers={"x-goog-api-key": "gk-two"}) as client, \
            pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="claude-opus-4-5", max_tokens=16, messages=PROMPT)  # type: ignore[arg-type]
    err = e.value.body["error"]  # type: ignore[index]
    assert err["type"] == "invalid_request_error" and "x-goog-api-key" in err["message"]
    assert "sk-ant-one" not in err["message"] and "gk-two" not in err["message"]  # the headers, never the keys
    assert sim.stats()["requests"] == before


@pytest.mark.parametrize("model", ["claude-opus-4-5", "claude-opus-5-5"], ids=["unbound", "bound"])
def test_two_keys_on_count_tokens_are_a_400(gateway: ServerProcess, model: str) -> None:
    """``count_tokens`` is billed too: the same rule, before anything is forwarded (the simulator would count)."""
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-one", max_retries=0,
                             default_headers={"x-goog-api-key": "gk-two"}) as client, \
            pytest.raises(anthropic.BadRequestError) as e:
        client.messages.count_tokens(model=model, messages=PROMPT)  # type: ignore[arg-type]
    err = e.value.body["error"]  # type: ignore[index]
    assert err["type"] == "invalid_request_error" and "x-goog-api-key" in err["message"]
    assert "sk-ant-one" not in err["message"] and "gk-two" not in err["message"]  # the headers, never the keys


def test_two_keys_on_the_openai_surface_are_a_400(gateway: ServerProcess, sim: Sim) -> None:
    before = sim.stats()["requests"]
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-bearer", max_retries=0,
                       default_headers={"x-api-key": "sk-other"}) as client, pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="claude-opus-4-5", messages=PROMPT)  # type: ignore[arg-type]
    assert "x-api-key and authorization" in e.value.body["message"]  # type: ignore[index]
    assert sim.stats()["requests"] == before


def test_two_keys_on_the_gemini_surface_are_a_400_in_googles_shape(gateway: ServerProcess, sim: Sim) -> None:
    before = sim.stats()["requests"]
    r = httpx.post(f"{gateway.url}/v1beta/models/gemini-3-pro-preview:generateContent",
                   headers={"x-api-key": "sk-one", "x-goog-api-key": "gk-two"},
                   json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["status"] == "INVALID_ARGUMENT" and "x-api-key and x-goog-api-key" in err["message"]
    assert sim.stats()["requests"] == before


def test_the_same_key_in_two_headers_is_one_credential(gateway: ServerProcess) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-same", max_retries=0,
                             default_headers={"authorization": "Bearer sk-same"}) as client:
        answer = client.messages.create(model="claude-opus-4-5", max_tokens=16,
                                        messages=PROMPT)  # type: ignore[arg-type]
    assert answer.content


def test_a_gemini_key_query_that_differs_from_the_header_key_is_a_400(gateway: ServerProcess, sim: Sim) -> None:
    """``?key=`` is forwarded with the query: beside a different header key, Google would bill one and thinkgate
    record under the other."""
    before = sim.stats()["requests"]
    r = httpx.post(f"{gateway.url}/v1beta/models/gemini-3-pro-preview:generateContent?key=gk-query",
                   headers={"x-goog-api-key": "gk-header"},
                   json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status_code == 400 and "?key= query and the headers" in r.json()["error"]["message"]
    assert sim.stats()["requests"] == before


@pytest.mark.parametrize("name", ["x-api-key", "authorization", "x-goog-api-key"])
def test_two_lines_of_one_credential_header_with_different_keys_are_a_400(
        gateway: ServerProcess, sim: Sim, name: str) -> None:
    """Issue 32, item 2: two lines of one header were joined and forwarded as ``kA, kB``."""
    before = sim.stats()["requests"]
    value = (lambda k: f"Bearer {k}") if name == "authorization" else (lambda k: k)
    raw = [(name.encode(), value("kA").encode()), (name.encode(), value("kB").encode())]
    r = httpx.post(f"{gateway.url}/v1/messages", headers=httpx.Headers(raw),
                   json={"model": "claude-opus-4-5", "max_tokens": 16, "messages": PROMPT})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and f"two {name} header lines" in err["message"]
    assert "kA" not in err["message"] and "kB" not in err["message"]
    assert sim.stats()["requests"] == before


def test_the_same_key_on_two_lines_is_one_credential(gateway: ServerProcess, sim: Sim) -> None:
    raw = [(b"x-api-key", b"sk-twice"), (b"x-api-key", b"sk-twice")]
    r = httpx.post(f"{gateway.url}/v1/messages", headers=httpx.Headers(raw),
                   json={"model": "claude-opus-4-5", "max_tokens": 16, "messages": PROMPT})
    assert r.status_code == 200, r.text
    assert sim.last()["headers"].get("x-api-key") == "sk-twice"


def test_two_different_gemini_key_queries_are_a_400(gateway: ServerProcess, sim: Sim) -> None:
    before = sim.stats()["requests"]
    r = httpx.post(f"{gateway.url}/v1beta/models/gemini-3-pro-preview:generateContent?key=kA&key=kB",
                   json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status_code == 400 and "two ?key= query parameters" in r.json()["error"]["message"]
    assert r.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert sim.stats()["requests"] == before

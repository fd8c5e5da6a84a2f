"""Issue 32 item 6: the simulator's fault and hold markers work on every profile, not only the Anthropic and Gemini
ones: the OpenAI-compatible chat profiles (OpenRouter, Copilot, DeepSeek, Gemini's OpenAI layer) and Responses, each
in its own error shape. Straight to the simulator (httpx), then one through the gateway: the fault reaches an
OpenAI SDK client as the dialect's error, never a traceback."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.process_fixtures import GatewayFactory, Sim
from tests.support.gemini.helpers import gateway_env

AUTH = {"authorization": "Bearer sk-faults"}
CHAT = {
    "openrouter": ("/openrouter/api/v1/chat/completions", "google/gemini-3-pro-preview"),
    "copilot": ("/copilot/chat/completions", "gemini-3-pro-preview"),
    "deepseek": ("/deepseek/v1/chat/completions", "deepseek-reasoner"),
    "gemini-openai": ("/v1beta/openai/chat/completions", "gemini-3-pro-preview"),
}
PROFILES = [*CHAT, "responses"]


def request(profile: str, marker: str, stream: bool) -> tuple[str, dict[str, Any]]:
    text = f"{marker} faults {uuid.uuid4().hex[:8]}"
    if profile == "responses":
        return "/openai/v1/responses", {"model": "gpt-5", "input": text, "stream": stream, "store": False}
    path, model = CHAT[profile]
    return path, {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}


@pytest.mark.parametrize("profile", PROFILES)
def test_overloaded_and_rate_limited_answer_in_the_openai_shape(sim: Sim, profile: str) -> None:
    path, body = request(profile, "[[sim:fault=overloaded]]", stream=False)
    r = httpx.post(sim.url + path, json=body, headers=AUTH)
    assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
    path, body = request(profile, "[[sim:fault=ratelimit:7]]", stream=True)
    r = httpx.post(sim.url + path, json=body, headers=AUTH)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize("profile", PROFILES)
def test_fault_times_limits_the_fault_to_the_first_requests(sim: Sim, profile: str) -> None:
    path, body = request(profile, "[[sim:fault=overloaded]] [[sim:fault_times=1]]", stream=False)
    assert httpx.post(sim.url + path, json=body, headers=AUTH).status_code == 503
    assert httpx.post(sim.url + path, json=body, headers=AUTH).status_code == 200


@pytest.mark.parametrize("profile", PROFILES)
def test_midstream_and_drop_cut_a_stream(sim: Sim, profile: str) -> None:
    path, body = request(profile, "[[sim:fault=midstream]]", stream=True)
    r = httpx.post(sim.url + path, json=body, headers=AUTH)
    assert r.status_code == 200 and "overloaded" in r.text.splitlines()[-2] + r.text.splitlines()[-1]
    assert "[DONE]" not in r.text and "response.completed" not in r.text
    path, body = request(profile, "[[sim:fault=drop]]", stream=True)
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(sim.url + path, json=body, headers=AUTH)


@pytest.mark.parametrize("profile", PROFILES)
def test_hold_pauses_a_stream_until_released(sim: Sim, profile: str) -> None:
    path, body = request(profile, "[[sim:hold]]", stream=True)
    first = threading.Event()
    chunks: list[bytes] = []

    def read() -> None:
        with httpx.stream("POST", sim.url + path, json=body, headers=AUTH, timeout=30) as r:
            for chunk in r.iter_raw():
                chunks.append(chunk)
                first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(10)
    deadline = threading.Event()
    while sim.stats()["streams_open"] == 0 and not deadline.wait(0.02):
        pass  # the stream is held by the simulator (polling another process: no event to await)
    held = b"".join(chunks)
    sim.release()
    reader.join(15)
    whole = b"".join(chunks)
    assert len(whole) > len(held) and (b"[DONE]" in whole or b"response.completed" in whole)


def test_a_fault_reaches_an_openai_client_through_the_gateway(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url, gateway_env(sim))
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-faults", max_retries=0) as c:
        def ask(marker: str) -> None:
            c.chat.completions.create(model="google/gemini-3-pro-preview",
                                      messages=[{"role": "user", "content": f"{marker} {uuid.uuid4()}"}])

        with pytest.raises(openai.InternalServerError) as e:
            ask("[[sim:fault=overloaded]]")
        assert e.value.status_code == 503
        with pytest.raises(openai.RateLimitError) as r:
            ask("[[sim:fault=ratelimit:3]]")
        assert r.value.response.headers["retry-after"] == "3"
    assert "Traceback" not in gw.log()

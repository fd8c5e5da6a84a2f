"""The official openai SDK -> real `thinkgate serve` -> the simulator's Gemini dialect (generateContent)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.process.observability.test_processes import scrape
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.gemini.helpers import GEMINI, Answer, Rejections, ask, gateway_env, run_loop


@pytest.fixture()
def gw(provider_gateway: ServerProcess) -> ServerProcess:
    return provider_gateway


@pytest.fixture()
def client(gw: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test-gemini", max_retries=0) as c:
        yield c


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_tool_loop_with_signatures_and_thoughts(client: openai.OpenAI, sim: Sim, stream: bool) -> None:
    with Rejections(sim):
        answers, _ = run_loop(lambda h: ask(client, GEMINI, h, stream=stream, reasoning_effort="low"),
                              "[[sim:tools=3]] [[sim:parallel=2]] weather in Paris and Rome?")
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 3 + ["stop"]
    for a in answers[:3]:
        calls = a.tool_calls
        assert len(calls) == 2 and len({c["id"] for c in calls}) == 2
        assert calls[0]["extra_content"]["google"]["thought_signature"], "the first call carries the signature"
        assert "extra_content" not in calls[1], "parallel calls after the first carry none"
        thought = a.message["reasoning_content"]
        assert "\r\n" in thought and "思考 🤔" in thought and thought != thought.strip()  # bytes intact
    final = answers[-1].message
    assert final["content"].startswith("Final answer after 3 tool rounds")
    assert final["extra_content"]["google"]["thought_signature"]
    body = sim.last()["body"]
    model_turns = [c for c in body["contents"] if c["role"] == "model"]
    assert len(model_turns) == 3
    for turn in model_turns:
        calls = [p for p in turn["parts"] if "functionCall" in p]
        assert calls[0]["thoughtSignature"] != "skip_thought_signature_validator", "restored, not bypassed"
        assert "thoughtSignature" not in calls[1]
        assert turn["parts"][0].get("thought") is True


def _replay_without_a_record(gw: ServerProcess, sim: Sim) -> tuple[Answer, dict[str, Any]]:
    """A history no record vouches for (another tenant's key replays it): the answer and the body the
    simulator received, which it accepted."""
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-a", max_retries=0) as a, \
            openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-b", max_retries=0) as b:
        history = [{"role": "user", "content": "[[sim:tools=2]] stateless"}]
        first = ask(a, GEMINI, history, stream=False)
        history += [first.message, {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "ok"}]
        with Rejections(sim):
            second = ask(b, GEMINI, history, stream=False)
    return second, sim.last()["body"]


def _calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for c in body["contents"] if c["role"] == "model" for p in c["parts"] if "functionCall" in p]


def _actions(gw: ServerProcess, action: str) -> float:
    return scrape(gw)["gateway_sanitize_actions_total"].get((("action", action), ("dialect", "openai")), 0.0)


def test_stateless_client_without_signatures_gets_the_bypass(gw: ServerProcess, sim: Sim) -> None:
    """The first call of each step of the current turn gets the documented bypass value, never
    another signature."""
    second, body = _replay_without_a_record(gw, sim)
    assert second.finish_reason == "tool_calls"
    assert _calls(body)[0]["thoughtSignature"] == "skip_thought_signature_validator"


def test_configured_bypass_value_is_sent_and_counted(gateways: GatewayFactory, sim: Sim) -> None:
    value = "context_engineering_is_the_way_to_go"
    gw = gateways.start(sim.url, gateway_env(sim, GATEWAY_GEMINI_SIGNATURE_BYPASS=value))
    second, body = _replay_without_a_record(gw, sim)
    assert second.finish_reason == "tool_calls"
    assert _calls(body)[0]["thoughtSignature"] == value
    assert _actions(gw, "signature_bypass") == 1


def test_bypass_off_sends_the_unsigned_step_as_text(gateways: GatewayFactory, sim: Sim) -> None:
    gw = gateways.start(sim.url, gateway_env(sim, GATEWAY_GEMINI_SIGNATURE_BYPASS="off"))
    second, body = _replay_without_a_record(gw, sim)
    assert second.finish_reason == "tool_calls"
    assert not _calls(body) and "functionResponse" not in str(body["contents"]), "no unsigned call goes upstream"
    model, result = body["contents"][1:3]
    assert [p["text"] for p in model["parts"] if not p.get("thought")][-1].startswith("[called tool get_weather ")
    assert result == {"role": "user", "parts": [{"text": "[tool result]\nok"}]}
    assert _actions(gw, "tool_loop_textualized") == 1 and _actions(gw, "signature_bypass") == 0


@pytest.mark.process
def test_an_undocumented_bypass_value_stops_the_server_at_startup() -> None:
    env = {**os.environ, "GATEWAY_GEMINI_SIGNATURE_BYPASS": "my-own-signature"}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "GATEWAY_GEMINI_SIGNATURE_BYPASS must be one of skip_thought_signature_validator, " \
           "context_engineering_is_the_way_to_go (the documented bypass values) or off" in out.stderr
    assert "Traceback" not in out.stderr


def test_upstream_error_keeps_the_openai_envelope(client: openai.OpenAI) -> None:
    history = [{"role": "user", "content": "[[sim:fault=overloaded]] hi"}]
    with pytest.raises(openai.APIStatusError) as e:
        ask(client, GEMINI, history, stream=False)
    assert e.value.status_code == 503
    assert e.value.body["message"] == "The model is overloaded. Please try again later."  # type: ignore[index]


def test_midstream_error_becomes_an_openai_error_chunk(client: openai.OpenAI) -> None:
    history = [{"role": "user", "content": "[[sim:fault=midstream]] [[sim:tools=1]] hi"}]
    with pytest.raises(openai.APIError):
        ask(client, GEMINI, history, stream=True)


def test_a_gemini_rate_limit_reaches_an_openai_client_with_retry_after(client: openai.OpenAI) -> None:
    """Google sends no ``retry-after``: the delay is a RetryInfo in the body. The OpenAI client (whose SDK
    backs off by the header) gets it as ``retry-after``, whole seconds, with the error in its envelope."""
    with pytest.raises(openai.RateLimitError) as e:
        ask(client, GEMINI, [{"role": "user", "content": "[[sim:fault=ratelimit:7]] hi"}], stream=False)
    assert e.value.response.headers["retry-after"] == "7"
    assert "You exceeded your current quota" in e.value.message
    assert e.value.body["type"] == "rate_limit_error"  # type: ignore[index]


@pytest.fixture(scope="module")
def retrying_gw(gateways: GatewayFactory, sim: Sim) -> ServerProcess:
    return gateways.start(sim.url, gateway_env(sim, GATEWAY_UPSTREAM_RETRIES="1",
                                               GATEWAY_UPSTREAM_RETRY_MAX_DELAY_S="5"))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_the_retry_policy_waits_the_delay_a_gemini_429_names(retrying_gw: ServerProcess, sim: Sim,
                                                              stream: bool) -> None:
    """Within the cap the gateway retries after the body's delay and the client sees only the answer;
    past the cap (30 s > 5 s) it does not wait: the 429 goes to the client at once, with its delay."""
    with openai.OpenAI(base_url=retrying_gw.url + "/v1", api_key="sk-test-gemini", max_retries=0) as c:
        before = sim.stats()
        answer = ask(c, GEMINI, [{"role": "user", "content": f"[[sim:fault=ratelimit:0]] [[sim:fault_times=1]] "
                                                             f"retry me {stream}"}], stream=stream)
        after = sim.stats()
        assert answer.finish_reason == "stop"
        assert (after["requests"] - before["requests"], after["faults"] - before["faults"]) == (2, 1)
        with pytest.raises(openai.RateLimitError) as e:
            ask(c, GEMINI, [{"role": "user", "content": f"[[sim:fault=ratelimit:30]] too long {stream}"}],
                stream=stream)
        assert e.value.response.headers["retry-after"] == "30"
        assert sim.stats()["requests"] - after["requests"] == 1, "no retry past the cap"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_gemini_connection_dropped_mid_body_is_a_clear_error(client: openai.OpenAI, sim: Sim, stream: bool) -> None:
    with pytest.raises(openai.APIError) as e:
        ask(client, GEMINI, [{"role": "user", "content": f"[[sim:fault=drop]] [[sim:tools=1]] hi {stream}"}],
            stream=stream)
    if not stream:
        assert isinstance(e.value, openai.APIStatusError) and e.value.status_code == 502
        assert "upstream connection failed" in e.value.message

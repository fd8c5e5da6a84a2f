"""Chat completions parameters on every route (issue 23, item 2), through the official openai SDK, a served
gateway and the simulator: what the upstream received (``Sim.last()``) for each parameter class of the table
(``gateway.dialects.routing``, docs/endpoints.md, "Parameters"): passed, mapped, refused, and dropped by the switch
(GATEWAY_DROP_UNSUPPORTED_PARAMS=true: counted in ``/metrics`` and logged by name, never by value)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.gemini.helpers import CLAUDE, COPILOT, DEEPSEEK, GEMINI_COMPAT, OPENROUTER, gateway_env

GEMINI = "gemini-3-pro-preview"  # the native Gemini upstream (generateContent)
COMPAT = {"openrouter": OPENROUTER, "copilot": COPILOT, "deepseek": DEEPSEEK, "generic": GEMINI_COMPAT}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                         "parameters": SCHEMA, "strict": True}}
# parameters each cross-dialect route cannot honour (docs/endpoints.md, "Parameters")
REFUSED = {"anthropic": {"seed": 7, "logit_bias": {"50256": -100}, "prediction": {"type": "content", "content": "x"},
                         "store": True, "metadata": {"run": "r1"}},
           "gemini": {"logit_bias": {"50256": -100}, "parallel_tool_calls": False, "verbosity": "low",
                      "user": "u-1", "store": True}}
MODELS = {"anthropic": CLAUDE, "gemini": GEMINI}


def ask(gw: ServerProcess, model: str, **params: Any) -> Any:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test-params", max_retries=0) as client:
        answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "weather?"}],
                                                **params)
        return list(answer) if params.get("stream") else answer  # (a stream is read while the client is open)


@pytest.fixture(scope="module")
def dropping(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    return gateways.start(sim.url, gateway_env(sim, GATEWAY_DROP_UNSUPPORTED_PARAMS="true", GATEWAY_LOG_LEVEL="INFO"))


@pytest.fixture()
def gw(provider_gateway: ServerProcess) -> Iterator[ServerProcess]:
    yield provider_gateway


# ---------------------------------------------------------------- passed


@pytest.mark.parametrize("flavor", list(COMPAT))
def test_same_dialect_passes_the_clients_fields_as_received(gw: ServerProcess, sim: Sim, flavor: str) -> None:
    params: dict[str, Any] = {
        "reasoning_effort": "low", "response_format": RESPONSE_FORMAT, "parallel_tool_calls": True, "seed": 7,
        "logit_bias": {"50256": -100}, "frequency_penalty": 0.5, "presence_penalty": 0.25, "service_tier": "flex",
        "store": False, "metadata": {"run": "r1"}, "prediction": {"type": "content", "content": "x"},
        "verbosity": "low", "max_completion_tokens": 900, "tools": [TOOL], "user": "u-1",
        "extra_body": {"provider": {"order": ["Google"]}}}
    ask(gw, COMPAT[flavor], **params)
    body = sim.last()["body"]
    sent = {k: v for k, v in params.items() if k != "extra_body"} | params["extra_body"]
    for key, value in sent.items():
        assert body.get(key) == value, f"{key} reaches the {flavor} upstream as received"
    # (the SDK orders a body's keys its own way: the client's order is checked by the encoder's unit test)
    assert "max_tokens" not in body, "no default limit next to the client's max_completion_tokens"


def test_a_responses_shaped_chat_body_reaches_a_chat_upstream_as_the_chat_body_it_stands_for(
        gw: ServerProcess, sim: Sim) -> None:
    """Cursor posts Responses-shaped bodies (``input``, ``instructions``) to chat completions: a chat upstream gets the
    chat body they stand for, with the fields that rewrite keeps as received, never the Responses fields themselves."""
    body = {"model": COMPAT["openrouter"], "instructions": "Be terse.", "temperature": 0.3, "user": "u-1",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]}]}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-test-params"})
    assert r.status_code == 200, r.text
    sent = sim.last()["body"]
    assert "input" not in sent and "instructions" not in sent, sorted(sent)
    assert sent["messages"][0] == {"role": "system", "content": "Be terse."} and sent["messages"][-1]["role"] == "user"
    assert (sent["temperature"], sent["user"]) == (0.3, "u-1")


@pytest.mark.parametrize("route", ["anthropic"])
def test_anthropic_passes_its_own_fields(gw: ServerProcess, sim: Sim, route: str) -> None:
    ask(gw, MODELS[route], max_tokens=300, temperature=0.4, top_p=0.9, extra_body={"top_k": 5})
    body = sim.last()["body"]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (300, 0.4, 0.9, 5)


# ---------------------------------------------------------------- mapped


@pytest.mark.parametrize("flavor", list(COMPAT))
def test_same_dialect_stream_options_keep_the_clients_and_get_usage(gw: ServerProcess, sim: Sim,
                                                                      flavor: str) -> None:
    chunks = ask(gw, COMPAT[flavor], stream=True, stream_options={"include_usage": False,
                                                                  "include_obfuscation": False})
    assert chunks and all(c.usage is None for c in chunks), "the client asked for no usage chunk"
    assert sim.last()["body"]["stream_options"] == {"include_usage": False, "include_obfuscation": False} | {
        "include_usage": True}


def test_anthropic_maps_structured_output_and_the_rest(gw: ServerProcess, sim: Sim) -> None:
    answer = ask(gw, CLAUDE, response_format=RESPONSE_FORMAT, tools=[TOOL], max_completion_tokens=700,
                 safety_identifier="s-1", service_tier="default", stop="END")
    assert answer.choices[0].finish_reason in ("stop", "tool_calls")
    body = sim.last()["body"]
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert body["tools"][0]["strict"] is True and body["max_tokens"] == 700
    assert body["metadata"] == {"user_id": "s-1"} and body["service_tier"] == "standard_only"
    assert body["stop_sequences"] == ["END"]
    assert not {"response_format", "max_completion_tokens", "safety_identifier", "stop"} & set(body)


def test_gemini_maps_structured_output_seed_and_penalties(gw: ServerProcess, sim: Sim) -> None:
    ask(gw, GEMINI, response_format=RESPONSE_FORMAT, seed=3, frequency_penalty=0.5, presence_penalty=0.25,
        max_completion_tokens=600)
    gen = sim.last()["body"]["generationConfig"]
    assert (gen["responseMimeType"], gen["responseJsonSchema"]) == ("application/json", SCHEMA)
    assert (gen["seed"], gen["frequencyPenalty"], gen["presencePenalty"], gen["maxOutputTokens"]) == (3, 0.5, 0.25, 600)


# ---------------------------------------------------------------- refused


@pytest.mark.parametrize("route", ["anthropic", "gemini", *COMPAT])
def test_what_an_upstream_cannot_honour_is_a_400_naming_it(gw: ServerProcess, sim: Sim, route: str) -> None:
    model = MODELS.get(route) or COMPAT[route]
    params = REFUSED.get(route, {"n": 2})  # one choice per answer: n > 1 on every route
    before = sim.stats()["requests"]
    with pytest.raises(openai.BadRequestError) as info:
        ask(gw, model, **params)
    assert info.value.code == "unsupported_parameter"
    named = re.search(r"\): (.*?)\. ", info.value.message)
    assert named is not None and sorted(named.group(1).split(", ")) == sorted(params), info.value.message
    assert "GATEWAY_DROP_UNSUPPORTED_PARAMS" in info.value.message
    assert sim.stats()["requests"] == before, "nothing went upstream"


# ---------------------------------------------------------------- dropped by the switch


@pytest.mark.parametrize("route", ["anthropic", "gemini", *COMPAT])
def test_the_switch_drops_counts_and_logs_them_by_name(dropping: ServerProcess, sim: Sim, route: str) -> None:
    model = MODELS.get(route) or COMPAT[route]
    params = REFUSED.get(route, {"n": 2})
    label = route if route in MODELS else "openai"
    counted = {name: _dropped(dropping, name, label) for name in params}
    ask(dropping, model, **params)
    body = sim.last()["body"]
    assert not set(params) & set(body) and not set(params) & set(body.get("generationConfig") or {})
    for name in params:
        assert _dropped(dropping, name, label) == counted[name] + 1, name
    line = next(line for line in reversed(dropping.log().splitlines()) if "GATEWAY_DROP_UNSUPPORTED_PARAMS" in line)
    assert all(name in line for name in params) and "50256" not in line and "r1" not in line


def _dropped(gw: ServerProcess, param: str, route: str) -> float:
    text = httpx.get(gw.url + "/metrics", timeout=5).text
    found = re.search(rf'^gateway_params_dropped_total\{{(?=[^}}]*param="{param}")(?=[^}}]*route="{route}")[^}}]*\}} '
                      r"(\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


# ---------------------------------------------------------------- byte for byte (issue 33 item 3)

# the client's own formatting of fields thinkgate passes: a number form orjson would not write, ASCII escapes,
# spacing, a key order of its own inside an object (raw bytes: an SDK writes its own canonical JSON)
ODD_FIELDS = (b'"temperature" : 0.50, "metadata": {"z": "\\u00e9t\\u00e9", "a": 1E2}, '
              b'"logit_bias": { "50256" : -100 }')


def _raw_chat(gw: ServerProcess, model: str, messages: list[Any], fields: bytes) -> dict[str, Any]:
    body = b'{"model": "' + model.encode() + b'", ' + fields + b', "messages": ' + json.dumps(messages).encode() + \
        b', "tools": ' + json.dumps([TOOL]).encode() + b'}'
    r = httpx.post(gw.url + "/v1/chat/completions", content=body, timeout=30,
                   headers={"authorization": "Bearer sk-test-bytes", "content-type": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("flavor", ["openrouter", "deepseek"])
def test_a_same_dialect_loop_sends_the_clients_fields_byte_for_byte(gw: ServerProcess, sim: Sim, flavor: str) -> None:
    """A mangled chat loop to an upstream of the client's own dialect: the repaired messages are spliced in, the
    client's other fields reach the upstream as the bytes the client wrote."""
    messages: list[Any] = [{"role": "user", "content": "[[sim:tools=2]] weather in Paris?"}]
    first = _raw_chat(gw, COMPAT[flavor], messages, ODD_FIELDS)["choices"][0]["message"]
    assert first.get("tool_calls"), first
    mangled = {"role": "assistant", "content": first.get("content"), "tool_calls": first["tool_calls"]}
    messages += [mangled, *({"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in first["tool_calls"])]
    _raw_chat(gw, COMPAT[flavor], messages, ODD_FIELDS)  # the strict upstream accepted the repaired history
    last = httpx.get(sim.url + "/_sim/last", params={"raw": "1"}).json()
    for field in ODD_FIELDS.split(b", "):
        if field.startswith(b'"metadata"'):
            field = ODD_FIELDS[ODD_FIELDS.index(b'{"z"'):ODD_FIELDS.index(b"}") + 1]
        assert field.split(b":", 1)[1].strip().decode() in last["raw"], field
    sent = last["body"]["messages"][1]
    assert any(k in sent for k in ("reasoning_details", "reasoning_content")), "the dropped reasoning is restored"

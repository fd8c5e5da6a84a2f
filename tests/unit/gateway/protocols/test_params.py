"""The chat completions parameter table (``gateway.dialects.routing``) and the encoders that apply it (pure):
passed as received to an OpenAI-compatible upstream of every flavor, mapped to Anthropic and Gemini, refused
(a 400 naming them) or, with the switch, dropped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import JSON
from gateway.dialects.gemini import wire as gemini
from gateway.dialects.openai_chat.codec import decode_request
from gateway.dialects.openai_compat import wire as openai_compat
from gateway.dialects.routing import BY_NAME, FLAVORS, PARAMS, REFUSABLE, ModelCaps, markdown_table, unsupported
from gateway.errors import ClientError

README = Path(__file__).resolve().parents[4] / "docs" / "endpoints.md"  # (its Parameters table)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}
# what the issue found lost on the way to an OpenRouter-style upstream, plus a vendor field nobody knows
CLIENT_ONLY = {"response_format": JSON_SCHEMA, "parallel_tool_calls": True, "seed": 7, "logit_bias": {"50256": -100},
               "frequency_penalty": 0.5, "presence_penalty": 0.25, "service_tier": "flex", "store": True,
               "metadata": {"run": "a"}, "prediction": {"type": "content", "content": "x"}, "verbosity": "low",
               "logprobs": True, "top_logprobs": 2, "prompt_cache_key": "k1", "provider": {"order": ["x"]}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "d", "strict": True,
                                         "parameters": SCHEMA}}


def chat(model: str = "m", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "weather?"}], **fields}


def compat(body: dict[str, Any], flavor: str) -> dict[str, JSON]:
    req = decode_request(body, provider_fields=True, route="openai")  # (the client's fields: the same dialect)
    return openai_compat.encode_request(req, ModelCaps(flavor, kind="openai", flavor=flavor), req.surface.kept(body))


# ---------------------------------------------------------------- the table


def test_readme_table_is_the_codes_table() -> None:
    text = README.read_text()
    found = re.search(r"<!-- params:begin -->\n(.*?)<!-- params:end -->", text, re.S)
    assert found is not None, "README has the Parameters table between its markers"
    assert found.group(1) == markdown_table()


def test_every_refusable_parameter_is_a_metric_label() -> None:
    for p in PARAMS:
        if "refused" in (p.anthropic, p.gemini) or p.maps_only:
            assert p.name in REFUSABLE
    assert "other" in REFUSABLE and "model" not in REFUSABLE


def test_values_that_ask_for_nothing_are_never_refused() -> None:
    body = chat(store=False, n=1, logprobs=False, frequency_penalty=0, presence_penalty=0, service_tier="auto",
                verbosity="medium", metadata={}, logit_bias={}, modalities=["text"], parallel_tool_calls=True,
                response_format={"type": "text"})
    assert unsupported(body, "anthropic") == []
    assert unsupported({k: v for k, v in body.items() if k != "parallel_tool_calls"}, "gemini") == []


# ---------------------------------------------------------------- passed: the same dialect


@pytest.mark.parametrize("flavor", FLAVORS)
def test_same_dialect_passes_every_field_as_received_in_order(flavor: str) -> None:
    body = chat(**CLIENT_ONLY, reasoning_effort="high", tools=[TOOL], tool_choice="auto", temperature=0.3,
                max_completion_tokens=900, stop="END", user="u-1", n=1, stream=True,
                stream_options={"include_usage": False, "include_obfuscation": False})
    out = compat(body, flavor)
    assert list(out) == list(body), "the client's keys, in its order, and nothing added"
    for key, value in body.items():
        if key not in ("messages", "stream_options"):
            assert out[key] == value, key
    assert out["stream_options"] == {"include_usage": True, "include_obfuscation": False}
    assert out["reasoning_effort"] == "high", f"{flavor} gets the client's reasoning_effort"


def test_openrouter_reasoning_passes_without_exclude_and_flavors_get_their_parameter() -> None:
    out = compat(chat(reasoning={"effort": "low", "exclude": True}), "openrouter")
    assert out["reasoning"] == {"effort": "low"}, "exclude is answered by thinkgate (it records the reasoning)"
    assert "reasoning_effort" not in out
    # a client enabling thinking in a form the flavor does not read: the flavor's own parameter is added
    out = compat(chat(thinking={"type": "enabled", "budget_tokens": 4000}), "openrouter")
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 4000} and out["reasoning"] == {"max_tokens": 4000}


def test_reasoning_fields_follow_the_thinking_config_after_repair() -> None:
    body = chat(reasoning_effort="high", seed=1)
    req = decode_request(body, provider_fields=True, route="openai")
    req.thinking = None  # repair turned thinking off
    out = openai_compat.encode_request(req, ModelCaps("copilot", kind="openai", flavor="copilot"), body)
    assert "reasoning_effort" not in out and out["seed"] == 1
    off = compat(chat(reasoning_effort="none"), "generic")
    assert off["reasoning_effort"] == "none", "a field that says off passes as received"


def test_tools_in_another_dialects_form_are_sent_in_the_openai_form() -> None:
    out = compat(chat(tools=[{"type": "function", "name": "g", "parameters": {"properties": {}}}],
                      tool_choice={"type": "any"}), "generic")
    assert out["tools"] == [{"type": "function", "function": {"name": "g", "parameters": {
        "type": "object", "properties": {}}}}]
    assert out["tool_choice"] == "required"


def test_default_max_tokens_is_not_added_next_to_max_completion_tokens() -> None:
    assert "max_tokens" not in compat(chat(max_completion_tokens=50), "generic")
    assert compat(chat(), "generic")["max_tokens"] == 8192  # as before when the client sets no limit


# ---------------------------------------------------------------- mapped: Anthropic and Gemini


def test_anthropic_mapping() -> None:
    req = decode_request(chat("claude-sonnet-4-5", response_format=JSON_SCHEMA, tools=[TOOL], service_tier="default",
                              safety_identifier="s-1", max_completion_tokens=700, stop=["X"]), route="anthropic")
    out = anthropic.encode_request(req)
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert out["tools"][0]["strict"] is True and out["tools"][0]["input_schema"] == SCHEMA
    assert out["service_tier"] == "standard_only" and out["metadata"] == {"user_id": "s-1"}
    assert out["max_tokens"] == 700 and out["stop_sequences"] == ["X"]
    assert "response_format" not in out and "safety_identifier" not in out


def test_gemini_mapping() -> None:
    body = chat("gemini-3-pro-preview", response_format=JSON_SCHEMA, seed=3, frequency_penalty=0.5,
                presence_penalty=0.25, max_completion_tokens=600)
    req = decode_request(body, route="gemini")
    gen = gemini.encode_request(req, chat=body)["generationConfig"]
    assert gen == {"maxOutputTokens": 600, "seed": 3, "presencePenalty": 0.25, "frequencyPenalty": 0.5,
                   "responseMimeType": "application/json", "responseJsonSchema": SCHEMA}
    body = chat("gemini-3-pro-preview", response_format={"type": "json_object"})
    req = decode_request(body, route="gemini")
    assert gemini.encode_request(req, chat=body)["generationConfig"]["responseMimeType"] == "application/json"


# ---------------------------------------------------------------- refused, and dropped by the switch


@pytest.mark.parametrize(("route", "refused"), [
    ("anthropic", ["seed", "logit_bias", "frequency_penalty", "presence_penalty", "service_tier", "store",
                   "metadata", "prediction", "verbosity", "logprobs", "top_logprobs", "prompt_cache_key", "provider"]),
    ("gemini", ["parallel_tool_calls", "logit_bias", "service_tier", "store", "metadata", "prediction", "verbosity",
                "logprobs", "top_logprobs", "prompt_cache_key", "provider"]),
])
def test_refused_parameters_are_a_400_naming_them(route: str, refused: list[str]) -> None:
    body = chat("claude-sonnet-4-5" if route == "anthropic" else "gemini-3-pro-preview",
                **{**CLIENT_ONLY, "parallel_tool_calls": False})
    with pytest.raises(ClientError) as info:
        decode_request(body, route=route)  # type: ignore[arg-type]
    assert info.value.status == 400 and info.value.code == "unsupported_parameter"
    named = info.value.message.split(": ", 1)[1].split(". ", 1)[0].split(", ")
    assert named == [k for k in body if k in refused] and "GATEWAY_DROP_UNSUPPORTED_PARAMS" in info.value.message


def test_anthropic_refuses_json_object_and_other_service_tiers() -> None:
    assert unsupported(chat(response_format={"type": "json_object"}, service_tier="priority"), "anthropic") == [
        "response_format", "service_tier"]
    assert unsupported(chat(response_format={"type": "json_object"}), "gemini") == []


def test_the_switch_drops_refused_parameters_and_lists_them() -> None:
    body = chat("claude-sonnet-4-5", seed=1, logit_bias={"1": 2}, temperature=0.5, n=2)
    req = decode_request(body, route="anthropic", drop_unsupported=True)
    assert req.surface.dropped_params == ("seed", "logit_bias", "n")
    out = anthropic.encode_request(req)
    assert out["temperature"] == 0.5 and not {"seed", "logit_bias", "n"} & set(out)
    body = chat(n=3, seed=1)
    req = decode_request(body, route="openai", drop_unsupported=True)
    caps = ModelCaps("openai", kind="openai", flavor="generic")
    out = openai_compat.encode_request(req, caps, req.surface.kept(body))
    assert "n" not in out and out["seed"] == 1, "what the switch dropped is not passed either"


def test_n_above_one_is_refused_on_every_route() -> None:
    for route in ("openai", "anthropic", "gemini"):
        with pytest.raises(ClientError, match="n"):
            decode_request(chat(n=2), route=route)  # type: ignore[arg-type]
    assert BY_NAME["n"].openai == "refused"

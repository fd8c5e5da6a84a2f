"""``protocols.usage``: each upstream dialect's usage report in canonical (Anthropic) terms, and the token kinds the
metrics count; ``routing.model_label``: the closed model label."""

from __future__ import annotations

import json

from gateway.dialects.canonical import REASONING, from_gemini, from_openai, token_counts
from gateway.dialects.gemini import wire as gemini
from gateway.dialects.openai_compat import wire as openai_compat
from gateway.dialects.openai_compat.wire import CompatTranslator
from gateway.dialects.routing import MODEL_LABELS, model_label


def test_openai_usage_splits_cached_prompt_tokens_and_keeps_the_reasoning_share() -> None:
    u = {"prompt_tokens": 125, "completion_tokens": 48, "total_tokens": 173,
         "prompt_tokens_details": {"cached_tokens": 98}, "completion_tokens_details": {"reasoning_tokens": 30}}
    canonical = from_openai(u)
    assert canonical == {"input_tokens": 27, "cache_read_input_tokens": 98, "output_tokens": 48, REASONING: 30}
    assert token_counts(canonical) == {"input": 27, "output": 48, "cache_read": 98, "reasoning": 30}
    assert token_counts(from_openai({"prompt_tokens": 3, "completion_tokens": 4})) == {"input": 3, "output": 4}
    assert from_openai(None) == {"input_tokens": 0, "output_tokens": 0}
    assert from_openai({"prompt_tokens": "x", "completion_tokens": -1}) == {"input_tokens": 0, "output_tokens": 0}


def test_gemini_usage_metadata_counts_cached_and_thought_tokens() -> None:
    meta = {"promptTokenCount": 31, "cachedContentTokenCount": 11, "candidatesTokenCount": 22,
            "thoughtsTokenCount": 17, "totalTokenCount": 70}
    assert token_counts(gemini.usage(meta)) == {"input": 20, "output": 39, "cache_read": 11, "reasoning": 17}
    assert token_counts(from_gemini({"promptTokenCount": 5, "candidatesTokenCount": 2})) == \
        {"input": 5, "output": 2, "cache_read": 0}


def test_anthropic_usage_is_canonical_already() -> None:
    u = {"input_tokens": 57, "output_tokens": 120, "cache_read_input_tokens": 9, "cache_creation_input_tokens": 3}
    assert token_counts(u) == {"input": 57, "output": 120, "cache_read": 9, "cache_write": 3}
    assert token_counts("nonsense") == {}


def test_openai_compatible_answers_and_streams_carry_the_details_into_the_turn() -> None:
    u = {"prompt_tokens": 10, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 4},
         "completion_tokens_details": {"reasoning_tokens": 6}}
    body = {"id": "c1", "model": "deepseek-reasoner", "usage": u,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    turn = openai_compat.decode_turn(body, origin="deepseek/deepseek-reasoner", model="deepseek-reasoner")
    assert token_counts(turn.usage) == {"input": 6, "output": 20, "cache_read": 4, "reasoning": 6}
    t = CompatTranslator(origin="deepseek/deepseek-reasoner", model="deepseek-reasoner")
    events = t.feed('{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}')
    events += t.feed('{"id":"c1","choices":[],"usage":' + json.dumps(u) + "}") + t.feed("[DONE]")
    delta = next(e for e in events if e["type"] == "message_delta")
    assert token_counts(delta["usage"]) == {"input": 6, "output": 20, "cache_read": 4, "reasoning": 6}


def test_model_label_is_a_closed_family_never_the_clients_text() -> None:
    assert model_label("claude-opus-4-5") == "claude-opus"
    assert model_label("claude-3-5-sonnet-20241022") == "claude-sonnet"
    assert model_label("claude-sonnet-4-5@20250929") == "claude-sonnet"
    assert model_label("claude-haiku-4-5") == "claude-haiku"
    assert model_label("gemini-3-pro-preview") == "gemini-pro"
    assert model_label("gemini-2.5-flash-lite") == "gemini-flash-lite"
    assert model_label("google/gemini-3-pro-preview") == "gemini-pro"
    assert model_label("openai/gpt-5") == "gpt" and model_label("o3-mini") == "openai-o"
    assert model_label("deepseek-reasoner") == "deepseek-reasoner" and model_label("deepseek-chat") == "deepseek"
    for text in ("sk-ant-api03-secret", "llama-3-70b", "", None, 42, "x" * 10_000, "claude"):
        assert model_label(text) == "other"
    assert all(label in MODEL_LABELS for label in map(model_label, ("claude-opus-99", "gemini-9-ultra", "o9")))

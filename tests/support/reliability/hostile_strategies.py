"""Hypothesis strategies for request bodies of the non-Anthropic client dialects, shaped like the real
thing (so they get past the first checks) with any field allowed to be missing or of the wrong type.

The Anthropic-shaped ``bodies()`` and the ``json_values`` leaves come from the pure-pipeline fuzz
(``tests/unit/gateway/test_pipeline_fuzz.py``); these reuse its leaves. ``BODIES`` maps each HTTP
endpoint the fuzz drives to (path strategy, error dialect, body strategy).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.support.reliability.hostile import MODEL
from tests.unit.gateway.test_pipeline_fuzz import bodies, json_values

GEMINI_MODEL = "gemini-3-pro-preview"
short = st.text(max_size=12)
ids = st.sampled_from(["call_1", "call_2", "toolu_x", "", "x" * 80])


@st.composite
def shaped(draw: st.DrawFn, fields: dict[str, st.SearchStrategy[Any]], required: tuple[str, ...] = ()) -> Any:
    """A dict with each of ``fields`` (required ones almost always), one in ~12 of the wrong type,
    and now and then no dict at all."""
    if draw(st.integers(0, 40)) == 7:  # never the shrink target 0: shrinking heads for well-shaped bodies
        return draw(json_values)
    out: dict[str, Any] = {}
    for key, strategy in fields.items():
        if (key in required and draw(st.integers(0, 20)) != 7) or draw(st.integers(0, 2)) == 2:
            out[key] = draw(json_values) if draw(st.integers(0, 19)) == 7 else draw(strategy)
    return out


@st.composite
def mostly(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """``good``, and one time in ten ``bad``."""
    return draw(bad) if draw(st.integers(0, 9)) == 7 else draw(good)


def _lists(inner: st.SearchStrategy[Any], max_size: int = 4) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=max_size)


# ---------------------------------------------------------------- OpenAI chat completions

openai_tool_call = shaped({"id": ids, "type": st.sampled_from(["function", "custom"]), "function": shaped(
    {"name": short, "arguments": st.sampled_from(["{}", '{"city": "Paris"}', "{", "[]", "null"]) | short},
    ("name", "arguments"))}, ("id", "type", "function"))
openai_part = shaped({"type": st.sampled_from(["text", "text", "image_url", "input_audio", "thinking"]),
                      "text": short, "image_url": shaped({"url": st.sampled_from(["data:image/png;base64,AA",
                                                                                  "https://x", ""])}),
                      "thinking": short, "signature": short}, ("type",))
openai_message = shaped({
    "role": mostly(st.sampled_from(["user", "assistant", "tool", "user", "assistant", "system", "developer"]),
                   st.sampled_from(["function", ""])),
    "content": mostly(short | _lists(openai_part), st.none()),
    "tool_calls": _lists(openai_tool_call, 3),
    "tool_call_id": ids,
    "reasoning_content": short,
    "reasoning_details": _lists(shaped({"type": st.sampled_from(["reasoning.text", "reasoning.encrypted"]),
                                        "text": short, "signature": short, "data": short})),
    "name": short,
}, ("role", "content", "tool_call_id"))
openai_bodies = shaped({
    "model": st.sampled_from([MODEL, "claude-opus-4-7", GEMINI_MODEL, "gpt-unknown"]),
    "messages": st.lists(openai_message, min_size=1, max_size=6),
    "stream": st.booleans(),
    "max_tokens": st.integers(-1, 10**9),
    "max_completion_tokens": st.integers(-1, 10**6),
    "reasoning_effort": st.sampled_from(["low", "medium", "high", "none", ""]),
    "temperature": st.floats(allow_nan=False),
    "n": mostly(st.just(1), st.just(2)),
    "tools": _lists(shaped({"type": st.just("function"), "function": shaped(
        {"name": short, "parameters": st.just({"type": "object"}) | json_values})}), 2),
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | json_values,
    "stream_options": shaped({"include_usage": st.booleans()}),
}, ("model", "messages"))


# ---------------------------------------------------------------- Augment chat-stream

augment_request_node = shaped({
    "id": st.integers(0, 5), "type": st.integers(-1, 11),
    "text_node": shaped({"content": short}),
    "tool_result_node": shaped({"tool_use_id": ids, "content": short | json_values, "is_error": st.booleans(),
                                "content_nodes": _lists(shaped({"type": st.integers(0, 3),
                                                                "text_content": short}), 2)}),
    "image_node": shaped({"image_data": st.sampled_from(["", "AAAA"]), "format": st.integers(-1, 4)}),
}, ("type",))
augment_response_node = shaped({
    "id": st.integers(0, 5), "type": st.sampled_from([0, 2, 5, 7, 8, 10, 99]), "content": short,
    "tool_use": shaped({"tool_use_id": ids, "tool_name": short,
                        "input_json": st.sampled_from(["{}", '{"a": 1}', "{", "[1]"]) | short}),
    "thinking": shaped({"summary": short, "signature": short}),
}, ("type",))
augment_exchange = shaped({
    "request_message": short, "response_text": short,
    "request_nodes": _lists(augment_request_node, 3), "response_nodes": _lists(augment_response_node, 3),
}, ("request_message", "response_text"))
augment_bodies = shaped({
    "model": st.sampled_from([MODEL, "claude-opus-4-7", GEMINI_MODEL]),
    "message": mostly(st.text(min_size=1, max_size=12), st.just("")),
    "chat_history": _lists(augment_exchange, 4),
    "nodes": _lists(augment_request_node, 3),
    "conversation_id": short,
    "max_tokens": st.integers(-1, 10**9),
    "thinking": st.none() | st.sampled_from([{"type": "enabled", "budget_tokens": 2048}, {"type": "disabled"}]),
    "tool_definitions": _lists(shaped({"name": short, "description": short,
                                       "input_schema_json": st.sampled_from(["{}", '{"type": "object"}', "{"])}), 2),
    "system": short,
}, ("model", "message"))


# ---------------------------------------------------------------- Gemini generateContent

gemini_part = shaped({
    "text": short, "thought": st.booleans(), "thoughtSignature": st.sampled_from(["", "c2ln", "!!"]) | short,
    "functionCall": shaped({"name": short, "args": json_values, "id": ids}, ("name",)),
    "functionResponse": shaped({"name": short, "response": json_values, "id": ids}, ("name",)),
    "inlineData": shaped({"mimeType": st.just("image/png"), "data": st.sampled_from(["", "AAAA"])}),
})
gemini_content = shaped({"role": mostly(st.sampled_from(["user", "model"]), st.sampled_from(["function", "system"])),
                         "parts": st.lists(gemini_part, min_size=1, max_size=4)}, ("role", "parts"))
gemini_bodies = shaped({
    "contents": st.lists(gemini_content, min_size=1, max_size=6) | gemini_content,
    "systemInstruction": shaped({"parts": _lists(gemini_part, 2)}),
    "generationConfig": shaped({"maxOutputTokens": st.integers(-1, 10**9), "temperature": st.floats(allow_nan=False),
                                "thinkingConfig": shaped({"thinkingBudget": st.integers(-2, 10**6),
                                                          "includeThoughts": st.booleans(),
                                                          "thinkingLevel": st.sampled_from(["low", "high", "x"])})}),
    "tools": _lists(shaped({"functionDeclarations": _lists(shaped({"name": short, "parameters": json_values}), 2)}),
                    2),
    "toolConfig": shaped({"functionCallingConfig": shaped({"mode": st.sampled_from(["AUTO", "ANY", "NONE", "?"])})}),
}, ("contents",))
gemini_paths = st.builds(lambda model, action, sse: f"/v1beta/models/{model}:{action}" + ("?alt=sse" if sse else ""),
                         st.sampled_from([GEMINI_MODEL, GEMINI_MODEL, MODEL, "x"]),
                         st.sampled_from(["generateContent", "streamGenerateContent"]), st.booleans())

BODIES: dict[str, tuple[st.SearchStrategy[str], str, st.SearchStrategy[Any]]] = {
    "messages": (st.just("/v1/messages"), "anthropic", bodies()),
    "chat_completions": (st.just("/v1/chat/completions"), "openai", openai_bodies),
    "chat_stream": (st.just("/gateway/chat-stream"), "anthropic", augment_bodies),
    "generate_content": (gemini_paths, "gemini", gemini_bodies),
}

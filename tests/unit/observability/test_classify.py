"""The upstream-error classifier against every real error text of the protocol reference,
bare and in the envelopes upstreams and routers wrap them in."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gateway.dialects.classify import KINDS, PATTERNS, SIGNATURE_KINDS, classify, classify_event

# (case id, verbatim message from /work/shared/reference/protocols.md, expected kind)
ANTHROPIC: list[tuple[str, str, str]] = [
    ("E1-text", "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When "
     "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost "
     "set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. "
     "To avoid this requirement, disable `thinking`. Please consult our documentation at "
     "https://docs.claude.com/en/docs/build-with-claude/extended-thinking", "first_block_not_thinking"),
    ("E1-tool_use", "messages.3.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. "
     "When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
     "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous "
     "turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
     "https://docs.claude.com/en/docs/build-with-claude/extended-thinking", "first_block_not_thinking"),
    ("E1-no-backticks", "messages.1.content.0.type: Expected thinking or redacted_thinking, but found text. When "
     "thinking is enabled, a final assistant message must start with a thinking block (preceeding the lastmost set "
     "of tool_use and tool_result blocks).", "first_block_not_thinking"),
    ("E2", "messages.1.content.0: Invalid `signature` in `thinking` block", "invalid_signature"),
    ("E3", "messages.647.content.0.thinking.signature: Field required", "invalid_signature"),
    ("E4", "messages.5.content.1: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot "
     "be modified. These blocks must remain as they were in the original response.", "thinking_modified"),
    ("E5", "messages.51.content.0: If an assistant message contains any thinking blocks, the first block must be "
     "thinking or redacted_thinking. Found text.", "first_block_not_thinking"),
    ("E6", "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot "
     "contain `thinking`. To use thinking blocks, enable `thinking` in your request.",
     "thinking_block_in_disabled"),
    ("E7", "messages.1: The final block in an assistant message cannot be `thinking`.", "thinking_modified"),
    ("E8", "messages.6: `tool_use` ids were found without `tool_result` blocks immediately after: "
     "toolu_01AbmHJypDhKqBF7NKdRPJ6d. Each `tool_use` block must have a corresponding `tool_result` block in the "
     "next message.", "tool_chain"),
    ("E9", "messages.12.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
     "toolu_01JLpBvrkaJHBDU3z3cWqtyv. Each `tool_result` block must have a corresponding `tool_use` block in the "
     "previous message.", "tool_chain"),
    ("E9b", "Did not find 1 tool_result block(s) at the beginning of this message. Messages following tool_use "
     "blocks must begin with a matching number of tool_result blocks.", "tool_chain"),
    ("E10", "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
     "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size",
     "params"),
    ("E11", "Thinking may not be enabled when tool_choice forces tool use.", "params"),
    ("E12", "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at "
     "https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking"
     "#important-considerations-when-using-extended-thinking", "params"),
    ("E12-adaptive", "temperature may only be set to 1 when thinking is enabled or in adaptive mode", "params"),
    ("budget-min", "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024", "params"),
    ("bound-prefix", "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a "
     "different conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "
     "\"drop_block\". That setting requires the `thinking-binding-controls-2026-08-01` value in the "
     "`anthropic-beta` header. The `system` prompt differs from the one this block was created with.",
     "binding_mismatch"),
    ("bound-prefix-with-beta", "messages.3.content.0: Invalid `signature` in `thinking` block. The block is bound to "
     "a different conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "
     "\"drop_block\".", "binding_mismatch"),
    ("tampered-on-bound-model", "messages.3.content.0: Invalid `signature` in `thinking` block", "invalid_signature"),
    ("overloaded", "Overloaded", "overloaded"),
]
GEMINI_AI_STUDIO = ("Function call is missing a thought_signature in functionCall parts. This is required for tools "
                    "to work correctly, and missing thought_signature may lead to degraded model performance. "
                    "Additional data, function call `default_api:webSearch` , position 3. Please refer to "
                    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")
GEMINI_VERTEX = ("Unable to submit request because function call `default_api:list_dir` in the 2. content block is "
                 "missing a `thought_signature`. Learn more: "
                 "https://docs.cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures")
GEMINI: list[tuple[str, str, str]] = [
    ("ai-studio", GEMINI_AI_STUDIO, "missing_thought_signature"),
    ("ai-studio-no-backticks", GEMINI_AI_STUDIO.replace("`", ""), "missing_thought_signature"),
    ("vertex", GEMINI_VERTEX, "missing_thought_signature"),
    ("copilot", "Unable to submit request because function call `default_api:list_directory` in the 2. content "
     "block is missing a `thought_signature`.", "missing_thought_signature"),
    ("doc-template", "Function call `FC1` in the `1.` content block is missing a `thought_signature`.",
     "missing_thought_signature"),
    ("corrupted", "Corrupted thought signature.", "missing_thought_signature"),
]
OPENAI_COMPAT: list[tuple[str, str, str]] = [
    ("deepseek", "The `reasoning_content` in the thinking mode must be passed back to the API.",
     "reasoning_not_preserved"),
    ("deepseek-anthropic", "The content[].thinking in the thinking mode must be passed back to the API.",
     "reasoning_not_preserved"),
]


def anthropic_body(msg: str, etype: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": etype, "message": msg}, "request_id": "req_011CWkB65DcNzK2MiofhXx8b"}


def google_body(msg: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": msg, "status": "INVALID_ARGUMENT"}}


def openai_body(msg: str) -> dict[str, Any]:
    return {"error": {"message": msg, "type": "invalid_request_error", "param": None,
                      "code": "invalid_request_error"}}


def vertex_wrap(inner: dict[str, Any]) -> dict[str, Any]:
    """Vertex relaying a partner model's error: Google's envelope, the inner body as JSON text."""
    return {"error": {"code": 400, "message": json.dumps(inner), "status": "INVALID_ARGUMENT"}}


def openrouter_wrap(inner: dict[str, Any], provider: str = "Anthropic") -> dict[str, Any]:
    return {"error": {"message": "Provider returned error", "code": 400,
                      "metadata": {"raw": json.dumps(inner), "provider_name": provider}}, "user_id": "user_x"}


def google_array(inner: dict[str, Any]) -> list[dict[str, Any]]:
    return [inner]


Wrap = Callable[[dict[str, Any]], Any]
WRAPS: dict[str, Wrap] = {
    "bare": lambda b: b,
    "vertex": vertex_wrap,
    "openrouter": openrouter_wrap,
    "google-array": google_array,
}


def _cases() -> list[Any]:
    out = []
    for cid, msg, kind in ANTHROPIC:
        for wname, wrap in WRAPS.items():
            etype = "overloaded_error" if kind == "overloaded" else "invalid_request_error"
            out.append(pytest.param(wrap(anthropic_body(msg, etype)), kind, id=f"anthropic-{cid}-{wname}"))
    for cid, msg, kind in GEMINI:
        for wname, wrap in WRAPS.items():
            out.append(pytest.param(wrap(google_body(msg)), kind, id=f"gemini-{cid}-{wname}"))
    for cid, msg, kind in OPENAI_COMPAT:
        for wname, wrap in WRAPS.items():
            out.append(pytest.param(wrap(openai_body(msg)), kind, id=f"openai-{cid}-{wname}"))
    return out


@pytest.mark.parametrize(("payload", "kind"), _cases())
def test_every_reference_error_text_is_classified(payload: Any, kind: str) -> None:
    assert classify(400, json.dumps(payload).encode()) == kind


def test_openrouter_gemini_verbatim_body_is_reasoning_not_preserved() -> None:
    """The captured body (microsoft/vscode#279676): OpenRouter's own text wins over the quoted Vertex one."""
    body = ('{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"Gemini models require '
            'OpenRouter reasoning details to be preserved in each request. Please refer to our docs: '
            'https://openrouter.ai/docs/use-cases/reasoning-tokens#preserving-reasoning-blocks. Upstream error: {\\n'
            '  \\"error\\": {\\n    \\"code\\": 400,\\n    \\"message\\": \\"Unable to submit request because '
            'function call `default_api:list_dir` in the 2. content block is missing a `thought_signature`. Learn '
            'more: https://docs.cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures\\",\\n    '
            '\\"status\\": \\"INVALID_ARGUMENT\\"\\n  }\\n}\\n","provider_name":"Google"}},"user_id":"user_abc"}')
    json.loads(body)
    assert classify(400, body.encode()) == "reasoning_not_preserved"


def test_text_after_an_embedded_json_object_is_decoded() -> None:
    raw = "Upstream error: " + json.dumps(anthropic_body("messages.1.content.0: Invalid `signature` in `thinking` "
                                                         "block"))
    assert classify(400, json.dumps(openrouter_wrap({"x": 1}) | {"error": {"message": raw}}).encode()) == \
        "invalid_signature"


@pytest.mark.parametrize(("status", "body", "kind"), [
    (529, b"", "overloaded"),
    (529, json.dumps(anthropic_body("Overloaded", "overloaded_error")).encode(), "overloaded"),
    (429, json.dumps(anthropic_body("Number of requests has exceeded your rate limit", "rate_limit_error")).encode(),
     "rate_limited"),
    (429, json.dumps(google_body("Resource has been exhausted (e.g. check quota).") | {
        "error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}).encode(), "rate_limited"),
    (429, b"", "rate_limited"),
    (503, b"<html>upstream connect error</html>", "overloaded"),
    (500, json.dumps(anthropic_body("Internal server error", "api_error")).encode(), "other"),
    (400, b"not json at all", "other"),
    (400, b"{\"error\": ", "other"),
    (404, json.dumps(anthropic_body("model: claude-x", "not_found_error")).encode(), "other"),
])
def test_statuses_and_unrecognised_bodies(status: int, body: bytes, kind: str) -> None:
    assert classify(status, body) == kind


def test_in_stream_error_events() -> None:
    assert classify_event({"type": "overloaded_error", "message": "Overloaded"}) == "overloaded"
    assert classify_event({"type": "api_error", "message": "boom"}) == "other"
    assert classify_event({"type": "invalid_request_error",
                           "message": "messages.1.content.0: Invalid `signature` in `thinking` block"}) == \
        "invalid_signature"
    assert classify_event({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}) == \
        "rate_limited"


def test_table_kinds_are_the_closed_set() -> None:
    assert {kind for kind, _ in PATTERNS} <= set(KINDS)
    assert SIGNATURE_KINDS <= set(KINDS) and "other" in KINDS
    assert {"tool_chain", "params", "overloaded", "rate_limited", "other"}.isdisjoint(SIGNATURE_KINDS)


def test_deeply_nested_or_huge_bodies_do_not_explode() -> None:
    nested: Any = anthropic_body("messages.1.content.0: Invalid `signature` in `thinking` block")
    for _ in range(12):
        nested = {"error": {"message": json.dumps(nested)}}
    assert classify(400, json.dumps(nested).encode()) in KINDS
    assert classify(400, b"{" * 200_000) == "other"
    assert classify(400, b"x" + b"[" * 200_000) == "other"

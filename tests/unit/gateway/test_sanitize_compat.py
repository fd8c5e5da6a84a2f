"""The OpenAI-compatible flavors' sanitize rules (``gateway/dialects/openai_compat.py`` and each flavor's
subpackage), pure: what a client's reasoning fields look like without a record, and what goes upstream."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.actions import Action, ActionKind
from gateway.dialects import registry
from gateway.dialects.canonical import (
    CLIENT,
    Message,
    ProviderFields,
    ProviderSig,
    Request,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.routing import ModelCaps, Router, origin_of, parse_routes
from gateway.pipeline.sanitize.core import Policy, sanitize

ON = {"type": "enabled", "budget_tokens": 2048}
COPILOT = ModelCaps("copilot", kind="openai", flavor="copilot", family="gemini")
OPENROUTER_GEMINI = ModelCaps("openrouter", kind="openai", flavor="openrouter", family="gemini")
OPENROUTER_CLAUDE = ModelCaps("openrouter", kind="openai", flavor="openrouter", family="anthropic")
DEEPSEEK = ModelCaps("deepseek", kind="openai", flavor="deepseek")
GENERIC_GEMINI = ModelCaps("generic", kind="openai", flavor="generic", family="gemini")
DEFAULT = Policy()
SIGNED = [{"type": "reasoning.text", "text": "hm", "signature": "S", "format": "anthropic-claude-v1", "index": 0}]


def step(tid: str, fields: dict[str, Any] | None = None, origin: str = CLIENT) -> list[Message]:
    """An assistant step with one call and the user message answering it."""
    return [Message("assistant", [ToolUseBlock(tid, "f", {"a": 1})],
                    provider=ProviderFields(origin, fields) if fields else None),
            Message("user", [ToolResultBlock(tid, "r")])]


def run(caps: ModelCaps, model: str, msgs: list[Message], thinking: dict[str, Any] | None = None,
        policy: Policy = DEFAULT) -> tuple[Request, list[Action]]:
    req = Request(model, msgs, thinking, params={"max_tokens": 9000})
    return req, sanitize(req, lambda b: False, caps, policy)


def kinds(actions: list[Action]) -> list[tuple[ActionKind, str]]:
    return [(a.kind, a.detail) for a in actions]


def whole(flavor: str, family: str, fields: dict[str, object]) -> bool:
    return registry.flavor(flavor).whole(family, fields)  # type: ignore[arg-type]


def test_whole_per_flavor() -> None:
    enc = [{"type": "reasoning.encrypted", "data": "D", "format": "google-gemini-v1"}]
    assert whole("openrouter", "gemini", {"reasoning_details": [{"type": "reasoning.text", "text": "t"}, *enc]})
    assert not whole("openrouter", "gemini", {"reasoning_details": [{"type": "reasoning.text", "text": "t"}]})
    assert whole("openrouter", "anthropic", {"reasoning_details": SIGNED})
    assert not whole("openrouter", "anthropic", {"reasoning_details": [*SIGNED, {"type": "reasoning.text",
                                                                                 "text": "x"}]})
    assert whole("openrouter", "", {"reasoning_details": [{"type": "reasoning.text", "text": "t"}]}), \
        "another family's plain reasoning text (DeepSeek on OpenRouter) is its own content"
    assert not whole("openrouter", "", {"reasoning_details": [{"type": "reasoning.text", "text": "t",
                                                               "format": "anthropic-claude-v1"}]})
    assert whole("copilot", "gemini", {"reasoning_opaque": "O"})
    assert not whole("copilot", "gemini", {"reasoning_text": "t"})
    assert whole("deepseek", "", {"reasoning_content": "r"}) and not whole("deepseek", "", {"reasoning_content": ""})
    assert whole("generic", "", {})


def test_routing_names_the_family_behind_an_openai_compatible_upstream() -> None:
    router = Router(parse_routes("google/=openrouter@http://x/api/v1,anthropic/=openrouter@http://x/api/v1"),
                    openai_flavor="copilot")
    assert router.caps_for("google/gemini-3-pro-preview").family == "gemini"
    assert router.caps_for("anthropic/claude-sonnet-4.5").family == "anthropic"
    assert router.caps_for("gemini-3-pro-preview").family == ""  # the native Gemini upstream
    assert router.caps_for("gpt-5").family == "" and router.caps_for("gpt-5").flavor == "copilot"


@pytest.mark.parametrize("caps", [COPILOT, OPENROUTER_GEMINI], ids=["copilot", "openrouter"])
def test_gemini_current_turn_step_without_its_reasoning_goes_as_text(caps: ModelCaps) -> None:
    fields = {"reasoning_text": "thought"} if caps.flavor == "copilot" else \
        {"reasoning_details": [{"type": "reasoning.text", "text": "thought"}]}
    earlier = step("c0", fields)
    msgs = [Message("user", [TextBlock("q1")]), *earlier, Message("user", [TextBlock("q2")]), *step("c1", fields)]
    _, actions = run(caps, "gemini-3-pro-preview", msgs, ON)
    assert kinds(actions) == [(ActionKind.DROPPED, "unverifiable_reasoning")] * 2 + \
        [(ActionKind.TOOL_LOOP_TEXTUALIZED, "reasoning_missing")]
    assert msgs[1].content == [ToolUseBlock("c0", "f", {"a": 1})] and msgs[1].provider is None, \
        "an earlier turn is not checked: its calls stay, its unverifiable reasoning goes"
    assert msgs[4].content == [TextBlock('[called tool f with {"a":1}]')] and msgs[4].provider is None
    assert msgs[5].content == [TextBlock("[tool result]\nr")]


def test_whole_and_recorded_reasoning_is_kept() -> None:
    target = origin_of(COPILOT, "gemini-3-pro-preview")
    msgs = [Message("user", [TextBlock("q")]), *step("c0", {"reasoning_opaque": "O", "reasoning_text": "t"}),
            *step("c1", {"reasoning_text": "t"}, origin=target)]  # a record's own fields: verified
    _, actions = run(COPILOT, "gemini-3-pro-preview", msgs, ON)
    assert actions == []
    assert msgs[1].provider == ProviderFields(CLIENT, {"reasoning_opaque": "O", "reasoning_text": "t"})


def test_unverifiable_reasoning_as_text_by_policy() -> None:
    msgs = [Message("user", [TextBlock("q")]), *step("c0", {"reasoning_text": "thought"})]
    _, actions = run(COPILOT, "gemini-3-pro-preview", msgs, ON, Policy(unverifiable="text"))
    assert kinds(actions)[0] == (ActionKind.DOWNGRADED_TEXT, "")
    assert msgs[1].content[0] == TextBlock("thought")


def test_deepseek_span_with_calls_goes_as_text_up_to_the_last_message_without_reasoning() -> None:
    r = {"reasoning_content": "r"}
    msgs = [Message("user", [TextBlock("q1")]), *step("a", None), *step("b", r),
            Message("assistant", [TextBlock("done")], provider=ProviderFields(CLIENT, r)),
            Message("user", [TextBlock("q2")]), *step("c", r), *step("d", None), *step("e", r)]
    _, actions = run(DEEPSEEK, "deepseek-reasoner", msgs)
    assert kinds(actions) == [(ActionKind.TOOL_LOOP_TEXTUALIZED, "reasoning_missing")] * 2
    assert msgs[1].content == [TextBlock('[called tool f with {"a":1}]')]
    assert isinstance(msgs[3].content[0], ToolUseBlock), "after the last step without reasoning: kept"
    assert [type(b) for m in msgs[7:11] for b in m.content] == [TextBlock] * 4
    assert isinstance(msgs[11].content[0], ToolUseBlock)


def test_deepseek_thinking_off_sends_no_reasoning() -> None:
    msgs = [Message("user", [TextBlock("q")]), *step("a", {"reasoning_content": "r"}), *step("b", None)]
    _, actions = run(DEEPSEEK, "deepseek-reasoner", msgs, {"type": "disabled"})
    assert kinds(actions) == [(ActionKind.DROPPED, "thinking_disabled")]
    assert msgs[1].provider is None and isinstance(msgs[3].content[0], ToolUseBlock)


def test_anthropic_on_openrouter_loop_start_without_signed_reasoning_disables_thinking() -> None:
    unsigned = {"reasoning_details": [{"type": "reasoning.text", "text": "hm"}]}
    msgs = [Message("user", [TextBlock("q1")]), *step("a", {"reasoning_details": SIGNED}),
            Message("user", [TextBlock("q2")]), *step("b", unsigned)]
    req, actions = run(OPENROUTER_CLAUDE, "anthropic/claude-sonnet-4.5", msgs, ON)
    assert req.thinking is None
    assert kinds(actions) == [(ActionKind.DROPPED, "unverifiable_reasoning"),
                              (ActionKind.THINKING_DISABLED, "loop_start_unverified"),
                              (ActionKind.DROPPED, "thinking_disabled")]
    assert all(m.provider is None for m in msgs), "thinking off: no reasoning_details anywhere"


def test_anthropic_on_openrouter_keeps_thinking_when_the_loop_starts_signed() -> None:
    msgs = [Message("user", [TextBlock("q")]), *step("a", {"reasoning_details": SIGNED})]
    req, actions = run(OPENROUTER_CLAUDE, "anthropic/claude-sonnet-4.5", msgs, ON)
    assert req.thinking == ON and actions == []
    req, actions = run(OPENROUTER_CLAUDE, "anthropic/claude-sonnet-4.5", msgs, None)  # the client turned it off
    assert kinds(actions) == [(ActionKind.DROPPED, "thinking_disabled")] and msgs[1].provider is None


def test_gemini_compat_layer_gets_the_bypass_on_the_first_call_of_each_current_step() -> None:
    msgs = [Message("user", [TextBlock("q")]),
            Message("assistant", [ToolUseBlock("a", "f", {}, sig=ProviderSig(CLIENT, "copied")),
                                  ToolUseBlock("b", "f", {}, sig=ProviderSig(CLIENT, "copied"))]),
            Message("user", [ToolResultBlock("a", "r"), ToolResultBlock("b", "r")])]
    _, actions = run(GENERIC_GEMINI, "gemini-3-flash-preview", msgs, ON)
    assert kinds(actions) == [(ActionKind.SIGNATURE_BYPASS, "")]
    first, second = msgs[1].content
    assert isinstance(first, ToolUseBlock) and isinstance(second, ToolUseBlock)
    assert first.sig is not None and first.sig.value == "skip_thought_signature_validator" and second.sig is None

"""Sanitize rules 6 and 7: provider reasoning never crosses model families; Gemini's current turn gets
the bypass value where no record vouches for a signature."""

from __future__ import annotations

from gateway.actions import ActionKind
from gateway.dialects.canonical import (
    CLIENT,
    Message,
    ProviderFields,
    ProviderSig,
    Request,
    TextBlock,
    ThinkingBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.routing import Router
from gateway.pipeline.sanitize.core import Policy, sanitize

GEM = "gemini/gemini-3-pro-preview"
ROUTER = Router()


def _history(sig: ProviderSig | None, second: ProviderSig | None = None) -> list[Message]:
    return [
        Message("user", [TextBlock("q")]),
        Message("assistant", [ThoughtBlock("hmm", GEM), TextBlock("calling"),
                              ToolUseBlock("c1", "f", {}, sig=sig), ToolUseBlock("c2", "f", {}, sig=second)]),
        Message("user", [ToolResultBlock("c1", "r1"), ToolResultBlock("c2", "r2")]),
    ]


DROP = Policy()


def _run(model: str, msgs: list[Message], policy: Policy = DROP) -> tuple[Request, list[ActionKind]]:
    req = Request(model, msgs, {"type": "enabled", "budget_tokens": 2048}, params={"max_tokens": 4096})
    actions = sanitize(req, lambda b: False, ROUTER.caps_for(model), policy)
    return req, [a.kind for a in actions]


def test_same_family_signatures_and_thoughts_stay() -> None:
    req, kinds = _run("gemini-3-pro-preview", _history(ProviderSig(GEM, "S")))
    blocks = req.messages[1].content
    assert isinstance(blocks[0], ThoughtBlock) and blocks[2].sig == ProviderSig(GEM, "S")  # type: ignore[union-attr]
    assert ActionKind.SIGNATURE_BYPASS not in kinds and req.thinking is not None


def test_unverified_or_foreign_signatures_get_the_bypass_on_the_first_call_only() -> None:
    for sig in (None, ProviderSig(CLIENT, "forged"), ProviderSig("gemini/gemini-2.5-pro", "other-model")):
        req, kinds = _run("gemini-3-pro-preview", _history(sig, ProviderSig(CLIENT, "copied")))
        calls = [b for b in req.messages[1].content if isinstance(b, ToolUseBlock)]
        assert calls[0].sig == ProviderSig(GEM, "skip_thought_signature_validator")
        assert calls[1].sig is None
        assert kinds.count(ActionKind.SIGNATURE_BYPASS) == 1


def test_previous_turns_are_not_bypassed() -> None:
    msgs = [*_history(None), Message("assistant", [TextBlock("done")]), Message("user", [TextBlock("next")])]
    req, kinds = _run("gemini-3-pro-preview", msgs)
    assert ActionKind.SIGNATURE_BYPASS not in kinds
    assert all(b.sig is None for b in req.messages[1].content if isinstance(b, ToolUseBlock))


def test_gemini_reasoning_never_reaches_claude() -> None:
    msgs = _history(ProviderSig(GEM, "S"))
    msgs[1].provider = ProviderFields(GEM, {"reasoning_content": "x"})
    req, kinds = _run("claude-opus-4-5", msgs)
    blocks = req.messages[1].content
    assert not any(isinstance(b, ThoughtBlock) for b in blocks)
    assert all(getattr(b, "sig", None) is None for b in blocks) and req.messages[1].provider is None
    assert req.thinking is None, "the loop's first assistant message has no Claude thinking: thinking off"
    assert ActionKind.DROPPED in kinds
    text, _ = _run("claude-opus-4-5", _history(None), Policy(unverifiable="text"))
    assert TextBlock("hmm") in text.messages[1].content, "the text policy keeps the reasoning as text"


def test_claude_thinking_never_reaches_gemini() -> None:
    msgs = _history(None)
    msgs[1].content.insert(0, ThinkingBlock("claude thinks", "sig"))
    req, _ = _run("gemini-3-pro-preview", msgs)
    assert not any(isinstance(b, ThinkingBlock) for b in req.messages[1].content)


def test_client_provider_fields_are_kept_only_for_openai_compatible_targets() -> None:
    for model, kept in (("deepseek-reasoner", True), ("gemini-3-pro-preview", False), ("claude-opus-4-5", False)):
        msgs = _history(None)
        msgs[1].provider = ProviderFields(CLIENT, {"reasoning_content": "r"})
        req, _ = _run(model, msgs)
        assert (req.messages[1].provider is not None) is kept, model


def test_signed_empty_text_is_kept() -> None:
    msgs = [Message("user", [TextBlock("q")]),
            Message("assistant", [TextBlock("answer"), TextBlock("", sig=ProviderSig(GEM, "S"))]),
            Message("user", [TextBlock("more")])]
    req, _ = _run("gemini-3-pro-preview", msgs)
    assert req.messages[1].content[-1] == TextBlock("", sig=ProviderSig(GEM, "S"))
    signed = Message("assistant", [TextBlock("answer"), TextBlock("", sig=ProviderSig(GEM, "S"))])
    req, _ = _run("claude-opus-4-5", [Message("user", [TextBlock("q")]), signed, Message("user", [TextBlock("more")])])
    assert req.messages[1].content == [TextBlock("answer")]


def _two_steps(first: ProviderSig | None, second: ProviderSig | None) -> list[Message]:
    """One current turn of two steps; the first call of each signed as given."""
    return [*_history(first),
            Message("assistant", [ThoughtBlock("again", GEM), ToolUseBlock("c3", "g", {"x": 1}, sig=second)]),
            Message("user", [ToolResultBlock("c3", "r3")])]


def test_each_documented_bypass_value_signs_the_unvouched_first_call() -> None:
    for value in ("skip_thought_signature_validator", "context_engineering_is_the_way_to_go"):
        req, kinds = _run("gemini-3-pro-preview", _two_steps(None, ProviderSig(GEM, "S")),
                          Policy(gemini_bypass=value))
        calls = [b for b in req.messages[1].content if isinstance(b, ToolUseBlock)]
        assert calls[0].sig == ProviderSig(GEM, value) and calls[1].sig is None
        assert req.messages[3].content[1] == ToolUseBlock("c3", "g", {"x": 1}, sig=ProviderSig(GEM, "S"))
        assert kinds.count(ActionKind.SIGNATURE_BYPASS) == 1


def test_bypass_off_turns_the_unsigned_step_and_its_results_into_text() -> None:
    req, kinds = _run("gemini-3-pro-preview", _two_steps(ProviderSig(CLIENT, "forged"), ProviderSig(GEM, "S")),
                      Policy(gemini_bypass=None))
    step, results, signed, last = (m.content for m in req.messages[1:])
    assert step == [ThoughtBlock("hmm", GEM), TextBlock("calling"), TextBlock("[called tool f with {}]"),
                    TextBlock("[called tool f with {}]")]
    assert results == [TextBlock("[tool result]\nr1"), TextBlock("[tool result]\nr2")]
    assert signed[1] == ToolUseBlock("c3", "g", {"x": 1}, sig=ProviderSig(GEM, "S")), "a recorded step stays"
    assert last == [ToolResultBlock("c3", "r3")]
    assert kinds.count(ActionKind.TOOL_LOOP_TEXTUALIZED) == 1 and ActionKind.SIGNATURE_BYPASS not in kinds
    assert not any(b.sig is not None and b.sig.value == "forged" for m in req.messages for b in m.content
                   if isinstance(b, ToolUseBlock | TextBlock)), "never the client's unverifiable signature"


def test_bypass_off_checks_every_step_after_a_textualized_one() -> None:
    req, kinds = _run("gemini-3-pro-preview", _two_steps(None, None), Policy(gemini_bypass=None))
    assert not any(isinstance(b, ToolUseBlock | ToolResultBlock) for m in req.messages for b in m.content)
    assert [a for a in kinds if a == ActionKind.TOOL_LOOP_TEXTUALIZED] == [ActionKind.TOOL_LOOP_TEXTUALIZED] * 2
    req, kinds = _run("gemini-3-pro-preview", [*_history(None), Message("assistant", [TextBlock("done")]),
                                               Message("user", [TextBlock("next")])], Policy(gemini_bypass=None))
    assert ActionKind.TOOL_LOOP_TEXTUALIZED not in kinds, "earlier turns need no signature: kept as calls"
    assert isinstance(req.messages[1].content[2], ToolUseBlock)

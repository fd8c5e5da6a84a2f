"""The last resort after a thinking 400 (``sanitize.distrust``, issue 31 item 4): every replayed reasoning is taken as
unverifiable, whatever vouched for it, and the request is made consistent again. Checked against the simulator's
own rules: what ``distrust`` leaves is a request the strict Anthropic rules accept."""

from __future__ import annotations

from typing import Any

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
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
from gateway.dialects.openai_compat import seals_for
from gateway.dialects.routing import ModelCaps, caps_for, origin_of
from gateway.pipeline.sanitize.core import Policy, distrust, sanitize
from thinkgate_sim.rules import check_messages_request
from thinkgate_sim.signing import Minter

OPENROUTER_CLAUDE = ModelCaps("openrouter", kind="openai", flavor="openrouter", family="anthropic")
MODEL = "anthropic/claude-opus-4.5"
GEMINI = caps_for("gemini-3-pro-preview")
SIGNED = [{"type": "reasoning.text", "text": "hm", "signature": "S", "format": "anthropic-claude-v1", "index": 0}]


def loop(minter: Minter) -> dict[str, Any]:
    sig = minter.mint_thinking("claude-opus-4-5", "plan", "msg_1", 0)
    return {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": [{"type": "thinking", "thinking": "plan", "signature": sig},
                                                           {"type": "tool_use", "id": "t1", "name": "f",
                                                            "input": {}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                       "content": "ok"}]}]}


def test_thinking_verified_by_a_record_is_degraded_and_the_loop_made_consistent() -> None:
    minter = Minter(b"t")
    req = anthropic.decode_request(loop(minter))
    kept = sanitize(req, lambda b: True, caps_for(req.model), Policy())
    assert [a.kind for a in kept] == [ActionKind.KEPT_VERIFIED], "a record vouched for it: kept on the first try"
    actions = distrust(req, caps_for(req.model), Policy())
    kinds = {a.kind for a in actions}
    assert ActionKind.DROPPED in kinds and ActionKind.THINKING_DISABLED in kinds
    body = anthropic.encode_request(req)
    assert "thinking" not in body and all(b.get("type") != "thinking" for m in body["messages"]
                                          for b in m["content"] if isinstance(b, dict))
    assert check_messages_request(body, betas=frozenset(), minter=minter) is None


def test_text_policy_keeps_the_reasoning_as_text() -> None:
    req = anthropic.decode_request(loop(Minter(b"t")))
    actions = distrust(req, caps_for(req.model), Policy(unverifiable="text"))
    assert ActionKind.DOWNGRADED_TEXT in {a.kind for a in actions}
    assert any(isinstance(b, TextBlock) and b.text == "plan" for b in req.messages[1].content)


def test_sealed_openrouter_fields_are_degraded_though_their_seal_opens() -> None:
    seals = seals_for("secret", None, "tenant")
    fields = seals.seal(origin_of(OPENROUTER_CLAUDE, MODEL), {"reasoning_details": SIGNED})
    msgs = [Message("user", [TextBlock("hi")]),
            Message("assistant", [ToolUseBlock("t1", "f", {})], provider=ProviderFields(CLIENT, fields)),
            Message("user", [ToolResultBlock("t1", "ok")])]
    req = Request(MODEL, msgs, {"type": "enabled", "budget_tokens": 2048},
                  params={"max_tokens": 9000})
    policy = Policy(seals=seals)
    first = sanitize(req, lambda b: False, OPENROUTER_CLAUDE, policy)
    assert req.messages[1].provider is not None, f"the seal opens: kept on the first try ({first})"
    actions = distrust(req, OPENROUTER_CLAUDE, policy)
    assert req.messages[1].provider is None or "reasoning_details" not in req.messages[1].provider.fields
    assert not req.thinking_enabled() and ActionKind.THINKING_DISABLED in {a.kind for a in actions}


def test_a_recorded_gemini_signature_goes_and_its_step_travels_as_text_not_with_the_bypass() -> None:
    msgs = [Message("user", [TextBlock("hi")]),
            Message("assistant", [ToolUseBlock("t1", "f", {}, sig=ProviderSig("gemini", "c2ln"))],
                    provider=None),
            Message("user", [ToolResultBlock("t1", "ok")])]
    req = Request("gemini-3-pro-preview", msgs, None, params={})
    actions = distrust(req, GEMINI, Policy())
    assert ActionKind.TOOL_LOOP_TEXTUALIZED in {a.kind for a in actions}
    assert ActionKind.SIGNATURE_BYPASS not in {a.kind for a in actions}
    assert not any(isinstance(b, ToolUseBlock) for m in req.messages for b in m.content)


def test_nothing_to_degrade_changes_nothing() -> None:
    req = Request("claude-opus-4-5", [Message("user", [TextBlock("hi")])], None, params={"max_tokens": 10})
    assert distrust(req, caps_for(req.model), Policy()) == []

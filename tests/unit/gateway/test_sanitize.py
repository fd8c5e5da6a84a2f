"""Unit tests of the sanitizer and the tool-chain rules (pure functions, no sockets)."""

from __future__ import annotations

from typing import Any

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Block
from gateway.dialects.routing import caps_for
from gateway.dialects.toolchain import NO_RESULT
from gateway.pipeline.sanitize.core import Policy, sanitize, trailing_loop_start
from thinkgate_sim.rules import check_messages_request
from thinkgate_sim.signing import Minter

THINK = {"type": "thinking", "thinking": "plan\r\n", "signature": "sig-ok"}
BAD = {"type": "thinking", "thinking": "forged", "signature": "sig-bad"}


def verified_if_ok(b: Block) -> bool:
    return getattr(b, "signature", None) == "sig-ok"


DEFAULT = Policy()


def run(body: dict[str, Any], policy: Policy = DEFAULT, betas: frozenset[str] = frozenset()
        ) -> tuple[dict[str, Any], list[ActionKind]]:
    req = anthropic.decode_request(body)
    actions = sanitize(req, verified_if_ok, caps_for(req.model), policy, betas)
    return anthropic.encode_request(req), [a.kind for a in actions]


def body(*messages: dict[str, Any], **kw: Any) -> dict[str, Any]:
    out = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
           "messages": list(messages)}
    out.update(kw)
    return out


U = {"role": "user", "content": "hi"}


def tool_use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "f", "input": {}}


def result(tid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": "ok"}


def test_verified_thinking_is_kept_and_moved_first() -> None:
    out, kinds = run(body(U, {"role": "assistant", "content": [{"type": "text", "text": "a"}, THINK, tool_use("t1")]},
                          {"role": "user", "content": [result("t1")]}))
    assert out["messages"][1]["content"][0] == THINK
    assert ActionKind.BLOCKS_REORDERED in kinds and out["thinking"]["type"] == "enabled"


def test_unverified_thinking_in_loop_disables_thinking_everywhere() -> None:
    out, kinds = run(body(U, {"role": "assistant", "content": [BAD, tool_use("t1")]},
                          {"role": "user", "content": [result("t1")]}))
    assert "thinking" not in out
    assert ActionKind.DROPPED in kinds and ActionKind.THINKING_DISABLED in kinds
    assert all(b["type"] != "thinking" for m in out["messages"] if isinstance(m["content"], list)
               for b in m["content"])


def test_text_policy_downgrades_to_a_text_block() -> None:
    out, kinds = run(body(U, {"role": "assistant", "content": [BAD, {"type": "text", "text": "answer"}]}, U),
                     Policy("text"))
    assert out["messages"][1]["content"] == [{"type": "text", "text": "forged"}, {"type": "text", "text": "answer"}]
    assert ActionKind.DOWNGRADED_TEXT in kinds and out["thinking"]["type"] == "enabled"  # no open loop


def test_partial_run_is_all_or_nothing() -> None:
    msg = {"role": "assistant", "content": [THINK, BAD, {"type": "text", "text": "x"}]}
    out, _ = run(body(U, msg, U))
    assert out["messages"][1]["content"] == [{"type": "text", "text": "x"}]


def test_missing_result_synthesized_and_orphan_textualized() -> None:
    out, kinds = run(body({"role": "user", "content": [result("ghost"), {"type": "text", "text": "go"}]},
                          {"role": "assistant", "content": [THINK, tool_use("t1"), tool_use("t2")]},
                          {"role": "user", "content": [{"type": "text", "text": "note"}, result("t2")]}))
    first = out["messages"][0]["content"]
    assert first[0]["type"] == "text" and "ghost" in first[0]["text"] and "ok" in first[0]["text"]
    last = out["messages"][2]["content"]
    assert [b.get("tool_use_id") for b in last[:2]] == ["t1", "t2"]  # results first, in tool_use order
    assert last[0]["is_error"] is True and last[0]["content"] == NO_RESULT
    assert ActionKind.TOOL_RESULT_SYNTHESIZED in kinds and ActionKind.TOOL_RESULT_TEXTUALIZED in kinds


def test_result_in_a_later_message_is_moved_back() -> None:
    out, _ = run(body(U, {"role": "assistant", "content": [THINK, tool_use("t1")]},
                      {"role": "user", "content": [{"type": "text", "text": "wait"}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                      {"role": "user", "content": [result("t1")]}))
    assert out["messages"][2]["content"][0]["tool_use_id"] == "t1"
    assert all(b.get("type") != "tool_result" for b in out["messages"][4]["content"])


def test_empty_text_blocks_removed() -> None:
    out, kinds = run(body(U, {"role": "assistant", "content": [THINK, {"type": "text", "text": " "}, tool_use("t")]},
                          {"role": "user", "content": [result("t")]}))
    assert [b["type"] for b in out["messages"][1]["content"]] == ["thinking", "tool_use"]
    assert ActionKind.EMPTY_TEXT_REMOVED in kinds


def test_thinking_off_strips_every_thinking_block() -> None:
    b = body(U, {"role": "assistant", "content": [THINK, {"type": "text", "text": "a"}]}, U)
    del b["thinking"]
    out, _ = run(b)
    assert out["messages"][1]["content"] == [{"type": "text", "text": "a"}]


def test_final_prefill_never_ends_with_thinking() -> None:
    out, _ = run(body(U, {"role": "assistant", "content": [THINK]}))
    assert out["messages"][-1]["role"] == "user"


def test_params_fixed_for_thinking() -> None:
    out, kinds = run(body(U, max_tokens=1500, temperature=0.3, top_k=5, tool_choice={"type": "any"},
                          thinking={"type": "enabled", "budget_tokens": 500}))
    assert out["thinking"]["budget_tokens"] < out["max_tokens"] and out["thinking"]["budget_tokens"] >= 1024
    assert "temperature" not in out and "top_k" not in out and out["tool_choice"] == {"type": "auto"}
    assert kinds.count(ActionKind.PARAMS_FIXED) >= 4


def test_params_untouched_when_fixing_is_off() -> None:
    out, _ = run(body(U, temperature=0.3), Policy(fix_params=False))
    assert out["temperature"] == 0.3


def test_adaptive_only_model_closes_the_open_loop_as_text() -> None:
    out, kinds = run({"model": "claude-opus-4-7", "max_tokens": 4096, "thinking": {"type": "adaptive"},
                      "messages": [U, {"role": "assistant", "content": [BAD, tool_use("t1")]},
                                   {"role": "user", "content": [result("t1")]}]})
    assert out["thinking"] == {"type": "adaptive"}
    assert ActionKind.TOOL_LOOP_TEXTUALIZED in kinds
    assert all(b["type"] == "text" for m in out["messages"][1:] for b in m["content"])


def test_trailing_loop_start_treats_mixed_result_messages_as_loop() -> None:
    req = anthropic.decode_request(body(
        U, {"role": "assistant", "content": [tool_use("a")]},
        {"role": "user", "content": [result("a"), {"type": "text", "text": "<system-reminder>"}]}))
    assert trailing_loop_start(req.messages) == 1


def test_budget_not_below_max_tokens_is_lowered() -> None:
    out, kinds = run(body(U, max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 4096}))
    assert out["thinking"]["budget_tokens"] == 4095 and out["max_tokens"] == 4096
    assert kinds == [ActionKind.PARAMS_FIXED]
    out, _ = run(body(U, max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 8000}))
    assert out["thinking"]["budget_tokens"] == 2999
    # max_tokens too small for the minimum budget: max_tokens is raised instead
    out, _ = run(body(U, max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 2048}))
    assert out["thinking"]["budget_tokens"] == 2048 and out["max_tokens"] == 2049


def test_budget_above_max_tokens_is_allowed_with_interleaved_thinking() -> None:
    b = body(U, max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 8000})
    out, kinds = run(b, betas=frozenset({"interleaved-thinking-2025-05-14"}))
    assert out["thinking"]["budget_tokens"] == 8000 and ActionKind.PARAMS_FIXED not in kinds


def test_a_verbatim_replay_is_kept_undecoded_only_when_its_json_already_has_the_form_the_rules_want() -> None:
    tidy = [THINK, {"type": "text", "text": "a"}, tool_use("t1")]
    late = [{"type": "text", "text": "a"}, THINK, tool_use("t1")]
    blank = [THINK, {"type": "text", "text": " "}, tool_use("t1")]
    for content, expected, undecoded in [(tidy, [ActionKind.KEPT_VERIFIED], True),
                                         (late, [ActionKind.KEPT_VERIFIED, ActionKind.BLOCKS_REORDERED], False),
                                         (blank, [ActionKind.EMPTY_TEXT_REMOVED, ActionKind.KEPT_VERIFIED], False)]:
        req = anthropic.decode_request(body(U, {"role": "assistant", "content": content}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}))
        # repair matched message 1 by its replay digest
        kinds = [a.kind for a in sanitize(req, lambda b: False, caps_for(req.model), DEFAULT, verbatim=[1])]
        assert kinds == expected, (content, kinds)
        assert (req.messages[1].raw_blocks is not None) == undecoded
        out = anthropic.encode_request(req)["messages"][1]["content"]
        assert out[0]["type"] == "thinking" and all(b.get("text", "x").strip() for b in out)


def test_a_repeated_tool_use_id_gets_a_new_id_with_its_results() -> None:
    """A client numbering its calls per message (``call_0`` every round) repeats ids: the real API rejects
    duplicate tool_use ids, so the later call and the results answering it get a new id; nothing is
    synthesized beside the real results, and every result keeps its content."""
    a1 = {"role": "assistant", "content": [{"type": "text", "text": "one"}, tool_use("call_0")]}
    a2 = {"role": "assistant", "content": [{"type": "text", "text": "two"}, tool_use("call_0"), tool_use("call_0")]}
    r1 = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_0", "content": "first"}]}
    r2 = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_0", "content": "second"},
                                      {"type": "tool_result", "tool_use_id": "call_0", "content": "third"}]}
    sent = body(U, a1, r1, a2, r2, thinking=None)
    del sent["thinking"]
    out, kinds = run(sent)
    ids = [b["id"] for m in out["messages"] for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_use"]
    assert len(set(ids)) == 3 and ids[0] == "call_0"
    answered = [(b["tool_use_id"], b["content"]) for m in out["messages"] if m["role"] == "user"
                for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_result"]
    assert answered == list(zip(ids, ["first", "second", "third"], strict=True))
    assert ActionKind.TOOL_ID_MAPPED in kinds and ActionKind.TOOL_RESULT_SYNTHESIZED not in kinds
    assert NO_RESULT not in str(out)
    assert check_messages_request(out, betas=frozenset(), minter=Minter(b"t")) is None
    again, _ = run(sent)
    assert again == out  # the same request gets the same ids

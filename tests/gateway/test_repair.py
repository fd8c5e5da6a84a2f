"""Unit tests of repair (pure: replayed history + records -> history + actions).

Layer 2 (the strict exact-text -> signature index) and the mapping of client-regenerated
tool ids back to the recorded ones, each of which the audit could disable without a test
failing.
"""

from __future__ import annotations

from typing import Any

from gateway.actions import ActionKind
from gateway.protocols import anthropic
from gateway.protocols.canonical import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from gateway.repair import RecordedTurn, Records, TurnsConversation, rebuild_history, repair
from gateway.routing import caps_for
from gateway.sanitize import Policy, sanitize
from gateway.toolchain import NO_RESULT
from state.hashing import exact_hash

TEXT = "  Plan:\r\n  check the weather.  \n"
SIG = "sig-issued-for-TEXT"


def _index(*pairs: tuple[str, str]) -> dict[str, str]:
    return {exact_hash(text): sig for text, sig in pairs}


def _history(thinking: dict[str, Any]) -> list[Message]:
    return anthropic.decode_request({
        "model": "claude-opus-4-5", "max_tokens": 4096, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [thinking, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}]}).messages


def _thinking(msgs: list[Message]) -> ThinkingBlock:
    b = msgs[1].content[0]
    assert isinstance(b, ThinkingBlock)
    return b


def test_layer2_restores_the_signature_of_the_exact_text() -> None:
    msgs = _history({"type": "thinking", "thinking": TEXT})  # the client dropped the signature
    res = repair(msgs, Records(signatures=_index((TEXT, SIG))))
    block = _thinking(msgs)
    assert block.signature == SIG and block.thinking == TEXT
    assert res.is_verified(block) and res.changed
    assert [a.kind for a in res.actions] == [ActionKind.SIGNATURE_RESTORED]
    assert not res.matched  # no turn record was involved


def test_layer2_verifies_an_intact_block_without_changing_it() -> None:
    msgs = _history({"type": "thinking", "thinking": TEXT, "signature": SIG})
    res = repair(msgs, Records(signatures=_index((TEXT, SIG))))
    assert res.is_verified(_thinking(msgs)) and not res.changed and not res.actions


def test_layer2_gives_no_signature_to_trimmed_or_altered_text() -> None:
    """Seed invariant 4.1.1: a signature only ever goes with the exact text it was issued for."""
    for altered in (TEXT.strip(), TEXT.replace("\r\n", "\n"), TEXT + " ", TEXT.upper()):
        msgs = _history({"type": "thinking", "thinking": altered})
        # the index is keyed by the SHA-256 of the exact text: nothing else finds TEXT's signature
        res = repair(msgs, Records(signatures=_index((TEXT, SIG), ("other text", "sig-other"))))
        block = _thinking(msgs)
        assert block.signature is None and not res.is_verified(block), repr(altered)
        assert not res.actions


def test_known_signature_on_other_text_is_unverified_and_dropped() -> None:
    msgs = _history({"type": "thinking", "thinking": "some other text", "signature": SIG})
    res = repair(msgs, Records(signatures=_index((TEXT, SIG))))
    block = _thinking(msgs)
    assert not res.is_verified(block) and block.signature == SIG  # not "repaired" with another text
    req = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096,
                                    "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": []})
    req.messages = msgs
    kinds = [a.kind for a in sanitize(req, res.is_verified, caps_for(req.model), Policy())]
    assert ActionKind.DROPPED in kinds and ActionKind.THINKING_DISABLED in kinds
    assert all(not m.has_thinking() for m in req.messages) and not req.thinking_enabled()


def _recorded_turn() -> RecordedTurn:
    return RecordedTurn("scid-A", 0, (ThinkingBlock(TEXT, SIG), TextBlock("Checking two cities."),
                                      ToolUseBlock("toolu_rec_1", "f", {"city": "Oslo"}),
                                      ToolUseBlock("toolu_rec_2", "f", {"city": "Rome"})))


def test_regenerated_tool_ids_are_mapped_back_in_the_results() -> None:
    turn = _recorded_turn()
    msgs = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [  # thinking gone, ids regenerated: matched by its text
            {"type": "text", "text": "Checking two cities."},
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "call_2", "name": "f", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                                     {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"}]}]}).messages
    res = repair(msgs, Records(conversation=TurnsConversation({0: turn}), scid="scid-A"))
    assert res.matched == {1: turn}
    assert msgs[1].tool_use_ids() == ["toolu_rec_1", "toolu_rec_2"]
    results = [b for b in msgs[2].content if isinstance(b, ToolResultBlock)]
    assert [(b.tool_use_id, b.content) for b in results] == [("toolu_rec_1", "sunny"), ("toolu_rec_2", "rain")]
    kinds = [a.kind for a in res.actions]
    assert kinds.count(ActionKind.TOOL_ID_MAPPED) == 2 and ActionKind.RESTORED in kinds
    # After sanitize the real results are still tool_results: nothing synthesized or textualized.
    req = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096,
                                    "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": []})
    req.messages = msgs
    kinds = [a.kind for a in sanitize(req, res.is_verified, caps_for(req.model), Policy())]
    assert ActionKind.TOOL_RESULT_SYNTHESIZED not in kinds and ActionKind.TOOL_RESULT_TEXTUALIZED not in kinds
    sent = anthropic.encode_request(req)["messages"][2]["content"]
    assert [b["content"] for b in sent] == ["sunny", "rain"] and NO_RESULT not in str(sent)
    assert req.thinking_enabled() and msgs[1].content[0] == ThinkingBlock(TEXT, SIG)


def test_tool_ids_are_mapped_only_for_the_turn_they_belong_to() -> None:
    """A result naming a client id of an unmatched message is left alone (no guessing)."""
    msgs = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_9", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_9", "content": "x"}]}]}).messages
    res = repair(msgs, Records(conversation=TurnsConversation({0: _recorded_turn()}), scid="scid-A"))
    assert not res.matched and not res.actions
    assert msgs[2].tool_result_ids() == ["call_9"]


def test_history_is_rebuilt_for_a_new_message_but_not_for_a_replay_from_the_start() -> None:
    """Server-side thread state: only the client's new message comes; a retry of the first request
    (its first message again) is the client's own path, and no recorded turn is re-added to it."""
    first = Message("user", [TextBlock("weather?")], content_was_string=True)
    turn = RecordedTurn("scid-A", 0, (ThinkingBlock(TEXT, SIG), TextBlock("Sunny.")), prompt_loader=lambda: (first,))
    recs = Records(conversation=TurnsConversation({0: turn}), scid="scid-A")
    rebuilt = rebuild_history(recs, [Message("user", [TextBlock("and tomorrow?")], content_was_string=True)])
    assert rebuilt is not None
    msgs, pinned = rebuilt
    assert [m.role for m in msgs] == ["user", "assistant", "user"] and pinned == {1: turn}
    retry = [Message("user", [TextBlock("weather?")], content_was_string=True)]
    assert rebuild_history(recs, retry) is None

"""Unit tests of repair (pure: replayed history + records -> history + actions).

Layer 2 (the strict exact-text -> signature index) and the mapping of client-regenerated
tool ids back to the recorded ones, each of which the audit could disable without a test
failing.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from gateway.dialects.routing import caps_for
from gateway.dialects.toolchain import NO_RESULT
from gateway.pipeline import identify
from gateway.pipeline.identify import lookup_hashes, path_fingerprint
from gateway.pipeline.repair.core import RepairPrior, rebuild_history, repair
from gateway.pipeline.repair.core import run as repair_run
from gateway.pipeline.repair.records import RecordCaches, RecordedTurn, Records, TurnsConversation, records_from
from gateway.pipeline.sanitize.core import Policy, sanitize
from state.keys import exact_hash, replay_digest
from state.records import ConversationState, TurnRecord
from state.store import LoadResult

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
    kinds = [a.kind for a in sanitize(req, res.is_verified, caps_for(req.model), Policy(), verbatim=res.verbatim)]
    assert ActionKind.DROPPED in kinds and ActionKind.THINKING_DISABLED in kinds
    assert all(not m.has_thinking() for m in req.messages) and not req.thinking_enabled()


def _recorded_turn() -> RecordedTurn:
    """The answer to "weather?" (its path), as recorded."""
    return RecordedTurn("scid-A", 0, (ThinkingBlock(TEXT, SIG), TextBlock("Checking two cities."),
                                      ToolUseBlock("toolu_rec_1", "f", {"city": "Oslo"}),
                                      ToolUseBlock("toolu_rec_2", "f", {"city": "Rome"})),
                        path=path_fingerprint([Message("user", [TextBlock("weather?")])]))


def test_regenerated_tool_ids_are_mapped_back_in_the_results() -> None:
    turn = _recorded_turn()
    msgs = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [  # thinking gone, ids regenerated: matched by its place (the path)
            {"type": "text", "text": "Checking two cities."},
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "call_2", "name": "f", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                                     {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"}]}]}).messages
    assert msgs[2].result_shape().result_ids == ("call_1", "call_2")  # read before repair (a kept message)
    res = repair(msgs, Records(conversation=TurnsConversation({0: turn}), scid="scid-A"))
    assert res.matched == {1: turn}
    assert msgs[1].tool_use_ids() == ["toolu_rec_1", "toolu_rec_2"]
    assert msgs[2].result_shape().result_ids == ("toolu_rec_1", "toolu_rec_2")  # not the shape read before
    results = [b for b in msgs[2].content if isinstance(b, ToolResultBlock)]
    assert [(b.tool_use_id, b.content) for b in results] == [("toolu_rec_1", "sunny"), ("toolu_rec_2", "rain")]
    kinds = [a.kind for a in res.actions]
    assert kinds.count(ActionKind.TOOL_ID_MAPPED) == 2 and ActionKind.RESTORED in kinds
    # After sanitize the real results are still tool_results: nothing synthesized or textualized.
    req = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096,
                                    "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": []})
    req.messages = msgs
    kinds = [a.kind for a in sanitize(req, res.is_verified, caps_for(req.model), Policy(), verbatim=res.verbatim)]
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


def test_history_is_rebuilt_up_to_the_turn_a_previous_response_names() -> None:
    """``upto`` (a ``previous_response_id`` naming an earlier response): the turns after it are not part of the
    path; a turn after it stored without its prompt does not stop the rebuild."""
    first, second = (Message("user", [TextBlock(t)], content_was_string=True) for t in ("weather?", "and Rome?"))
    answer = (ThinkingBlock(TEXT, SIG), TextBlock("Sunny."))
    turns = {0: RecordedTurn("scid-A", 0, answer, prompt_loader=lambda: (first,)),
             1: RecordedTurn("scid-A", 1, answer, prompt_loader=lambda: ())}
    recs = Records(conversation=TurnsConversation(turns), scid="scid-A")
    new = [Message("user", [TextBlock("and Oslo?")], content_was_string=True)]
    rebuilt = rebuild_history(recs, new, upto=0)
    assert rebuilt is not None
    msgs, pinned = rebuilt
    assert [m.role for m in msgs] == ["user", "assistant", "user"] and pinned == {1: turns[0]}
    assert msgs[-1] is new[0] and second not in msgs


def test_history_is_not_rebuilt_when_a_turn_was_stored_without_its_prompt() -> None:
    """A turn whose prompt was too large to store (``StorageLimits.max_prompt_bytes``) cannot be replayed whole:
    no rebuilt history (the request goes on as the client sent it) rather than one with a hole in it."""
    first = Message("user", [TextBlock("weather?")], content_was_string=True)
    answer = (ThinkingBlock(TEXT, SIG), TextBlock("Sunny."))
    turns = {0: RecordedTurn("scid-A", 0, answer, prompt_loader=lambda: (first,)),
             1: RecordedTurn("scid-A", 1, answer, prompt_loader=lambda: ())}
    recs = Records(conversation=TurnsConversation(turns), scid="scid-A")
    assert rebuild_history(recs, [Message("user", [TextBlock("and then?")], content_was_string=True)]) is None


def test_a_mangled_turn_replayed_again_is_restored_by_the_message_that_took_its_place_before() -> None:
    """The replay memo hands a mangled message to the conversation's next request as it is; restored from the
    same record again, it is given the message that took its place on the previous request (no second
    comparison with the record, and the next stages find that message's JSON and shape read already).
    Another record, or the client's message no longer as decoded, is restored afresh."""
    scid = "scid-restore-again-0001"
    thinking = {"type": "thinking", "thinking": TEXT, "signature": SIG}
    text = {"type": "text", "text": "Checking."}
    call = {"type": "tool_use", "id": "toolu_again_1", "name": "f", "input": {"city": "Oslo"}}
    rec = TurnRecord(content=[thinking, text, call], replay_digest=replay_digest([thinking, text, call]) or b"",
                     position=0)

    caches = RecordCaches()  # the worker's, shared by its requests

    def records(r: TurnRecord) -> Records:
        conv = ConversationState(scid=scid, created_at=0, updated_at=0, version=1, turns=(r,), last_verified=None,
                                 first_position=0, next_position=1)
        return records_from(LoadResult(conversation=conv, conversations={scid: conv}), scid, caches)

    msgs = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [text, call]},  # thinking dropped by the client
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_again_1", "content": "sun"}]},
    ]}).messages
    client = msgs[1]
    first, carried = repair_run(msgs, records(rec), None, None)
    restored = msgs[1]
    assert restored is not client and first.verbatim == [1] and [a.kind for a in first.actions] == [ActionKind.RESTORED]
    assert anthropic.encode_message(restored)["content"] == [thinking, text, call]
    assert carried.restorations[id(client)].message is restored
    prior = RepairPrior(restorations=carried.restorations)  # (not resumed: each message looked at again)

    again = [msgs[0], client, msgs[2]]  # the next request: the same client message (the memo's)
    second, _ = repair_run(again, records(rec), None, prior)
    assert again[1] is restored and second.actions == first.actions and second.matched == first.matched
    assert second.verbatim == [1] and second.resumed == 0

    other = TurnRecord(content=list(rec.content), replay_digest=rec.replay_digest, position=0)  # recorded anew
    fresh = [msgs[0], client, msgs[2]]
    repair_run(fresh, records(other), None, prior)
    assert fresh[1] is not restored and anthropic.encode_message(fresh[1]) == anthropic.encode_message(restored)

    twin = anthropic.decode_message(anthropic.encode_message(client), 1)  # equal, but another message object
    fresh = [msgs[0], twin, msgs[2]]
    repair_run(fresh, records(rec), None, prior)
    assert fresh[1] is not restored

    client.content  # noqa: B018  # decoded in place: no longer the JSON it was restored from
    fresh = [msgs[0], client, msgs[2]]
    repair_run(fresh, records(rec), None, prior)
    assert fresh[1] is not restored and anthropic.encode_message(fresh[1]) == anthropic.encode_message(restored)


def test_a_replayed_turns_lookup_hashes_are_read_once_per_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load query looks up a replay's latest turns by their hashes on every request; an undecoded
    message's are computed once (``lookup_hashes``), a decoded one's from its blocks each time."""
    calls: list[int] = []
    real = identify.block_hashes
    monkeypatch.setattr(identify, "block_hashes", lambda blocks: calls.append(1) or real(blocks))
    m = anthropic.decode_message({"role": "assistant", "content": [
        {"type": "thinking", "thinking": TEXT, "signature": SIG}, {"type": "text", "text": "<think>x</think> y"}]}, 1)
    hashes = lookup_hashes(m)
    assert hashes[1] == (exact_hash(TEXT),) and len(hashes[0]) == 4  # thinking, text, tagged inner, outer
    assert lookup_hashes(m) == hashes and calls == [1]
    m.content  # noqa: B018  # decoded: its blocks may change, so they are read each time
    assert lookup_hashes(m) == hashes and lookup_hashes(m) == hashes and calls == [1, 1, 1]

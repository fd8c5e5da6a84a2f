"""The pure rules for model switches and clear_thinking and compaction (``gateway.pipeline.repair.edits``),
the compaction block in sanitize and in the stream accumulator, and
``routing.reads_thinking``."""

from __future__ import annotations

from typing import Any

from gateway.actions import Action, ActionKind
from gateway.dialects.accumulate import Snapshot, accumulate, message_dict
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message
from gateway.dialects.routing import caps_for, reads_thinking
from gateway.pipeline.repair import edits
from gateway.pipeline.repair.core import RepairResult
from gateway.pipeline.repair.records import RecordedTurn
from gateway.pipeline.sanitize.core import Policy, sanitize

THINK = {"type": "thinking", "thinking": "plan\r\n", "signature": "sig-ok"}
COMPACTION = {"type": "compaction", "content": "<summary>  so far \r\n</summary>\n", "signature": "c-sig"}
U = {"role": "user", "content": "hi"}


def tool_use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "f", "input": {}}


def result(tid: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": "ok"}]}


def msgs(*raw: dict[str, Any]) -> list[Message]:
    return [anthropic.decode_message(m, i) for i, m in enumerate(raw)]


def test_reads_thinking_by_family() -> None:
    assert reads_thinking("claude-sonnet-5-5", "claude-sonnet-5-5-20261101")
    assert reads_thinking("claude-opus-5-5", "claude-sonnet-5-5")
    assert reads_thinking("claude-opus-5-5", "claude-opus-4-5")
    assert not reads_thinking("claude-sonnet-5-5", "claude-opus-5-5")
    assert not reads_thinking("claude-opus-5-5", "claude-fable-5-1")
    assert reads_thinking("claude-fable-5-1", "claude-opus-5-5")
    assert not reads_thinking("claude-opus-4-5", "claude-sonnet-4-5")
    assert caps_for("claude-sonnet-5-5").drops_unreadable_thinking
    assert not caps_for("claude-sonnet-4-6").drops_unreadable_thinking


def test_model_switch_passes_blocks_to_a_binding_model_and_counts() -> None:
    m = msgs(U, {"role": "assistant", "content": [THINK, tool_use("t1")]}, result("t1"))
    before = m[1]
    actions = edits.apply_model_switch(m, {1: RecordedTurn("s", 0, model="claude-opus-5-5")}, "claude-sonnet-5-5",
                                 caps_for("claude-sonnet-5-5"))
    assert actions == [Action(ActionKind.MODEL_BINDING_MISMATCH, 1)]
    assert m[1] is before and m[1].has_thinking()


def test_model_switch_to_an_older_model_leaves_the_thinking_out() -> None:
    m = msgs(U, {"role": "assistant", "content": [THINK, tool_use("t1")]}, result("t1"))
    client = m[1]
    actions = edits.apply_model_switch(m, {1: RecordedTurn("s", 0, model="claude-sonnet-4-5-20250929")},
                                       "claude-opus-4-5", caps_for("claude-opus-4-5"))
    assert actions == [Action(ActionKind.DROPPED, 1, "model_switch")]
    assert not m[1].has_thinking() and client.has_thinking()  # a new message; the client's is untouched
    # then sanitize keeps the thinking configuration consistent: the open loop has no verified thinking
    req = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 4096, "messages": [],
                                    "thinking": {"type": "enabled", "budget_tokens": 2048}})
    req.messages = m
    kinds = [a.kind for a in sanitize(req, lambda b: True, caps_for(req.model), Policy())]
    assert ActionKind.THINKING_DISABLED in kinds


def test_same_model_or_unknown_model_is_left_alone() -> None:
    m = msgs(U, {"role": "assistant", "content": [THINK, tool_use("t1")]}, result("t1"))
    caps = caps_for("claude-opus-4-5")
    assert edits.apply_model_switch(m, {1: RecordedTurn("s", 0, model="claude-opus-4-5-20251101")}, "claude-opus-4-5",
                              caps) == []
    assert edits.apply_model_switch(m, {1: RecordedTurn("s", 0)}, "claude-opus-4-5", caps) == []


CLEAR = {"context_management": {"edits": [{"type": "clear_thinking_20251015",
                                           "keep": {"type": "thinking_turns", "value": 1}}]}}


def test_kept_turns() -> None:
    assert edits.kept_turns(CLEAR) == 1
    assert edits.kept_turns({}) is None
    assert edits.kept_turns({"context_management": {"edits": [{"type": "clear_thinking_20251015"}]}}) == 1
    assert edits.kept_turns({"context_management": {"edits": [
        {"type": "clear_thinking_20251015", "keep": "all"}]}}) is None


def _turns() -> tuple[list[Message], list[Message], RepairResult]:
    """A client that dropped the thinking of two older turns; repair restored all three."""
    recorded = [{"role": "assistant", "content": [THINK, tool_use(f"t{k}")]} for k in range(3)]
    full = msgs(U, recorded[0], result("t0"), recorded[1], result("t1"), {"role": "user", "content": "next"},
                recorded[2], result("t2"))
    client = list(full)
    for i in (1, 3, 6):
        client[i] = Message("assistant", [b for b in full[i].content if b.type != "thinking"])
    res = RepairResult(actions=[Action(ActionKind.RESTORED, i) for i in (1, 3, 6)])
    return full, client, res


def test_cleared_thinking_is_not_restored_but_the_loop_opener_is() -> None:
    full, client, res = _turns()
    actions = edits.apply_context_edits(CLEAR, full, client, res)
    assert actions == [Action(ActionKind.THINKING_CLEARED, 1), Action(ActionKind.THINKING_CLEARED, 3)]
    assert [m.has_thinking() for m in full if m.role == "assistant"] == [False, False, True]


def test_without_the_edit_everything_restored_stays() -> None:
    full, client, res = _turns()
    assert edits.apply_context_edits({}, full, client, res) == []
    assert all(m.has_thinking() for m in full if m.role == "assistant")


def test_a_restored_compaction_block_is_counted_once_it_differs() -> None:
    turn = {"role": "assistant", "content": [COMPACTION, THINK, tool_use("t1")]}
    full = msgs(U, turn, result("t1"))
    res = RepairResult(actions=[Action(ActionKind.RESTORED, 1)])
    dropped = msgs(U, {"role": "assistant", "content": [THINK, tool_use("t1")]}, result("t1"))
    assert edits.apply_context_edits({}, full, dropped, res) == [Action(ActionKind.COMPACTION_RESTORED, 1)]
    edited = msgs(U, {"role": "assistant", "content": [{**COMPACTION, "content": "<summary> so far\n</summary>\n"},
                                                       THINK, tool_use("t1")]}, result("t1"))
    assert edits.apply_context_edits({}, full, edited, res) == [Action(ActionKind.COMPACTION_RESTORED, 1)]
    assert edits.apply_context_edits({}, full, msgs(U, turn, result("t1")), res) == []


def test_sanitize_keeps_a_leading_compaction_block_first() -> None:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "thinking": {"type": "adaptive"},
            "messages": [U, {"role": "assistant", "content": [COMPACTION, THINK, tool_use("t1")]}, result("t1")]}
    req = anthropic.decode_request(body)
    kinds = [a.kind for a in sanitize(req, lambda b: True, caps_for(req.model), Policy())]
    assert ActionKind.BLOCKS_REORDERED not in kinds and ActionKind.THINKING_DISABLED not in kinds
    assert anthropic.encode_request(req)["messages"][1]["content"] == [COMPACTION, THINK, tool_use("t1")]


def test_streamed_compaction_block_accumulates_as_sent_whole() -> None:
    snap = Snapshot()
    for event in [
        {"type": "message_start", "message": {"id": "m", "content": [], "usage": {}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "compaction", "content": None, "signature": "c-sig"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "compaction_delta", "content": COMPACTION["content"]}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "compaction"}, "usage": {"output_tokens": 9},
         "context_management": {"applied_edits": []}},
    ]:
        accumulate(event, snap)
    message = message_dict(snap)
    assert message["content"] == [COMPACTION]
    assert message["context_management"] == {"applied_edits": []} and message["stop_reason"] == "compaction"

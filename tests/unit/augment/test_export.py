"""The pure conversation export (ADR 002 option 2) and its redaction."""

from __future__ import annotations

from typing import Any

from gateway.surfaces.export import export_conversation, openai_request_messages, tool_content
from state.records import ConversationState, TurnRecord

SIG = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=="
DATA = "EmwKAhgBEgy3va3pzix/LafPsn4a"


def conversation(*records: TurnRecord) -> ConversationState:
    turns = tuple(TurnRecord(**{**{f: getattr(r, f) for f in ("content", "model", "upstream", "dialect", "provider",
                                                              "prompt")}, "position": i})
                  for i, r in enumerate(records))
    return ConversationState(scid="S" * 22, created_at=1.0, updated_at=2.0, version=len(turns), turns=turns,
                             last_verified=None, first_position=0, next_position=len(turns))


def iteration(prompt: list[dict[str, Any]], *, final: bool = False) -> TurnRecord:
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "plan", "signature": SIG},
        {"type": "redacted_thinking", "data": DATA},
        {"type": "text", "text": "Calling "}, {"type": "text", "text": "two tools."}]
    if not final:
        content += [{"type": "tool_use", "id": "toolu_a", "name": "get", "input": {"q": 1}},
                    {"type": "tool_use", "id": "toolu_b", "name": "get", "input": {"q": 2}}]
    return TurnRecord(content=content, model="claude-opus-4-5", upstream="anthropic", dialect="augment",
                      provider={"opaque": "xyz"}, prompt=prompt)


CONV = conversation(
    iteration([{"role": "user", "content": "go"}]),
    iteration([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "fine"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": [{"type": "text", "text": "{\"t\": 2}"}]},
        {"type": "text", "text": "and hurry"}]}], final=True),
)


def test_openai_per_iteration() -> None:
    out = export_conversation(CONV)
    assert out["format"] == "openai" and out["signatures"] == "redacted"
    assert out["turns"][0]["provider"] == {"opaque": "[redacted len=3]"}
    details = [{"type": "reasoning.text", "text": "plan", "signature": f"[redacted len={len(SIG)}]",
                "format": "anthropic-claude-v1", "index": 0},
               {"type": "reasoning.encrypted", "data": f"[redacted len={len(DATA)}]",
                "format": "anthropic-claude-v1", "index": 1}]
    assert out["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Calling two tools.", "reasoning_content": "plan",
         "reasoning_details": details,
         "tool_calls": [{"id": "toolu_a", "type": "function", "function": {"name": "get", "arguments": '{"q":1}'}},
                        {"id": "toolu_b", "type": "function", "function": {"name": "get", "arguments": '{"q":2}'}}]},
        {"role": "tool", "tool_call_id": "toolu_a", "content": "fine"},
        {"role": "tool", "tool_call_id": "toolu_b", "content": '[{"type":"text","text":"{\\"t\\": 2}"}]'},
        {"role": "user", "content": "and hurry"},
        {"role": "assistant", "content": "Calling two tools.", "reasoning_content": "plan",
         "reasoning_details": details},
    ]


def test_include_signatures_and_anthropic_format() -> None:
    full = export_conversation(CONV, include_signatures=True)
    assert full["messages"][1]["reasoning_details"][0]["signature"] == SIG
    assert full["messages"][1]["reasoning_details"][1]["data"] == DATA
    assert full["turns"][0]["provider"] == {"opaque": "xyz"}
    anth = export_conversation(CONV, "anthropic")
    assert [m["role"] for m in anth["messages"]] == ["user", "assistant", "user", "assistant"]
    assert anth["messages"][1]["content"][:2] == [
        {"type": "thinking", "thinking": "plan", "signature": f"[redacted len={len(SIG)}]"},
        {"type": "redacted_thinking", "data": f"[redacted len={len(DATA)}]"}]
    assert anth["messages"][1]["content"][4]["input"] == {"q": 1}
    assert export_conversation(CONV, "anthropic", include_signatures=True)["messages"][1]["content"][0][
        "signature"] == SIG


def test_request_side_shapes() -> None:
    assert tool_content({"a": [1, "é"]}) == '{"a":[1,"é"]}' and tool_content(None) == ""
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
    doc = {"type": "document", "source": {"type": "text", "data": "d"}}
    assert openai_request_messages({"role": "user", "content": [{"type": "text", "text": "see"}, img, doc]}) == [
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                                     doc]}]
    assert openai_request_messages({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": True}]}) == [
        {"role": "tool", "tool_call_id": "t1", "content": ""}]

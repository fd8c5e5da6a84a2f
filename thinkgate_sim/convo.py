"""A read-only view of a raw Anthropic ``messages`` list, shared by the rules and the scenarios.

``role: "system"`` entries (Claude Code sends one inside ``messages``) are skipped;
every ``Msg`` keeps its index ``i`` in the raw request so error paths point at the
real position. String content is viewed as one ``text`` block.

Turns: a user message that carries no ``tool_result`` block opens a turn; the
assistant messages after it form that turn's tool loop. A user message mixing
``tool_result`` with text (Claude Code appends reminders to tool results) continues
the loop. The rules (rule 9, the relaxed signature scope) and the scenarios (round
counting, when to think) use this one definition so the simulator always accepts
its own replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


@dataclass(frozen=True, slots=True)
class Msg:
    i: int  # index in the raw request's ``messages``
    role: str  # "user" | "assistant"
    blocks: tuple[dict[str, Any], ...]

    def types(self) -> list[str]:
        return [str(b.get("type")) for b in self.blocks]

    def has_thinking(self) -> bool:
        return any(b.get("type") in THINKING_TYPES for b in self.blocks)

    def tool_use_ids(self) -> list[str]:
        return [b["id"] for b in self.blocks if b.get("type") == "tool_use" and isinstance(b.get("id"), str)]

    def tool_results(self) -> list[tuple[int, str]]:
        return [(j, b["tool_use_id"]) for j, b in enumerate(self.blocks)
                if b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)]

    def opens_turn(self) -> bool:
        return self.role == "user" and not any(b.get("type") == "tool_result" for b in self.blocks)


def view(messages: Any) -> list[Msg]:
    """User and assistant messages of a (shape-checked) ``messages`` list."""
    out: list[Msg] = []
    if not isinstance(messages, list):
        return out
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        content = m.get("content")
        if isinstance(content, str):
            blocks: tuple[dict[str, Any], ...] = ({"type": "text", "text": content},)
        elif isinstance(content, list):
            blocks = tuple(b for b in content if isinstance(b, dict))
        else:
            blocks = ()
        out.append(Msg(i, m["role"], blocks))
    return out


def turn_start(msgs: list[Msg]) -> int:
    """Position in ``msgs`` just after the last turn-opening user message (0 if none)."""
    for pos in range(len(msgs) - 1, -1, -1):
        if msgs[pos].opens_turn():
            return pos + 1
    return 0


def turn_number(msgs: list[Msg]) -> int:
    """How many turn-opening user messages the conversation has so far."""
    return sum(1 for m in msgs if m.opens_turn())


def tool_round(msgs: list[Msg]) -> int:
    """Assistant messages carrying ``tool_use`` in the current turn."""
    return sum(1 for m in msgs[turn_start(msgs):] if m.role == "assistant" and m.tool_use_ids())


def first_user_text(messages: Any) -> str:
    """Text of the first user message (string content or its text blocks joined)."""
    for m in view(messages):
        if m.role == "user":
            return "\n".join(str(b.get("text", "")) for b in m.blocks if b.get("type") == "text")
    return ""

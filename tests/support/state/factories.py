"""Builders for turn records used across the state tests."""

from __future__ import annotations

from typing import Any

from state.keys import tenant_prefix
from state.records import TurnRecord

TENANT_A = tenant_prefix(b"test-secret", "sk-ant-tenant-a")
TENANT_B = tenant_prefix(b"test-secret", "sk-ant-tenant-b")


def turn(i: int, *, tag: str = "t", thinking: str | None = None, signature: str | None = None,
         text: str | None = None, tool: bool = True, fingerprint: str | None = None,
         **extra: Any) -> TurnRecord:
    """A realistic assistant turn: thinking (+signature), text, and a tool_use with a unique id."""
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": thinking if thinking is not None else f"Let me think about {tag}-{i}.\r\n",
         "signature": signature if signature is not None else f"sig-{tag}-{i}=="},
        {"type": "text", "text": text if text is not None else f"Answer {tag} {i}."},
    ]
    if tool:
        content.append({"type": "tool_use", "id": f"toolu_{tag}_{i}", "name": "read_file",
                        "input": {"path": f"/src/{tag}/{i}.py", "n": i}})
    return TurnRecord(content=content, model="claude-test", upstream="anthropic", dialect="anthropic",
                      prefix_fingerprint=fingerprint, **extra)


def big_turn(i: int, *, tag: str = "big", thinking_chars: int = 4000) -> TurnRecord:
    """A turn with a long thinking text (prose-like) to exercise compression and sizes."""
    words = ("the model considers the file layout and the failing test before it edits the parser "
             "because the tool result showed an off by one error in line ").split()
    text = " ".join(words[(i + k) % len(words)] for k in range(thinking_chars // 6))
    return turn(i, tag=tag, thinking=text + f" ({i})", signature="Eq" + "A" * 300 + f"{i}==")

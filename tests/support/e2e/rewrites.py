"""Client behaviours over Anthropic ``messages`` history that issue 20's tests replay: tool ids the
client numbers itself, thinking dropped, a tool round dropped, the first message edited. Each takes the
whole history as the client holds it (what the gateway answered) and returns a mangled deep copy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

History = list[dict[str, Any]]
Rewrite = Callable[[History], History]

THINKING_TYPES = ("thinking", "redacted_thinking")


def rewrite_tool_ids(history: History, per: Literal["conversation", "message"] = "conversation") -> History:
    """The client names tool calls itself: ``call_1``, ``call_2`` ... over the conversation, or
    ``call_0``, ``call_1`` ... restarting in every assistant message (so two rounds that each call one
    tool share the id ``call_0``); every ``tool_result`` follows its call's new id."""
    out = copy.deepcopy(history)
    ids: dict[str, str] = {}
    for m in out:
        if not isinstance(m["content"], list):
            continue
        if m["role"] == "assistant":
            calls = [b for b in m["content"] if b.get("type") == "tool_use"]
            for k, b in enumerate(calls):
                ids[b["id"]] = f"call_{k}" if per == "message" else ids.get(b["id"], f"call_{len(ids) + 1}")
                b["id"] = ids[b["id"]]
        else:
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    b["tool_use_id"] = ids.get(b["tool_use_id"], b["tool_use_id"])
    return out


def drop_thinking(history: History) -> History:
    """Thinking and redacted thinking removed from every assistant message."""
    out = copy.deepcopy(history)
    for m in out:
        if m["role"] == "assistant" and isinstance(m["content"], list):
            m["content"] = [b for b in m["content"] if b.get("type") not in THINKING_TYPES]
    return out


def drop_first_tool_round(history: History) -> History:
    """Once two tool rounds were answered, the first assistant tool-call message and the results after it
    are left out (a client compacting its history); the upstream then sees one round fewer."""
    out = copy.deepcopy(history)
    calls = [k for k, m in enumerate(out) if m["role"] == "assistant" and isinstance(m["content"], list)
             and any(b.get("type") == "tool_use" for b in m["content"])]
    if len(calls) < 2:
        return out
    k = calls[0]
    return out[:k] + out[k + 2:]


EDIT = " Please keep it short."


def edit_first_message(history: History) -> History:
    """After the first answer the client edits its first message (appends a sentence; any marker stays)."""
    out = copy.deepcopy(history)
    if len(out) > 1:
        first = out[0]
        if isinstance(first["content"], str):
            first["content"] += EDIT
        else:
            first["content"] = [*first["content"], {"type": "text", "text": EDIT.strip()}]
    return out


def both(*fns: Rewrite) -> Rewrite:
    def apply(history: History) -> History:
        for fn in fns:
            history = fn(history)
        return history
    return apply


ANTHROPIC: dict[str, Rewrite] = {
    "faithful": copy.deepcopy,
    "ids_per_conversation": rewrite_tool_ids,
    "no_thinking_ids_per_conversation": both(drop_thinking, rewrite_tool_ids),
    "no_thinking_ids_per_message": both(drop_thinking, lambda h: rewrite_tool_ids(h, "message")),
    "no_thinking": drop_thinking,
    "drop_first_tool_round": drop_first_tool_round,
    "edit_first_message": edit_first_message,
}


def strings(obj: Any) -> set[str]:
    """Every string value anywhere in a JSON document (dict keys left out)."""
    out: set[str] = set()
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            out.add(node)
    return out

"""How OpenAI-dialect clients mangle replayed history, as functions over chat messages.

Each takes the whole ``messages`` list (as the client would send it faithfully) and
returns a mangled deep copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

History = list[dict[str, Any]]


def _each_assistant(fn: Callable[[dict[str, Any]], None]) -> Callable[[History], History]:
    def apply(history: History) -> History:
        out = copy.deepcopy(history)
        for m in out:
            if m["role"] == "assistant":
                fn(m)
        return out
    return apply


def _drop(*keys: str) -> Callable[[dict[str, Any]], None]:
    def f(m: dict[str, Any]) -> None:
        for k in keys:
            m.pop(k, None)
    return f


def _text_entries_only(m: dict[str, Any]) -> None:
    """Keep only the text of ``reasoning.text`` entries (signatures, format, index stripped)."""
    m["reasoning_details"] = [{"type": "reasoning.text", "text": d["text"]}
                              for d in m.get("reasoning_details", []) if d.get("type") == "reasoning.text"]


def _tool_only(empty: Any, *drop: str) -> Callable[[dict[str, Any]], None]:
    """A client that shows tool-call turns without their text sends ``content`` as ``empty``."""
    def f(m: dict[str, Any]) -> None:
        if m.get("tool_calls"):
            m["content"] = copy.copy(empty)
        for k in drop:
            m.pop(k, None)
    return f


def rewrite_tool_ids(history: History) -> History:
    """The client numbers tool calls itself (call_1, call_2, ...), consistently on both sides."""
    out = copy.deepcopy(history)
    ids: dict[str, str] = {}
    for m in out:
        for call in m.get("tool_calls") or []:
            call["id"] = ids.setdefault(call["id"], f"call_{len(ids) + 1}")
        if m["role"] == "tool":
            m["tool_call_id"] = ids.get(m["tool_call_id"], m["tool_call_id"])
    return out


def reorder_tool_messages(history: History) -> History:
    """Tool responses come back in another order than the calls (reversed within each run)."""
    out: History = []
    run: History = []
    for m in copy.deepcopy(history):
        if m["role"] == "tool":
            run.append(m)
            continue
        out += reversed(run)
        run = []
        out.append(m)
    return out + list(reversed(run))


MANGLINGS: dict[str, Callable[[History], History]] = {
    "faithful": lambda h: copy.deepcopy(h),
    "drop_reasoning_details": _each_assistant(_drop("reasoning_details")),
    "drop_reasoning_content": _each_assistant(_drop("reasoning_content")),
    "drop_reasoning": _each_assistant(_drop("reasoning_details", "reasoning_content")),
    "text_entries_only": _each_assistant(_text_entries_only),
    "text_entries_only_no_content": _each_assistant(lambda m: (_text_entries_only(m),
                                                               m.pop("reasoning_content", None))),
    "content_empty_list": _each_assistant(_tool_only([])),
    "content_empty_string": _each_assistant(_tool_only("")),
    "content_empty_string_no_reasoning": _each_assistant(_tool_only("", "reasoning_details", "reasoning_content")),
    "tool_ids_rewritten": rewrite_tool_ids,
    "tool_ids_rewritten_no_reasoning": lambda h: rewrite_tool_ids(
        _each_assistant(_drop("reasoning_details", "reasoning_content"))(h)),
    "tool_results_reordered": reorder_tool_messages,
}

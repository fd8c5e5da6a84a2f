"""How clients mangle replayed Gemini history: over native ``contents`` and over OpenAI messages
of a Gemini conversation. Each returns a mangled deep copy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Contents = list[dict[str, Any]]


def _parts(fn: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> Callable[[Contents], Contents]:
    def apply(contents: Contents) -> Contents:
        out = copy.deepcopy(contents)
        for c in out:
            c["parts"] = fn(c)
        return out
    return apply


def _drop_signatures(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "thoughtSignature"} for p in c["parts"]]


def _copy_first_signature(c: dict[str, Any]) -> list[dict[str, Any]]:
    sig = next((p.get("thoughtSignature") for p in c["parts"] if "functionCall" in p), None)
    return [{**p, "thoughtSignature": sig} if "functionCall" in p and sig else p for p in c["parts"]]


def _drop_thoughts(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in c["parts"] if not p.get("thought")] or c["parts"]


def _reverse_responses(c: dict[str, Any]) -> list[dict[str, Any]]:
    if all("functionResponse" in p for p in c["parts"]):
        return list(reversed(c["parts"]))
    return c["parts"]


def _snake(c: dict[str, Any]) -> list[dict[str, Any]]:
    names = {"thoughtSignature": "thought_signature", "functionCall": "function_call",
             "functionResponse": "function_response"}
    return [{names.get(k, k): v for k, v in p.items()} for p in c["parts"]]


NATIVE: dict[str, Callable[[Contents], Contents]] = {
    "faithful": copy.deepcopy,
    "drop_signatures": _parts(_drop_signatures),
    "copy_signature_to_parallel_calls": _parts(_copy_first_signature),
    "drop_thoughts_and_signatures": _parts(lambda c: _drop_signatures({"parts": _drop_thoughts(c)})),
    "responses_reordered": _parts(_reverse_responses),
    "snake_case_fields": _parts(_snake),
}


# ---------------------------------------------------------------- OpenAI messages

History = list[dict[str, Any]]


def _assistants(fn: Callable[[dict[str, Any]], None]) -> Callable[[History], History]:
    def apply(history: History) -> History:
        out = copy.deepcopy(history)
        for m in out:
            if m["role"] == "assistant":
                fn(m)
        return out
    return apply


def _drop_extra_content(m: dict[str, Any]) -> None:
    m.pop("extra_content", None)
    for c in m.get("tool_calls") or []:
        c.pop("extra_content", None)


def _copy_extra_content(m: dict[str, Any]) -> None:
    calls = m.get("tool_calls") or []
    if calls and "extra_content" in calls[0]:
        for c in calls[1:]:
            c["extra_content"] = copy.deepcopy(calls[0]["extra_content"])


def _content(empty: Any) -> Callable[[dict[str, Any]], None]:
    def f(m: dict[str, Any]) -> None:
        if m.get("tool_calls"):
            m["content"] = copy.copy(empty)
    return f


def _drop(*keys: str) -> Callable[[dict[str, Any]], None]:
    def f(m: dict[str, Any]) -> None:
        for k in keys:
            m.pop(k, None)
    return f


def _text_entries_only(m: dict[str, Any]) -> None:
    if "reasoning_details" in m:
        m["reasoning_details"] = [{"type": "reasoning.text", "text": d.get("text")}
                                  for d in m["reasoning_details"] if d.get("type") == "reasoning.text"]


def rewrite_tool_ids(history: History) -> History:
    out = copy.deepcopy(history)
    ids: dict[str, str] = {}
    for m in out:
        for call in m.get("tool_calls") or []:
            call["id"] = ids.setdefault(call["id"], f"call_{len(ids) + 1}")
        if m["role"] == "tool":
            m["tool_call_id"] = ids.get(m["tool_call_id"], m["tool_call_id"])
    return out


def reorder_tool_messages(history: History) -> History:
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


def _both(*fns: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def f(m: dict[str, Any]) -> None:
        for fn in fns:
            fn(m)
    return f


_REASONING = ("reasoning_content", "reasoning_details", "reasoning_opaque", "reasoning_text")
OPENAI: dict[str, Callable[[History], History]] = {
    "faithful": copy.deepcopy,
    "drop_extra_content": _assistants(_drop_extra_content),
    "copy_signature_to_parallel_calls": _assistants(_copy_extra_content),
    "drop_reasoning_content": _assistants(_drop("reasoning_content")),
    "drop_reasoning_details": _assistants(_drop("reasoning_details")),
    "drop_reasoning_opaque": _assistants(_drop("reasoning_opaque")),
    "drop_all_reasoning": _assistants(_both(_drop_extra_content, _drop(*_REASONING))),
    "text_entries_only": _assistants(_text_entries_only),
    "content_empty_list": _assistants(_content([])),
    "content_empty_string": _assistants(_content("")),
    "tool_ids_rewritten": rewrite_tool_ids,
    "tool_results_reordered": reorder_tool_messages,
    "tool_ids_rewritten_no_reasoning": lambda h: rewrite_tool_ids(_assistants(_both(
        _drop_extra_content, _drop(*_REASONING)))(h)),
}

"""How OpenAI-dialect clients mangle replayed history, as functions over chat ``messages``.

Each takes the whole ``messages`` list (as the client would send it faithfully) and returns a mangled
deep copy. The same client habits meet every upstream behind the OpenAI surface; what differs is which
provider fields the answers carry (``BY_UPSTREAM``): ``reasoning_details`` (an Anthropic upstream,
OpenRouter), ``reasoning_content`` (an Anthropic upstream, DeepSeek), ``reasoning_opaque`` /
``reasoning_text`` (Copilot), ``extra_content.google.thought_signature`` on tool calls (Gemini, natively
or through its OpenAI-compatibility layer).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.support.manglings.anthropic import drop_latest_assistant

History = list[dict[str, Any]]

# Every provider reasoning field an assistant message may carry (besides ``extra_content``).
REASONING_FIELDS = ("reasoning_content", "reasoning_details", "reasoning_opaque", "reasoning_text")


def _assistants(fn: Callable[[dict[str, Any]], None]) -> Callable[[History], History]:
    def apply(history: History) -> History:
        out = copy.deepcopy(history)
        for m in out:
            if m["role"] == "assistant":
                fn(m)
        return out
    return apply


def _both(*fns: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def f(m: dict[str, Any]) -> None:
        for fn in fns:
            fn(m)
    return f


def _drop(*keys: str) -> Callable[[dict[str, Any]], None]:
    def f(m: dict[str, Any]) -> None:
        for k in keys:
            m.pop(k, None)
    return f


def _drop_extra_content(m: dict[str, Any]) -> None:
    m.pop("extra_content", None)
    for c in m.get("tool_calls") or []:
        c.pop("extra_content", None)


_drop_all_reasoning = _both(_drop_extra_content, _drop(*REASONING_FIELDS))


def _copy_extra_content(m: dict[str, Any]) -> None:
    """The first call's signature copied onto the parallel calls after it."""
    calls = m.get("tool_calls") or []
    if calls and "extra_content" in calls[0]:
        for c in calls[1:]:
            c["extra_content"] = copy.deepcopy(calls[0]["extra_content"])


def _text_entries_only(m: dict[str, Any]) -> None:
    """Keep only the text of ``reasoning.text`` entries (signatures, format, index stripped)."""
    if "reasoning_details" in m:
        m["reasoning_details"] = [{"type": "reasoning.text", "text": d.get("text")}
                                  for d in m["reasoning_details"] if d.get("type") == "reasoning.text"]


def _content(empty: Any) -> Callable[[dict[str, Any]], None]:
    """A client that shows tool-call turns without their text sends ``content`` as ``empty``."""
    def f(m: dict[str, Any]) -> None:
        if m.get("tool_calls"):
            m["content"] = copy.copy(empty)
    return f


def split_parallel_calls(history: History) -> History:
    """An assistant message with N tool calls replayed as N assistant messages with one call each, every one
    repeating its reasoning fields (the content with the first), each followed by its tool message (LiteLLM /
    any-llm message splitting)."""
    out: History = []
    msgs = copy.deepcopy(history)
    i = 0
    while i < len(msgs):
        m = msgs[i]
        calls = m.get("tool_calls") or [] if m["role"] == "assistant" else []
        if len(calls) < 2:
            out.append(m)
            i += 1
            continue
        j = i + 1
        results = {}
        while j < len(msgs) and msgs[j]["role"] == "tool":
            results[msgs[j]["tool_call_id"]] = msgs[j]
            j += 1
        for k, call in enumerate(calls):
            one = {**m, "tool_calls": [call]}
            if k:
                one["content"] = None
            out.append(one)
            if call["id"] in results:
                out.append(results.pop(call["id"]))
        out += list(results.values())
        i = j
    return out


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


def _reasoning_texts(fn: Callable[[str], str]) -> Callable[[dict[str, Any]], None]:
    """Each ``reasoning.text`` entry's text changed by ``fn`` (its signature kept)."""
    def f(m: dict[str, Any]) -> None:
        for d in m.get("reasoning_details") or []:
            if isinstance(d, dict) and d.get("type") == "reasoning.text" and isinstance(d.get("text"), str):
                d["text"] = fn(d["text"])
    return f


def swap_reasoning_signatures(history: History) -> History:
    """Each assistant message's ``reasoning.text`` signature replaced by the one of the assistant message before it
    (the first gets the last's): every signature genuine, each on another turn's text."""
    out = copy.deepcopy(history)
    entries = [d for m in out if m["role"] == "assistant" for d in m.get("reasoning_details") or []
               if isinstance(d, dict) and d.get("type") == "reasoning.text" and d.get("signature")]
    if len(entries) > 1:
        sigs = [d["signature"] for d in entries]
        for d, sig in zip(entries, sigs[-1:] + sigs[:-1], strict=True):
            d["signature"] = sig
    return out


MANGLINGS: dict[str, Callable[[History], History]] = {
    "faithful": copy.deepcopy,
    "drop_reasoning_details": _assistants(_drop("reasoning_details")),
    "drop_reasoning_content": _assistants(_drop("reasoning_content")),
    "drop_reasoning_opaque": _assistants(_drop("reasoning_opaque")),
    "drop_extra_content": _assistants(_drop_extra_content),
    "drop_all_reasoning": _assistants(_drop_all_reasoning),
    "copy_signature_to_parallel_calls": _assistants(_copy_extra_content),
    "text_entries_only": _assistants(_text_entries_only),
    "text_entries_only_no_content": _assistants(_both(_text_entries_only, _drop("reasoning_content"))),
    "content_empty_list": _assistants(_content([])),
    "content_empty_string": _assistants(_content("")),
    "content_empty_string_no_reasoning": _assistants(_both(_content(""), _drop_all_reasoning)),
    "tool_ids_rewritten": rewrite_tool_ids,
    "tool_ids_rewritten_no_reasoning": lambda h: rewrite_tool_ids(_assistants(_drop_all_reasoning)(h)),
    "tool_results_reordered": reorder_tool_messages,
    "drop_latest_assistant": drop_latest_assistant,
    "split_parallel_calls": split_parallel_calls,
    "reasoning_text_trimmed": _assistants(_reasoning_texts(str.strip)),
    "reasoning_text_crlf_to_lf": _assistants(_reasoning_texts(lambda t: t.replace("\r\n", "\n"))),
    "reasoning_text_truncated": _assistants(_reasoning_texts(lambda t: t[: len(t) // 2])),
    "reasoning_text_blank": _assistants(_reasoning_texts(lambda t: "")),
    "reasoning_signatures_swapped": swap_reasoning_signatures,
}
# the manglings of reasoning_details' text and signatures (OpenRouter: the text is signed)
REASONING_TEXT = ("reasoning_text_trimmed", "reasoning_text_crlf_to_lf", "reasoning_text_truncated",
                  "reasoning_text_blank", "reasoning_signatures_swapped")

# The manglings played per upstream behind the OpenAI surface (in the acceptance matrix's row order): those
# that touch a field that upstream's answers carry, and the ones every client habit shares.
BY_UPSTREAM: dict[str, tuple[str, ...]] = {
    "anthropic": ("content_empty_list", "content_empty_string", "content_empty_string_no_reasoning",
                  "drop_all_reasoning", "drop_reasoning_content", "drop_reasoning_details", "faithful",
                  "text_entries_only", "text_entries_only_no_content", "tool_ids_rewritten",
                  "tool_ids_rewritten_no_reasoning", "tool_results_reordered", "drop_latest_assistant",
                  "split_parallel_calls"),
    "gemini": ("faithful", "drop_extra_content", "copy_signature_to_parallel_calls", "drop_reasoning_content",
               "drop_all_reasoning", "content_empty_list", "content_empty_string", "tool_ids_rewritten",
               "tool_results_reordered", "tool_ids_rewritten_no_reasoning"),
    "openrouter": ("faithful", "drop_reasoning_details", "text_entries_only", "drop_all_reasoning",
                   "content_empty_list", "content_empty_string", "tool_ids_rewritten", "tool_results_reordered",
                   "drop_latest_assistant", "split_parallel_calls"),
    "copilot": ("faithful", "drop_reasoning_opaque", "drop_all_reasoning", "content_empty_list",
                "content_empty_string", "tool_ids_rewritten_no_reasoning", "drop_latest_assistant",
                "split_parallel_calls"),
    "deepseek": ("faithful", "drop_reasoning_content", "drop_all_reasoning", "content_empty_string",
                 "tool_ids_rewritten_no_reasoning"),
    # Gemini through its OpenAI-compatibility layer (the ``generic`` flavor)
    "generic": ("faithful", "drop_extra_content", "copy_signature_to_parallel_calls", "drop_all_reasoning",
                "drop_latest_assistant", "split_parallel_calls"),
    # an OpenAI Responses upstream: the chat client never holds its reasoning items, only their summary text
    "responses": ("faithful", "drop_reasoning_content", "drop_all_reasoning", "content_empty_list",
                  "content_empty_string", "tool_ids_rewritten", "tool_results_reordered",
                  "tool_ids_rewritten_no_reasoning"),
}

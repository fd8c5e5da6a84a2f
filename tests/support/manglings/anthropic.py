"""How IDE clients mangle replayed history, as functions over Anthropic Messages wire dicts.

Message-level manglings take one assistant message's content list and return a new
one; history-level manglings take the whole messages list. Used by the unit,
property and end-to-end tests alike.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Content = list[dict[str, Any]]
History = list[dict[str, Any]]


def _thinking(fn: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Callable[[Content], Content]:
    def apply(content: Content) -> Content:
        out = []
        for b in content:
            if b.get("type") == "thinking":
                nb = fn(dict(b))
                if nb is not None:
                    out.append(nb)
            else:
                out.append(b)
        return out
    return apply


def _without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def f(b: dict[str, Any]) -> dict[str, Any]:
        b.pop(key, None)
        return b
    return f


def _set(key: str, fn: Callable[[Any], Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def f(b: dict[str, Any]) -> dict[str, Any]:
        b[key] = fn(b.get(key, ""))
        return b
    return f


def _to_text(tag: str | None) -> Callable[[Content], Content]:
    """Thinking turned into a text block, wrapped in ``<tag>...</tag>`` when a tag is given."""
    def apply(content: Content) -> Content:
        out = []
        for b in content:
            if b.get("type") == "thinking":
                t = b.get("thinking", "")
                if t:
                    out.append({"type": "text", "text": f"<{tag}>{t}</{tag}>" if tag else t})
            elif b.get("type") == "redacted_thinking":
                continue
            else:
                out.append(b)
        return out
    return apply


def _text_first(content: Content) -> Content:
    texts = [b for b in content if b.get("type") == "text"]
    rest = [b for b in content if b.get("type") != "text"]
    if not texts:
        texts = [{"type": "text", "text": "Let me check."}]
    return texts + rest


def _empty_text_beside_tool_use(content: Content) -> Content:
    if any(b.get("type") == "tool_use" for b in content):
        i = next(i for i, b in enumerate(content) if b.get("type") == "tool_use")
        return [*content[:i], {"type": "text", "text": ""}, *content[i:]]
    return content


MESSAGE_MANGLINGS: dict[str, Callable[[Content], Content]] = {
    "faithful": lambda c: c,
    "drop_signature": _thinking(_without("signature")),
    "empty_signature": _thinking(_set("signature", lambda s: "")),
    "truncated_signature": _thinking(_set("signature", lambda s: s[: len(s) // 2])),
    "drop_thinking": lambda c: [b for b in c if b.get("type") != "thinking"],
    "drop_redacted": lambda c: [b for b in c if b.get("type") != "redacted_thinking"],
    "trim_thinking": _thinking(_set("thinking", lambda t: t.strip())),
    "rstrip_thinking": _thinking(_set("thinking", lambda t: t.rstrip())),
    "crlf_to_lf": _thinking(_set("thinking", lambda t: t.replace("\r\n", "\n"))),
    "lf_to_crlf": _thinking(_set("thinking", lambda t: t.replace("\r\n", "\n").replace("\n", "\r\n"))),
    "thinking_to_tag_text": _to_text("thinking"),
    "thinking_to_think_tag_text": _to_text("think"),
    "thinking_to_text_block": _to_text(None),
    "text_before_thinking": _text_first,
    "blank_thinking": _thinking(_set("thinking", lambda t: "")),
    "drop_empty_signed_thinking": _thinking(lambda b: None if b.get("thinking") == "" else b),
    "drop_thinking_key": _thinking(_without("thinking")),
    "empty_text_beside_tool_use": _empty_text_beside_tool_use,
}


def mangle_assistants(history: History, name: str) -> History:
    """Apply one message-level mangling to every replayed assistant message."""
    fn = MESSAGE_MANGLINGS[name]
    out = copy.deepcopy(history)
    for m in out:
        if m["role"] == "assistant" and isinstance(m["content"], list):
            m["content"] = fn(m["content"])
    return out


def drop_one_tool_result(history: History) -> History:
    """The client lost one tool_result (the last one it had)."""
    out = copy.deepcopy(history)
    for m in reversed(out):
        if m["role"] == "user" and isinstance(m["content"], list):
            results = [b for b in m["content"] if b.get("type") == "tool_result"]
            if len(results) >= 1:
                m["content"].remove(results[-1])
                if not m["content"]:
                    m["content"] = [{"type": "text", "text": "continue"}]
                return out
    return out


def orphan_result_at_start(history: History) -> History:
    out = copy.deepcopy(history)
    first = out[0]
    content = first["content"] if isinstance(first["content"], list) else [{"type": "text", "text": first["content"]}]
    first["content"] = [{"type": "tool_result", "tool_use_id": "toolu_01OrphanFromAnotherSession",
                         "content": "stale output"}, *content]
    return out


def rewrite_tool_ids(history: History) -> History:
    """The client regenerates tool-call ids (consistently in tool_use and tool_result)."""
    out = copy.deepcopy(history)
    mapping: dict[str, str] = {}
    for m in out:
        if not isinstance(m["content"], list):
            continue
        for b in m["content"]:
            if b.get("type") == "tool_use":
                b["id"] = mapping.setdefault(b["id"], f"toolu_client_{len(mapping) + 1}")
            elif b.get("type") == "tool_result" and b["tool_use_id"] in mapping:
                b["tool_use_id"] = mapping[b["tool_use_id"]]
    return out


def drop_latest_assistant(history: History) -> History:
    """The latest assistant message left out, the tool results after it kept (history trimmers that cut at message
    granularity: OpenHands, gemini-cli and Kilo Code compaction bugs). Works on OpenAI chat messages too."""
    out = copy.deepcopy(history)
    last = max((i for i, m in enumerate(out) if m["role"] == "assistant"), default=None)
    return out if last is None else out[:last] + out[last + 1:]


def collapse_text_blocks(history: History) -> History:
    """Each message's text blocks joined into one text block, where the first of them was."""
    out = copy.deepcopy(history)
    for m in out:
        content = m["content"]
        texts = [b for b in content if b.get("type") == "text"] if isinstance(content, list) else []
        if len(texts) < 2:
            continue
        joined = {"type": "text", "text": "".join(b["text"] for b in texts)}
        first = content.index(texts[0])
        m["content"] = [joined if i == first else b for i, b in enumerate(content) if b.get("type") != "text"]
        if not any(b is joined for b in m["content"]):
            m["content"].insert(first, joined)
    return out


def split_parallel_calls(grouped: bool) -> Callable[[History], History]:
    """An assistant message with N tool calls replayed as N assistant messages, each repeating its thinking and
    carrying one call (the text with the first), its N results one per user message: each right after its call,
    or (``grouped``) all N after the N calls (LiteLLM / any-llm message splitting; openai-agents-python #3215,
    kimi-cli #1975)."""
    def mangle(history: History) -> History:
        out: History = []
        msgs = copy.deepcopy(history)
        i = 0
        while i < len(msgs):
            m = msgs[i]
            calls = [b for b in m["content"] if b.get("type") == "tool_use"] if m["role"] == "assistant" and \
                isinstance(m["content"], list) else []
            if len(calls) < 2 or i + 1 >= len(msgs):
                out.append(m)
                i += 1
                continue
            thinking = [b for b in m["content"] if b.get("type") in ("thinking", "redacted_thinking")]
            text = [b for b in m["content"] if b.get("type") == "text"]
            results = {b["tool_use_id"]: b for b in msgs[i + 1]["content"] if b.get("type") == "tool_result"}
            parts = [({"role": "assistant", "content": [*thinking, *(text if k == 0 else []), call]},
                      {"role": "user", "content": [results[call["id"]]]}) for k, call in enumerate(calls)]
            out += [a for a, _ in parts] + [u for _, u in parts] if grouped else [x for p in parts for x in p]
            i += 2
        return out
    return mangle


HISTORY_MANGLINGS: dict[str, Callable[[History], History]] = {
    "tool_result_missing": drop_one_tool_result,
    "orphan_tool_result_at_start": orphan_result_at_start,
    "rewrite_tool_ids": rewrite_tool_ids,
    "drop_latest_assistant": drop_latest_assistant,
    "collapse_text_blocks": collapse_text_blocks,
    "split_parallel_calls": split_parallel_calls(grouped=False),
    "split_parallel_calls_grouped": split_parallel_calls(grouped=True),
}


# How the matrices play them (``tests/process/e2e/test_mangling_matrix.py``, ``tests/support/e2e/traffic.py``):
# flows that are not a per-turn mangling of history (played beside the manglings on the Anthropic surface)
FLOWS = ["thinking_off_mid_loop", "thinking_on_mid_loop", "retry_twice", "rewind", "edit_earlier_user"]
# flows where thinking legitimately cannot be on for every turn
NO_KEEP_CHECK = {"thinking_off_mid_loop", "thinking_on_mid_loop"}
# cases whose conversations carry redacted_thinking after the thinking block (``[[sim:redacted]]``)
REDACTED = {"drop_redacted", "faithful", "thinking_to_tag_text", "text_before_thinking", "collapse_text_blocks"}
# cases whose conversations call three tools per round (``[[sim:parallel=3]]``)
PARALLEL = {"split_parallel_calls", "split_parallel_calls_grouped"}
# cases played with a thinking configuration of their own
CASE_THINKING: dict[str, dict[str, Any]] = {
    "drop_empty_signed_thinking": {"type": "adaptive", "display": "omitted"},
}


def as_sent(case: str, history: History) -> History:
    """The history a matrix's Anthropic client sends for ``case``: a message mangling applied to every assistant
    message, a history mangling to the whole, ``edit_earlier_user`` edits the first message once the loop is under
    way; the other flows send it as it is (they change what is sent, not how)."""
    if case in MESSAGE_MANGLINGS:
        return mangle_assistants(history, case)
    if case in HISTORY_MANGLINGS:
        return HISTORY_MANGLINGS[case](history)
    if case == "edit_earlier_user" and len(history) > 3:
        history = copy.deepcopy(history)
        history[0]["content"] = history[0]["content"] + " (edited: and in Madrid)"
    return history

"""Context management and server-side compaction on the Anthropic surface: pure.

What the simulator does with ``context_management`` (beta ``context-management-2025-06-27`` for the clearing
edits, ``compact-2026-01-12`` for ``compact_20260112``) and with ``compaction`` blocks (docs/upstream-rules.md,
"Context management and compaction", has the sources and says what is INFERRED):

* ``check_request``: the edits' shape (their ``type`` a known edit; the beta each needs); a
  ``clear_thinking_20251015`` edit needs thinking on (the real API's exact 400); a compaction trigger below
  the documented minimum (50,000 input tokens) is a 400; every ``compaction`` block in ``messages`` is one
  the simulator minted for exactly its ``content`` (``signature``), or has ``content: null`` (a failed
  compaction, a no-op). A tampered, re-signed or unsigned block is a 400.
* ``plan``: what the edits do to this request: ``clear_thinking_20251015`` clears the thinking of all but
  the last ``keep`` assistant turns (default 1; ``"all"`` keeps all) server-side, reported in the answer's
  ``context_management.applied_edits``; ``clear_tool_uses_20250919`` past its trigger clears the results of all
  but the last ``keep`` tool uses (reported the same way); ``compact_20260112`` compacts when the input since the latest
  compaction block reaches its trigger: the answer starts with a new signed ``compaction`` block (alone, with
  ``stop_reason: "compaction"``, when ``pause_after_compaction`` is set).
* ``effective_start``: the API drops every block before the latest compaction block; the input the trigger
  counts and the prefix a bound thinking block commits to (``binding``) start there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from thinkgate_sim.convo import THINKING_TYPES
from thinkgate_sim.signing import Minter

CONTEXT_BETA = "context-management-2025-06-27"
COMPACT_BETA = "compact-2026-01-12"
CLEAR_THINKING = "clear_thinking_20251015"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
COMPACT = "compact_20260112"
EDIT_BETAS = {CLEAR_THINKING: CONTEXT_BETA, CLEAR_TOOL_USES: CONTEXT_BETA, COMPACT: COMPACT_BETA}
DEFAULT_TRIGGER = 150_000
MIN_TRIGGER = 50_000

RULE_CONTEXT = 105  # context_management shape, beta, clear_thinking without thinking, trigger minimum
RULE_COMPACTION = 106  # a compaction block that was not minted for its content
MSG_CLEAR_NEEDS_THINKING = "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"
MSG_EXTRA = "context_management: Extra inputs are not permitted"
MSG_BAD_EDIT = ("context_management.edits.{k}: Input tag '{type}' found using 'type' does not match any of the "
                "expected tags: 'clear_tool_uses_20250919', 'clear_thinking_20251015', 'compact_20260112'")
MSG_TRIGGER = "context_management.edits.{k}.trigger.value: Input should be greater than or equal to 50000"
MSG_COMPACTION_SIG = "messages.{i}.content.{j}: Invalid `signature` in `compaction` block"
MSG_COMPACTION_EMPTY = "messages.{i}.content.{j}.compaction.content: String should have at least 1 character"


@dataclass(frozen=True, slots=True)
class Rejection:
    rule: int
    message: str


@dataclass
class Plan:
    """What the request's edits do: the ``applied_edits`` report, and the compaction block to answer with."""

    report: dict[str, Any] | None = None  # the answer's ``context_management`` (None: the request had none)
    compaction: dict[str, Any] | None = None
    pause: bool = False
    cleared: set[tuple[int, int]] = field(default_factory=set)  # thinking blocks cleared server-side


def edits(body: dict[str, Any]) -> list[Any]:
    cm = body.get("context_management")
    found = cm.get("edits") if isinstance(cm, dict) else None
    return found if isinstance(found, list) else []


def compaction_positions(messages: Any) -> list[tuple[int, int]]:
    """(message, block) of every ``compaction`` block, in request order."""
    out: list[tuple[int, int]] = []
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            out += [(i, j) for j, b in enumerate(content) if isinstance(b, dict) and b.get("type") == "compaction"]
    return out


def cut_at_compaction(messages: list[Any]) -> list[Any]:
    """``messages`` from the latest compaction block on (that message cut to start with it): what the model sees."""
    found = compaction_positions(messages)
    if not found:
        return messages
    i, j = found[-1]
    head = messages[i]
    return [{**head, "content": head["content"][j:]}, *messages[i + 1:]]


def check_request(body: dict[str, Any], betas: frozenset[str], minter: Minter, thinking_on: bool) -> Rejection | None:
    """The first context-management or compaction violation, or None."""
    if "context_management" in body:
        cm = body["context_management"]
        if not isinstance(cm, dict) or (not edits(body) and not betas & {CONTEXT_BETA, COMPACT_BETA}):
            return Rejection(RULE_CONTEXT, MSG_EXTRA)
        for k, e in enumerate(edits(body)):
            etype = e.get("type") if isinstance(e, dict) else None
            if etype not in EDIT_BETAS:
                return Rejection(RULE_CONTEXT, MSG_BAD_EDIT.format(k=k, type=etype))
            if EDIT_BETAS[etype] not in betas:
                return Rejection(RULE_CONTEXT, MSG_EXTRA)
            if etype == CLEAR_THINKING and not thinking_on:
                return Rejection(RULE_CONTEXT, MSG_CLEAR_NEEDS_THINKING)
            if etype == COMPACT and _trigger(e) < MIN_TRIGGER:
                return Rejection(RULE_CONTEXT, MSG_TRIGGER.format(k=k))
    for i, j in compaction_positions(body.get("messages")):
        block = body["messages"][i]["content"][j]
        content = block.get("content")
        if content is None:
            continue  # a failed compaction: the server treats it as a no-op
        if content == "":
            return Rejection(RULE_COMPACTION, MSG_COMPACTION_EMPTY.format(i=i, j=j))
        if not isinstance(content, str) or not minter.verify_compaction(content, block.get("signature")):
            return Rejection(RULE_COMPACTION, MSG_COMPACTION_SIG.format(i=i, j=j))
    return None


def _trigger(edit: dict[str, Any]) -> int:
    trigger = edit.get("trigger")
    value = trigger.get("value") if isinstance(trigger, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_TRIGGER


def _keep(edit: dict[str, Any]) -> int | None:
    """Assistant turns whose thinking a clear_thinking edit keeps (None: all)."""
    keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
    if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return None
    value = keep.get("value") if isinstance(keep, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def plan(body: dict[str, Any], minter: Minter, tokens: int) -> Plan:
    """What the edits of a valid request do (``tokens``: the input since the latest compaction block)."""
    if "context_management" not in body:
        return Plan()
    out = Plan(report={"applied_edits": []})
    assert out.report is not None
    messages = body["messages"]
    for e in edits(body):
        if e["type"] == CLEAR_THINKING:
            keep = _keep(e)
            turns = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"
                     and isinstance(m.get("content"), list)
                     and any(isinstance(b, dict) and b.get("type") in THINKING_TYPES for b in m["content"])]
            cleared = turns[:-keep] if keep is not None and keep < len(turns) else []
            if keep == 0:
                cleared = turns
            if cleared:
                size = 0
                for i in cleared:
                    for j, b in enumerate(messages[i]["content"]):
                        if isinstance(b, dict) and b.get("type") in THINKING_TYPES:
                            out.cleared.add((i, j))
                            size += len(str(b.get("thinking") or b.get("data") or "")) // 4 + 1
                out.report["applied_edits"].append({"type": CLEAR_THINKING, "cleared_thinking_turns": len(cleared),
                                                    "cleared_input_tokens": size})
        elif e["type"] == CLEAR_TOOL_USES:
            applied = _clear_tool_uses(e, messages, tokens)
            if applied is not None:
                out.report["applied_edits"].append(applied)
        elif e["type"] == COMPACT and tokens >= _trigger(e):
            out.compaction = compaction_block(minter, summary(body))
            out.pause = e.get("pause_after_compaction") is True
    return out


def _int_field(obj: Any, key: str, default: int) -> int:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _clear_tool_uses(edit: dict[str, Any], messages: list[Any], tokens: int) -> dict[str, Any] | None:
    """``clear_tool_uses_20250919``: past its trigger (default 100,000 input tokens, or a count of tool uses), the
    results of all but the last ``keep`` tool uses (default 3; ``exclude_tools`` never) are cleared, if that
    clears at least ``clear_at_least`` input tokens. The applied-edit entry, or None when nothing was cleared."""
    names: dict[str, str] = {}
    uses: list[str] = []
    results: dict[str, int] = {}
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        for b in content if isinstance(content, list) else ():
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                uses.append(b["id"])
                names[b["id"]] = str(b.get("name"))
            elif isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
                results[b["tool_use_id"]] = len(str(b.get("content"))) // 4 + 1
    trigger = edit.get("trigger")
    by_uses = isinstance(trigger, dict) and trigger.get("type") == "tool_uses"
    if (len(uses) if by_uses else tokens) < _int_field(trigger, "value", 100_000):
        return None
    keep = _int_field(edit.get("keep"), "value", 3)
    excluded = set(edit.get("exclude_tools") or ())
    cleared = [u for u in uses[:max(0, len(uses) - keep)] if u in results and names[u] not in excluded]
    size = sum(results[u] for u in cleared)
    if not cleared or size < _int_field(edit.get("clear_at_least"), "value", 0):
        return None
    return {"type": CLEAR_TOOL_USES, "cleared_tool_uses": len(cleared), "cleared_input_tokens": size}


def summary(body: dict[str, Any]) -> str:
    """A deterministic summary of the conversation, full of bytes a careless relay would change."""
    seen = cut_at_compaction(list(body["messages"]))
    h = hashlib.sha256(repr(seen).encode("utf-8", "surrogatepass")).hexdigest()
    return (f"<summary>  Conversation {h[:12]} so far ({len(seen)} messages):  \r\n"
            "\r\n"
            f"- the user asked for help — café ☕, 思考 {h[12:18]}\t\n"
            "- tools were called and answered.   \n"
            "</summary>\n")


def compaction_block(minter: Minter, content: str) -> dict[str, Any]:
    return {"type": "compaction", "content": content, "signature": minter.mint_compaction(content)}

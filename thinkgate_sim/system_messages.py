"""Mid-conversation ``role: "system"`` messages, ``tool_addition`` and ``tool_removal`` blocks (docs/upstream-rules.md,
"thinking-block binding").

Pure.

A ``role: "system"`` entry in ``messages`` carries new instructions at its point of the conversation without
changing the top-level ``system`` (so every earlier thinking block keeps its prefix); its content is a string or
a list of ``text``, ``tool_addition`` and ``tool_removal`` blocks (what the SDK narrows system content to). A
``tool_addition`` / ``tool_removal`` names one tool by reference (``{"type": "tool_reference", "name": N}``) or,
for an addition, defines one by value (``{"type": "tool_definition", "definition": {...}}``); by reference they
need the beta ``mid-conversation-tool-changes-2026-07-01``, by value ``inline-tools-2026-09-15``. A tool named by
reference must be one of ``tools`` (typically ``defer_loading: true``, withheld until added).

A system message cannot open ``messages`` (the top-level ``system`` is for that) unless it is the directive-only form
(``content: []`` with an ``output_config``), which is accepted at any position.

``check`` returns the first violation as ``(rule, message)``; ``offered`` is the tool set the model is offered at
the end of the messages: ``tools`` without the deferred ones, with each addition and removal applied in order.
See docs/upstream-rules.md for the sources and what is INFERRED (the error texts are).
"""

from __future__ import annotations

from typing import Any

RULE_SYSTEM_MESSAGE = 107
TOOL_CHANGES_BETA = "mid-conversation-tool-changes-2026-07-01"
INLINE_TOOLS_BETA = "inline-tools-2026-09-15"
SYSTEM_BLOCK_TYPES = ("text", "tool_addition", "tool_removal")
MSG_BLOCK_TYPE = ("messages.{i}.content.{j}: Input tag '{t}' found using 'type' does not match any of the expected "
                  "tags: 'text', 'tool_addition', 'tool_removal'")
MSG_NEEDS_BETA = ("messages.{i}.content.{j}: `{t}` blocks require the `{beta}` value in the `anthropic-beta` "
                  "header.")
MSG_TOOL_FIELD = "messages.{i}.content.{j}.tool: Field required"
MSG_UNKNOWN_TOOL = "messages.{i}.content.{j}.tool.name: Tool `{name}` is not defined in `tools`."
MSG_REMOVE_DEFINITION = "messages.{i}.content.{j}.tool: Input should be a `tool_reference` for `tool_removal`."
MSG_FIRST = ("messages.0: use the top-level 'system' parameter for the initial system prompt; the directive-only form "
             "(content: [] with output_config) is accepted at any position")


def directive_only(message: dict[str, Any]) -> bool:
    """A ``role: "system"`` message with ``content: []`` and an ``output_config`` (what Claude Code sends where the
    model lacks mid-conversation system messages): accepted at any position."""
    return (message.get("role") == "system" and message.get("content") == []
            and isinstance(message.get("output_config"), dict))


def _ref(block: dict[str, Any]) -> tuple[str | None, str | None]:
    """(kind, name) of a tool_addition / tool_removal's ``tool``: kind ``tool_reference`` / ``tool_definition``."""
    tool = block.get("tool")
    if not isinstance(tool, dict):
        return None, None
    kind = tool.get("type")
    if kind == "tool_reference":
        name = tool.get("name")
    elif kind == "tool_definition":
        definition = tool.get("definition")
        name = definition.get("name") if isinstance(definition, dict) else None
    else:
        return None, None
    return kind, name if isinstance(name, str) else None


def check(body: dict[str, Any], betas: frozenset[str]) -> tuple[int, str] | None:
    tools = body.get("tools")
    defined = {t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)} \
        if isinstance(tools, list) else set()
    for i, m in enumerate(body.get("messages") or ()):
        if i == 0 and isinstance(m, dict) and m.get("role") == "system" and not directive_only(m):
            return RULE_SYSTEM_MESSAGE, MSG_FIRST
        if not isinstance(m, dict) or m.get("role") != "system" or not isinstance(m.get("content"), list):
            continue
        for j, b in enumerate(m["content"]):
            t = b.get("type") if isinstance(b, dict) else None
            if t not in SYSTEM_BLOCK_TYPES:
                return RULE_SYSTEM_MESSAGE, MSG_BLOCK_TYPE.format(i=i, j=j, t=t)
            if t == "text":
                continue
            kind, name = _ref(b)
            if kind is None or name is None:
                return RULE_SYSTEM_MESSAGE, MSG_TOOL_FIELD.format(i=i, j=j)
            if kind == "tool_definition" and t == "tool_removal":
                return RULE_SYSTEM_MESSAGE, MSG_REMOVE_DEFINITION.format(i=i, j=j)
            beta = INLINE_TOOLS_BETA if kind == "tool_definition" else TOOL_CHANGES_BETA
            if beta not in betas:
                return RULE_SYSTEM_MESSAGE, MSG_NEEDS_BETA.format(i=i, j=j, t=t, beta=beta)
            if kind == "tool_reference" and name not in defined:
                return RULE_SYSTEM_MESSAGE, MSG_UNKNOWN_TOOL.format(i=i, j=j, name=name)
    return None


def added_tools(messages: list[Any]) -> set[str]:
    """Names a ``tool_addition`` in ``messages`` made available (a deferred tool counts in a prefix from then on)."""
    return _named(messages, "tool_addition")


def removed_tools(messages: list[Any]) -> set[str]:
    return _named(messages, "tool_removal")


def _named(messages: list[Any], kind: str) -> set[str]:
    names: set[str] = set()
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == kind and (name := _ref(b)[1]):
                    names.add(name)
    return names


def offered(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools the model is offered after every message of ``body`` (definitions in order)."""
    tools = [t for t in body.get("tools") or () if isinstance(t, dict) and isinstance(t.get("name"), str)]
    on = {t["name"]: t.get("defer_loading") is not True for t in tools}
    inline: list[dict[str, Any]] = []
    for m in body.get("messages") or ():
        if not (isinstance(m, dict) and m.get("role") == "system" and isinstance(m.get("content"), list)):
            continue
        for b in m["content"]:
            kind, name = _ref(b) if isinstance(b, dict) else (None, None)
            if name is None:
                continue
            if b.get("type") == "tool_removal":
                on[name] = False
            elif kind == "tool_definition":
                inline.append(b["tool"]["definition"])
                on[name] = True
            else:
                on[name] = True
    return [t for t in tools if on.get(t["name"])] + [t for t in inline if on.get(t.get("name"))]

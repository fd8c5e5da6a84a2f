"""The top-level ``system`` of an Anthropic request (``RULE_SYSTEM``, 109). Pure.

``system`` is a string or a list of text blocks (``{"type": "text", "text", "cache_control"?, "citations"?}``,
the SDK's ``TextBlockParam``); ``[]`` is accepted. Checked after the message schema (``rules.py`` phase 2), for
``/v1/messages`` and ``/v1/messages/count_tokens`` alike. In order, the first violation found:

1. not a string or list (``null`` included): ``system: Input should be a valid list``;
2. per block, in order: not an object; ``type`` missing or not ``"text"``; ``text`` missing or not a string; a key
   the text block does not have (``system.{k}.{key}: Extra inputs are not permitted``);
3. per block, in order: an empty ``text`` that carries ``cache_control``
   (``system.{k}: cache_control cannot be set for empty text blocks``); then the whole prompt: an empty string or
   empty text block (``system: text content blocks must be non-empty``), a whitespace-only one
   (``system: text content blocks must contain non-whitespace text``).

``cache_control`` on a non-empty block is accepted. The sources, and what is INFERRED, in docs/upstream-rules.md.
"""

from __future__ import annotations

from typing import Any

RULE_SYSTEM = 109
TEXT_BLOCK_KEYS = frozenset(("type", "text", "cache_control", "citations"))
MSG_NOT_LIST = "system: Input should be a valid list"
MSG_EMPTY = "system: text content blocks must be non-empty"
MSG_BLANK = "system: text content blocks must contain non-whitespace text"
MSG_EMPTY_CACHED = "system.{k}: cache_control cannot be set for empty text blocks"


def check(body: dict[str, Any]) -> str | None:
    """The message of the first violation of ``body["system"]`` (absent: none), or None."""
    if "system" not in body:
        return None
    system = body["system"]
    if isinstance(system, str):
        return _check_text(system)
    if not isinstance(system, list):
        return MSG_NOT_LIST
    for k, block in enumerate(system):
        bad = _check_block(block, f"system.{k}")
        if bad:
            return bad
    for k, block in enumerate(system):
        if block["text"] == "" and block.get("cache_control") is not None:
            return MSG_EMPTY_CACHED.format(k=k)
    for block in system:
        bad = _check_text(block["text"])
        if bad:
            return bad
    return None


def _check_block(block: Any, path: str) -> str | None:
    if not isinstance(block, dict):
        return f"{path}: Input should be a valid dictionary or object to extract fields from"
    if "type" not in block:
        return f"{path}.type: Field required"
    if block["type"] != "text":
        return f"{path}.type: Input should be 'text'"
    if "text" not in block:
        return f"{path}.text: Field required"
    if not isinstance(block["text"], str):
        return f"{path}.text: Input should be a valid string"
    extra = next((key for key in block if key not in TEXT_BLOCK_KEYS), None)
    return f"{path}.{extra}: Extra inputs are not permitted" if extra is not None else None


def _check_text(text: str) -> str | None:
    if not text:
        return MSG_EMPTY
    return MSG_BLANK if not text.strip() else None

"""The cross-conversation oracle: does a request carry content the simulator minted for another conversation?

A request belongs to conversation NAME when its FIRST user message carries ``[[sim:conv=NAME]]``
(NAME: 1-64 of ``A-Z a-z 0-9 _ -``; parsed by ``scenarios.parse_scenario``). For such requests every
flavor (Anthropic, Gemini, the OpenAI-compatible profiles) writes the line ``conversation NAME`` into the
thinking text it generates (``scenarios.thinking_text``) and hands every opaque token it mints (thinking
texts, signatures, redacted data, thought signatures, compat opaque values, tool call ids) to
``ConversationOracle.remember``. On every incoming request, before validation, ``scan`` walks the parsed
JSON body and reports each string that is a token minted for a different conversation, or that contains
a thinking line naming a different conversation. Requests without the marker are not checked.

The memory is bounded (the newest ``limit`` tokens). A token minted identically for two conversations
(an opaque value over an empty id list, say) proves nothing and is forgotten as ambiguous.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_LINE = re.compile(r"(?m)^conversation ([A-Za-z0-9_-]{1,64})\r?$")
_AMBIGUOUS = ("", "")


def conversation_line(name: str) -> str:
    """The thinking line naming conversation ``name`` (without its line break)."""
    return f"conversation {name}"


class ConversationOracle:
    """Remembers which conversation minted which token; finds tokens of other conversations in a request."""

    __slots__ = ("_limit", "_owner")

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._owner: OrderedDict[str, tuple[str, str]] = OrderedDict()  # token -> (conversation, kind)

    def __len__(self) -> int:
        return len(self._owner)

    def remember(self, conversation: str | None, kind: str, token: object) -> None:
        """Note that ``token`` (of ``kind``: ``thinking``, ``signature``, ``tool_id`` ...) was minted for
        ``conversation``. No-op without a conversation or for an empty / non-string token."""
        if conversation is None or not isinstance(token, str) or not token:
            return
        owner = self._owner.get(token)
        if owner is not None:
            if owner[0] != conversation:
                self._owner[token] = _AMBIGUOUS
            return
        self._owner[token] = (conversation, kind)
        while len(self._owner) > self._limit:
            self._owner.popitem(last=False)

    def scan(self, conversation: str | None, body: Any) -> list[tuple[str, str]]:
        """(foreign conversation, kind) for every distinct piece of another conversation's content in
        ``body``, in the order found; ``[]`` for a request without a conversation."""
        if conversation is None:
            return []
        found: dict[tuple[str, str], None] = {}
        stack: list[Any] = [body]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                stack.extend(reversed(node.values()))
            elif isinstance(node, list):
                stack.extend(reversed(node))
            elif isinstance(node, str):
                owner, kind = self._owner.get(node, _AMBIGUOUS)
                if owner and owner != conversation:
                    found[(owner, kind)] = None
                elif "conversation " in node:
                    for name in _LINE.findall(node):
                        if name != conversation:
                            found[(name, "thinking_line")] = None
        return list(found)

"""How Augment chat-stream clients mangle the ``chat_history`` they replay, as functions over its exchanges
(``request_message``, ``request_nodes``, ``response_text``, ``response_nodes``). Each returns a mangled deep copy.
``faithful`` replays every exchange as streamed; a client that replays nothing (server-side state, newer Augment
versions) sends an empty ``chat_history`` instead (``SERVER_SIDE_STATE``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.support.augment.client import MAIN_TEXT_FINISHED, THINKING_NODE, TOOL_USE, TOOL_USE_START, Exchange

# the name of the client habit of sending ``chat_history: []`` and letting the gateway rebuild the thread
SERVER_SIDE_STATE = "server_side_state"


def _drop_thinking_reencode_text(history: list[Exchange]) -> list[Exchange]:
    """No THINKING nodes, no streamed text nodes; response text re-encoded (CRLF, padding)."""
    out = []
    for h in copy.deepcopy(history):
        h["response_nodes"] = [n for n in h["response_nodes"] if n["type"] == TOOL_USE]
        h["response_text"] = "  " + h["response_text"].replace("`", "'").replace(" ", "\r\n", 1) + "  "
        out.append(h)
    return out


def _unsigned_trimmed_thinking(history: list[Exchange]) -> list[Exchange]:
    """THINKING nodes replayed without signature and with trimmed text; only TOOL_USE_START nodes."""
    out = []
    for h in copy.deepcopy(history):
        nodes: list[dict[str, Any]] = []
        for n in h["response_nodes"]:
            if n["type"] == THINKING_NODE:
                nodes.append({**n, "thinking": {"summary": n["thinking"]["summary"].strip()}})
            elif n["type"] in (TOOL_USE_START, MAIN_TEXT_FINISHED):
                nodes.append(n)
        h["response_nodes"] = nodes
        h["response_text"] = ""
        out.append(h)
    return out


MANGLINGS: dict[str, Callable[[list[Exchange]], list[Exchange]]] = {
    "drop_thinking_reencode_text": _drop_thinking_reencode_text,
    "unsigned_trimmed_thinking": _unsigned_trimmed_thinking,
    "faithful": copy.deepcopy,
}

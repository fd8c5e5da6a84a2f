"""A finished Message -> the real Anthropic SSE event sequence (pure).

``message_start`` (empty content, ``output_tokens: 1``); per block
``content_block_start`` / deltas / ``content_block_stop``, with a ``ping`` after the
first block starts (where the real API sends it); ``message_delta`` with the stop
reason and cumulative usage; ``message_stop``.

Thinking starts as ``{"type":"thinking","thinking":"","signature":""}``, its text
arrives in ``thinking_delta`` chunks cut at awkward places (between ``\\r`` and
``\\n``, right after every non-ASCII character, and every few characters), then one
``signature_delta`` just before the stop. Text comes in ``text_delta`` chunks of a few
words, tool input as ``input_json_delta`` fragments (the first one empty, as the real
API sends it), and ``redacted_thinking`` arrives whole in its start event.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import orjson

Event = tuple[str, dict[str, Any]]

_WORD = re.compile(r"\S+\s*|\s+")


def split_awkward(text: str, every: int = 24) -> list[str]:
    """``text`` in pieces that a relay must concatenate byte-exactly."""
    cuts: set[int] = set(range(every, len(text), every))
    for k, ch in enumerate(text):
        if ch == "\r" and text[k + 1:k + 2] == "\n":
            cuts.add(k + 1)  # inside the CRLF
        elif ord(ch) > 0x7F:
            cuts.add(k + 1)  # right after a multi-byte character
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def split_words(text: str, per_chunk: int = 3) -> list[str]:
    words = _WORD.findall(text)
    return ["".join(words[k:k + per_chunk]) for k in range(0, len(words), per_chunk)] or [""]


def split_json(value: object, size: int = 9) -> list[str]:
    raw = orjson.dumps(value).decode()
    return ["", *(raw[k:k + size] for k in range(0, len(raw), size))]


def _block_events(index: int, block: dict[str, Any]) -> list[Event]:
    btype = block.get("type")

    def delta(d: dict[str, Any]) -> Event:
        return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})

    if btype == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [delta({"type": "thinking_delta", "thinking": part}) for part in split_awkward(block["thinking"])]
        deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    elif btype == "text":
        start = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": part}) for part in split_words(block["text"])]
    elif btype == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [delta({"type": "input_json_delta", "partial_json": part}) for part in split_json(block["input"])]
    elif btype == "compaction":  # the summary in one ``compaction_delta`` (the SDK's accumulator replaces it)
        start = {**block, "content": None}
        deltas = [delta({"type": "compaction_delta", "content": block.get("content")})]
    else:  # redacted_thinking and anything else arrive whole
        start, deltas = block, []
    return [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
            *deltas,
            ("content_block_stop", {"type": "content_block_stop", "index": index})]


def stream_events(message: dict[str, Any]) -> list[Event]:
    """The SSE events (name, data) that stream ``message``."""
    usage = dict(message["usage"])
    head = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1}}
    edits = head.pop("context_management", None)  # the applied edits come with the final message_delta
    events: list[Event] = [("message_start", {"type": "message_start", "message": head})]
    for index, block in enumerate(message["content"]):
        block_events = _block_events(index, block)
        if index == 0:
            block_events.insert(1, ("ping", {"type": "ping"}))
        events.extend(block_events)
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    final: dict[str, Any] = {"type": "message_delta", "delta": stop, "usage": usage}
    if edits is not None:  # (the SDK's ``BetaRawMessageDeltaEvent.context_management``)
        final["context_management"] = edits
    events.append(("message_delta", final))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def first_delta_position(events: list[Event]) -> int:
    """Index of the first ``content_block_delta`` (where ``[[sim:hold]]`` pauses), or -1."""
    return next((k for k, (name, _) in enumerate(events) if name == "content_block_delta"), -1)

"""Gemini ``streamGenerateContent?alt=sse`` chunks -> canonical (Anthropic-shaped) stream events.

``GeminiTranslator.feed`` turns one chunk into the events the accumulator and every
client ``StreamEncoder`` understand: ``message_start`` on the first chunk; unsigned
text (and ``thought: true`` text, as a ``thought`` block with ``thinking_delta``s)
appends to the open block of its kind; a part that carries a ``thoughtSignature``
becomes a block of its own, its signature typed under ``PROVIDER`` (never merged with its
neighbours, empty text included); each ``functionCall`` is a ``tool_use`` block with
a minted id and its arguments in one ``input_json_delta``. ``end`` closes the answer
(``message_delta`` + ``message_stop``) only if a ``finishReason`` arrived, so a
stream cut short stays an error. An ``{"error": ...}`` chunk becomes an ``error`` event.

``NativeStreamEncoder`` serves a Gemini client: the upstream chunks as they came
(``upstream_event`` events carry them; SSE, or a JSON array without ``alt=sse``), errors in
Google's envelope.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects.canonical import (
    JSON,
    PROVIDER,
    UPSTREAM_EVENT,
    BlockProvider,
    OpaqueBlock,
    ProviderSig,
    TextBlock,
    ThoughtBlock,
    ToolUseBlock,
)
from gateway.dialects.gemini.codec import stop_reason, usage
from gateway.dialects.gemini.parts import Mint, block_from_part
from gateway.errors import GatewayError, render_error
from gateway.sse import SSEEvent

Event = dict[str, Any]


def _provider(sig: ProviderSig | None, origin: str | None = None) -> dict[str, JSON]:
    """A block's provider data: its signature, or a thought's origin (``canonical.BlockProvider``)."""
    if sig is None:
        return {PROVIDER: BlockProvider(origin)} if origin else {}
    return {PROVIDER: BlockProvider(sig.origin, sig)}


class GeminiTranslator:
    def __init__(self, *, origin: str, mint: Mint, model: str) -> None:
        self.origin, self.mint, self.model = origin, mint, model
        self.started = False
        self.index = -1
        self.open: str | None = None  # type of the open unsigned text/thought block
        self.calls = 0
        self.finish: JSON = None
        self.usage: dict[str, JSON] = {}
        self.failed = False

    def feed(self, data: str) -> list[Event]:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
        if isinstance(chunk, list) and chunk:  # an error wrapped in an array
            chunk = chunk[0]
        if not isinstance(chunk, dict):
            return []
        if isinstance(chunk.get("error"), dict):
            self.failed = True
            err = chunk["error"]
            return [{"type": "error", "error": {"type": _error_type(err.get("code")),
                                                "message": str(err.get("message") or "upstream error")}}]
        events: list[Event] = []
        if not self.started:
            self.started = True
            events.append({"type": "message_start", "message": {
                "id": str(chunk.get("responseId") or ""), "type": "message", "role": "assistant",
                "model": str(chunk.get("modelVersion") or self.model), "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": usage(chunk.get("usageMetadata"))}})
        cands = chunk.get("candidates")
        cand = cands[0] if isinstance(cands, list) and cands and isinstance(cands[0], dict) else {}
        content = found if isinstance(found := cand.get("content"), dict) else {}
        for part in content.get("parts") or ():
            events += self._part(part)
        if cand.get("finishReason"):
            self.finish = cand["finishReason"]
        if isinstance(chunk.get("usageMetadata"), dict):
            self.usage = usage(chunk["usageMetadata"])
        return events

    def end(self) -> list[Event]:
        if self.finish is None or self.failed or not self.started:
            return []
        return [*self._close(),
                {"type": "message_delta", "delta": {"stop_reason": stop_reason(self.finish, self.calls > 0),
                                                    "stop_sequence": None}, "usage": self.usage},
                {"type": "message_stop"}]

    # ------------------------------------------------------------ parts

    def _call_id(self, name: str, args: JSON) -> str:
        self.calls += 1
        return self.mint(self.calls - 1, name, args)

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [{"type": "content_block_stop", "index": self.index}]

    def _start(self, block: dict[str, JSON]) -> list[Event]:
        self.index += 1
        return [{"type": "content_block_start", "index": self.index, "content_block": block}]

    def _delta(self, delta: dict[str, JSON]) -> Event:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _part(self, part: Any) -> list[Event]:
        b = block_from_part(part, self.origin, self._call_id)
        if isinstance(b, TextBlock | ThoughtBlock):
            kind = "thought" if isinstance(b, ThoughtBlock) else "text"
            key, dtype = ("thinking", "thinking_delta") if kind == "thought" else ("text", "text_delta")
            text = b.text
            if b.sig is None and self.open == kind:
                return [self._delta({"type": dtype, key: text})] if text else []
            events = self._close()
            events += self._start({"type": kind, key: "",
                                   **_provider(b.sig, self.origin if kind == "thought" else None)})
            if text:
                events.append(self._delta({"type": dtype, key: text}))
            if b.sig is None:
                self.open = kind
            else:
                events.append({"type": "content_block_stop", "index": self.index})
            return events
        events = self._close()
        if isinstance(b, ToolUseBlock):
            events += self._start({"type": "tool_use", "id": b.id, "name": b.name, "input": {}, **_provider(b.sig)})
            events.append(self._delta({"type": "input_json_delta", "partial_json": orjson.dumps(b.input).decode()}))
        elif isinstance(b, OpaqueBlock):
            events += self._start(b.raw)
        events.append({"type": "content_block_stop", "index": self.index})
        return events


def _finishes(raw: str) -> bool:
    try:
        chunk = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    cands = chunk.get("candidates") if isinstance(chunk, dict) else None
    return isinstance(cands, list) and any(isinstance(c, dict) and c.get("finishReason") for c in cands)


def _error_type(code: JSON) -> str:
    return {429: "rate_limit_error", 503: "overloaded_error", 400: "invalid_request_error"}.get(
        code if isinstance(code, int) else 500, "api_error")


class NativeStreamEncoder:
    """A Gemini client <- the Gemini upstream: chunks pass as they came, as SSE (``alt=sse``) or, for a
    client that did not ask for SSE, as the elements of one JSON array (Gemini's default stream form)."""

    def __init__(self, *, sse: bool = True) -> None:
        self.sse = sse
        self.count = 0

    def _frame(self, payload: bytes) -> bytes:
        self.count += 1
        if self.sse:
            return b"data: " + payload + b"\r\n\r\n"
        return (b"[" if self.count == 1 else b",\r\n") + payload

    def event(self, data: dict[str, Any], ev: SSEEvent | None) -> bytes:
        if data.get("type") == UPSTREAM_EVENT and isinstance(data.get("data"), str):
            return self._frame(data["data"].encode("utf-8", "surrogateescape"))
        return b""

    def passthrough(self, ev: SSEEvent) -> bytes:
        return b""

    def error(self, error_type: str, message: str) -> bytes:
        _, body = render_error("gemini", GatewayError(502 if error_type != "timeout_error" else 504, message))
        return self._frame(body) + self.end()

    def end(self) -> bytes:
        if self.sse:
            return b""
        return b"]" if self.count else b"[]"

    def ends(self, data: dict[str, Any]) -> bool:
        """The upstream's chunk with a ``finishReason`` (the last one a Gemini client reads)."""
        raw = data.get("data") if data.get("type") == UPSTREAM_EVENT else None
        return isinstance(raw, str) and '"finishReason"' in raw and _finishes(raw)

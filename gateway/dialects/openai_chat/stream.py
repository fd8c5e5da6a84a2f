"""Canonical (Anthropic-shaped) stream events -> OpenAI ``chat.completion.chunk`` SSE lines.

A true relay: every upstream event becomes at most one chunk, written as soon as it
arrives. The relay's accumulator snapshot is shared (it folds each event before the
encoder sees it), so the encoder reads finished blocks from it instead of
accumulating twice.

- ``message_start`` -> the first chunk: ``delta.role`` (and ``_gateway``);
- ``thinking_delta`` -> ``delta.reasoning_content``; at the thinking block's stop,
  when its signature is known, ``delta.reasoning_details`` with the whole entry
  (text and signature); ``redacted_thinking`` -> a ``reasoning.encrypted`` entry;
- ``text_delta`` -> ``delta.content``;
- ``tool_use`` start -> ``delta.tool_calls[{index, id, type, function: {name,
  arguments: ""}}]`` (index = position among the answer's tool calls);
  ``input_json_delta`` -> argument fragments (``"{}"`` at the stop if none came);
- ``message_delta`` -> ``finish_reason``; ``message_stop`` -> the usage chunk when
  ``stream_options.include_usage``; a clean end -> ``data: [DONE]``;
- an ``error`` event (or a relay failure) -> ``data: {"error": {...}}`` and no [DONE].

- provider data of other upstreams (typed, under ``canonical.PROVIDER`` in translated events): a ``thought``
  block streams as ``reasoning_content``; a signed tool call gets
  ``extra_content.google.thought_signature`` on its first fragment, a signed text block
  a delta with ``extra_content`` at its stop; message-level provider fields (except
  ``reasoning_content``, already streamed) come in one delta before ``finish_reason``.

Pings, signature deltas and event types OpenAI has no place for produce nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.dialects.accumulate import Snapshot
from gateway.dialects.canonical import JSON, PROVIDER, BlockProvider, ProviderFields
from gateway.dialects.openai_chat.codec import completion_id, finish_reason, usage
from gateway.dialects.openai_chat.messages import encrypted_entry, openai_extra, text_entry
from gateway.dialects.openai_compat import Seal
from gateway.errors import openai_error_body
from gateway.sse import SSEEvent

DONE = b"data: [DONE]\n\n"


def frame(payload: JSON) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class StreamEncoder:
    """One per response. ``snapshot`` must be the one the relay accumulates into."""

    def __init__(self, snapshot: Snapshot, *, created: int, scid: str | None = None,
                 include_usage: bool = False, exclude_reasoning: bool = False, seal: Seal | None = None) -> None:
        """``seal``: seals the message-level provider fields shown (``openai_compat.Seals``)."""
        self.snap = snapshot
        self.seal = seal
        self.created = created
        self.scid = scid
        self.include_usage = include_usage
        self.exclude_reasoning = exclude_reasoning
        self.id = completion_id("")
        self.model = ""
        self.failed = False
        self._tools: dict[int, int] = {}       # block index -> position among the tool calls
        self._with_args: set[int] = set()      # tool blocks that streamed a non-empty fragment
        self._reasoning: dict[int, int] = {}   # block index -> reasoning_details index
        self._signed: dict[int, dict[str, JSON]] = {}  # signed text block index -> its extra_content

    # ------------------------------------------------------------ StreamEncoder protocol

    def event(self, data: dict[str, Any], ev: SSEEvent | None) -> bytes:
        handler = _HANDLERS.get(str(data.get("type")))
        return handler(self, data) if handler is not None else b""

    def passthrough(self, ev: SSEEvent) -> bytes:
        return b""

    def error(self, error_type: str, message: str) -> bytes:
        self.failed = True
        return frame(openai_error_body(502, message, error_type))

    def end(self) -> bytes:
        return b"" if self.failed else DONE

    def ends(self, data: dict[str, Any]) -> bool:
        return data.get("type") in ("message_delta", "message_stop")  # the finish_reason chunk, then [DONE]

    # ------------------------------------------------------------ events

    def _chunk(self, delta: dict[str, JSON], finish: str | None = None, **top: JSON) -> bytes:
        return frame({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                      "model": self.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                      **top})

    def _message_start(self, data: dict[str, Any]) -> bytes:
        msg = data.get("message")
        msg = msg if isinstance(msg, dict) else {}
        self.id = completion_id(str(msg.get("id") or ""))
        self.model = str(msg.get("model") or "")
        meta: dict[str, JSON] = {"_gateway": {"conversation_id": self.scid}} if self.scid else {}
        return self._chunk({"role": "assistant", "content": ""}, **meta)

    def _block_start(self, data: dict[str, Any]) -> bytes:
        idx, block = data.get("index"), data.get("content_block")
        if not isinstance(idx, int) or not isinstance(block, dict):
            return b""
        btype = block.get("type")
        if btype == "thinking":
            self._reasoning[idx] = len(self._reasoning)
            return self._reasoning_text(block.get("thinking"))
        if btype == "redacted_thinking":
            self._reasoning[idx] = len(self._reasoning)
            if self.exclude_reasoning or not isinstance(block.get("data"), str):
                return b""
            return self._chunk({"reasoning_details": [encrypted_entry(block["data"], self._reasoning[idx])]})
        if btype == "thought":
            return self._reasoning_text(block.get("thinking"))
        extra = _extra_content(block.get(PROVIDER))
        if btype == "text":
            if extra is not None:
                self._signed[idx] = extra
            text = block.get("text")
            return self._chunk({"content": text}) if isinstance(text, str) and text else b""
        if btype == "tool_use":
            self._tools[idx] = pos = len(self._tools)
            call = {"index": pos, "id": block.get("id"), "type": "function",
                    "function": {"name": block.get("name"), "arguments": ""}}
            if extra is not None:
                call["extra_content"] = extra
            return self._chunk({"tool_calls": [call]})
        return b""

    def _block_delta(self, data: dict[str, Any]) -> bytes:
        idx, delta = data.get("index"), data.get("delta")
        if not isinstance(delta, dict):
            return b""
        dtype = delta.get("type")
        if dtype == "thinking_delta":
            return self._reasoning_text(delta.get("thinking"))
        if dtype == "text_delta":
            text = delta.get("text")
            return self._chunk({"content": text}) if isinstance(text, str) and text else b""
        if dtype == "input_json_delta" and isinstance(idx, int) and idx in self._tools:
            part = delta.get("partial_json")
            if not isinstance(part, str) or not part:
                return b""
            self._with_args.add(idx)
            return self._chunk({"tool_calls": [{"index": self._tools[idx], "function": {"arguments": part}}]})
        return b""

    def _block_stop(self, data: dict[str, Any]) -> bytes:
        idx = data.get("index")
        if not isinstance(idx, int):
            return b""
        block = self.snap.blocks.get(idx) or {}
        if idx in self._reasoning and block.get("type") == "thinking" and not self.exclude_reasoning:
            entry = text_entry(block.get("thinking"), block.get("signature"), self._reasoning[idx])
            return self._chunk({"reasoning_details": [entry]})
        if idx in self._signed:
            return self._chunk({"extra_content": self._signed.pop(idx)})
        if idx in self._tools and idx not in self._with_args:
            args = orjson.dumps(block.get("input") or {}).decode()
            return self._chunk({"tool_calls": [{"index": self._tools[idx], "function": {"arguments": args}}]})
        return b""

    def _message_delta(self, data: dict[str, Any]) -> bytes:
        delta = data.get("delta")
        stop = delta.get("stop_reason") if isinstance(delta, dict) else None
        prov = delta.get(PROVIDER) if isinstance(delta, dict) else None
        shown = {k: v for k, v in prov.fields.items() if k != "reasoning_content"} \
            if isinstance(prov, ProviderFields) else {}
        if shown and self.seal is not None and isinstance(prov, ProviderFields):
            shown = self.seal(prov.origin, shown)
        head = self._chunk(shown) if shown and not self.exclude_reasoning else b""
        return head + self._chunk({}, finish_reason(stop))

    def _message_stop(self, data: dict[str, Any]) -> bytes:
        if not self.include_usage:
            return b""
        msg = self.snap.message or {}
        return frame({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                      "model": self.model, "choices": [], "usage": usage(msg.get("usage"))})

    def _error_event(self, data: dict[str, Any]) -> bytes:
        err = data.get("error")
        err = err if isinstance(err, dict) else {}
        self.failed = True
        message = text if isinstance(text := err.get("message"), str) else "upstream stream failed"
        etype = kind if isinstance(kind := err.get("type"), str) else "api_error"
        return frame(openai_error_body(502, message, etype))

    def _reasoning_text(self, text: JSON) -> bytes:
        if self.exclude_reasoning or not isinstance(text, str) or not text:
            return b""
        return self._chunk({"reasoning_content": text})


def _extra_content(prov: Any) -> dict[str, JSON] | None:
    return openai_extra(prov.sig) if isinstance(prov, BlockProvider) and prov.sig is not None else None


_HANDLERS: dict[str, Callable[[StreamEncoder, dict[str, Any]], bytes]] = {
    "message_start": StreamEncoder._message_start,
    "content_block_start": StreamEncoder._block_start,
    "content_block_delta": StreamEncoder._block_delta,
    "content_block_stop": StreamEncoder._block_stop,
    "message_delta": StreamEncoder._message_delta,
    "message_stop": StreamEncoder._message_stop,
    "error": StreamEncoder._error_event,
}

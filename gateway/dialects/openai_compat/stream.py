"""OpenAI-compatible upstream ``chat.completion.chunk`` SSE -> canonical (Anthropic-shaped) events.

- reasoning text deltas (``reasoning_content`` / ``reasoning`` / ``reasoning_text``, the
  first kind seen) -> a ``thought`` block (``thinking_delta``), its origin a ``BlockProvider``;
- ``content`` -> a text block; ``tool_calls`` fragments by ``index`` -> one ``tool_use``
  block each (id and name from the first fragment, arguments as ``input_json_delta``;
  a Gemini ``extra_content`` signature as its ``BlockProvider``);
- the message-level provider fields accumulate exactly as the official clients merge
  them (strings concatenate; ``reasoning_details`` entries merge by ``index``: text-like
  fields concatenate, the rest is replaced) and are attached to the final
  ``message_delta`` as ``ProviderFields`` (``Turn.provider`` once accumulated);
- ``finish_reason`` and ``usage`` -> ``message_delta``; ``[DONE]`` (or the end of the
  stream after a ``finish_reason``) -> ``message_stop``; an ``{"error": ...}`` chunk ->
  an ``error`` event.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects.canonical import JSON, PROVIDER, BlockProvider, ProviderFields, ProviderSig, from_openai
from gateway.dialects.openai_chat.messages import signature_from_openai_extra
from gateway.dialects.openai_compat.codec import PROVIDER_FIELDS, REASONING_TEXT, STOP_REASONS

Event = dict[str, Any]
_CONCAT = ("text", "summary", "data")


class CompatTranslator:
    def __init__(self, *, origin: str, model: str) -> None:
        self.origin, self.model = origin, model
        self.started = False
        self.index = -1
        self.open: str | None = None
        self.tools: dict[int, int] = {}      # upstream tool-call index -> block index
        self.reasoning_key: str | None = None
        self.fields: dict[str, JSON] = {}
        self.details: dict[int, dict[str, JSON]] = {}
        self.finish: str | None = None
        self.usage: dict[str, JSON] = {}
        self.failed = False
        self.done = False

    def feed(self, data: str) -> list[Event]:
        if data.strip() == "[DONE]":
            return self._finish()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
        if isinstance(chunk, list) and chunk:
            chunk = chunk[0]
        if not isinstance(chunk, dict):
            return []
        if isinstance(chunk.get("error"), dict):
            self.failed = True
            err = chunk["error"]
            return [{"type": "error", "error": {"type": str(err.get("type") or "api_error"),
                                                "message": str(err.get("message") or "upstream error")}}]
        events: list[Event] = []
        if not self.started:
            self.started = True
            events.append({"type": "message_start", "message": {
                "id": str(chunk.get("id") or ""), "type": "message", "role": "assistant",
                "model": str(chunk.get("model") or self.model), "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})
        u = chunk.get("usage")
        if isinstance(u, dict):
            self.usage = from_openai(u)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                events += self._delta(delta)
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])
        return events

    def end(self) -> list[Event]:
        return [] if self.done else self._finish()

    # ------------------------------------------------------------ internals

    def _finish(self) -> list[Event]:
        if self.done or self.failed or not self.started or self.finish is None:
            return []
        self.done = True
        fields = dict(self.fields)
        if self.details:
            fields["reasoning_details"] = [self.details[k] for k in sorted(self.details)]
        delta: dict[str, JSON] = {"stop_reason": STOP_REASONS.get(self.finish, "end_turn"), "stop_sequence": None}
        if fields:
            delta[PROVIDER] = ProviderFields(self.origin, fields)
        return [*self._close(), {"type": "message_delta", "delta": delta, "usage": self.usage},
                {"type": "message_stop"}]

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [{"type": "content_block_stop", "index": self.index}]

    def _open(self, kind: str, block: dict[str, JSON]) -> list[Event]:
        events = self._close()
        self.index += 1
        self.open = kind
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return events

    def _text(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self.open != kind:
            block = {"type": "thought", "thinking": "", PROVIDER: BlockProvider(self.origin)} if kind == "thought" \
                else {"type": "text", "text": ""}
            events += self._open(kind, block)
        key, dtype = ("thinking", "thinking_delta") if kind == "thought" else ("text", "text_delta")
        events.append({"type": "content_block_delta", "index": self.index, "delta": {"type": dtype, key: text}})
        return events

    def _delta(self, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        for key in PROVIDER_FIELDS:
            value = delta.get(key)
            if key == "reasoning_details" and isinstance(value, list):
                for n, entry in enumerate(value):
                    if isinstance(entry, dict):
                        self._merge_detail(entry.get("index", n), entry)
            elif isinstance(value, str) and value:
                self.fields[key] = str(self.fields.get(key, "")) + value
        for key in REASONING_TEXT:
            text = delta.get(key)
            if isinstance(text, str) and text and self.reasoning_key in (None, key):
                self.reasoning_key = key
                events += self._text("thought", text)
        content = delta.get("content")
        if isinstance(content, str) and content:
            events += self._text("text", content)
        sig = signature_from_openai_extra(delta.get("extra_content"))
        if sig:  # Gemini's compatibility layer signs a text answer on a delta: kept as a signed empty part
            events += self._open("signed", {"type": "text", "text": "", PROVIDER: self._signed(sig)})
            events += self._close()
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                events += self._call(call)
        return events

    def _signed(self, value: str) -> BlockProvider:
        return BlockProvider(self.origin, ProviderSig(self.origin, value))

    def _merge_detail(self, index: Any, entry: dict[str, Any]) -> None:
        key = index if isinstance(index, int) else len(self.details)
        got = self.details.setdefault(key, {})
        for k, v in entry.items():
            if k in _CONCAT and isinstance(v, str) and isinstance(got.get(k), str):
                got[k] = got[k] + v
            else:
                got[k] = v

    def _call(self, call: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        n = call.get("index", len(self.tools))
        fn = found if isinstance(found := call.get("function"), dict) else {}
        if n not in self.tools:
            block: dict[str, JSON] = {"type": "tool_use", "id": str(call.get("id") or f"call_{n}"),
                                      "name": str(fn.get("name") or ""), "input": {}}
            sig = signature_from_openai_extra(call.get("extra_content"))
            if sig:
                block[PROVIDER] = self._signed(sig)
            events += self._open("tool", block)
            self.tools[n] = self.index
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            events.append({"type": "content_block_delta", "index": self.tools[n],
                           "delta": {"type": "input_json_delta", "partial_json": args}})
        return events

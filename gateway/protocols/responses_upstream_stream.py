"""OpenAI Responses API upstream SSE -> canonical (Anthropic-shaped) events.

- ``response.created`` -> ``message_start``;
- a ``reasoning`` item -> a ``thought`` block carrying the item exactly as ``response.output_item.done`` gave it
  (``encrypted_content`` complete only there) and the item that followed it (``responses_upstream.reasoning_block``),
  under ``_provider``: so it is emitted once the next item is announced (or the response ends), its summary text in
  one ``thinking_delta``;
- ``function_call`` items -> ``tool_use`` blocks (``call_id``, ``name``), ``response.function_call_arguments.delta``
  -> ``input_json_delta`` (an item that streamed no arguments gets them from its ``.done``);
- ``response.output_text.delta`` / ``response.refusal.delta`` -> a text block per content part;
- ``response.completed`` / ``response.incomplete`` -> ``message_delta`` (stop reason, usage) and ``message_stop``;
  ``response.failed`` and ``error`` events -> an ``error`` event.
Other events (``response.in_progress``, summary part events, ``*.done`` echoes) carry nothing new and are ignored.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocols.canonical import JSON
from gateway.protocols.responses_upstream import reasoning_block, stop_reason, usage

Event = dict[str, Any]


class ResponsesTranslator:
    def __init__(self, *, origin: str, model: str) -> None:
        self.origin, self.model = origin, model
        self.started = False
        self.index = -1
        self.open: tuple[str, Any] | None = None  # (kind, key): the open block's kind and its item/part
        self.reasoning: dict[str, Any] | None = None  # a finished reasoning item waiting for its next item
        self.calls: dict[str, dict[str, Any]] = {}    # item id -> {"index", "args"}
        self.kinds: list[str] = []                    # the types of the items announced
        self.failed = False
        self.done = False

    def feed(self, data: str) -> list[Event]:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(event, dict) or self.done or self.failed:
            return []
        etype = event.get("type")
        if etype == "error" or etype == "response.failed":
            return self._error(event)
        events: list[Event] = []
        if not self.started and etype in ("response.created", "response.in_progress", "response.output_item.added"):
            self.started = True
            resp = found if isinstance(found := event.get("response"), dict) else {}
            events.append({"type": "message_start", "message": {
                "id": str(resp.get("id") or ""), "type": "message", "role": "assistant",
                "model": str(resp.get("model") or self.model), "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})
        if etype == "response.output_item.added" and isinstance(item := event.get("item"), dict):
            events += self._added(item)
        elif etype == "response.output_item.done" and isinstance(item := event.get("item"), dict):
            events += self._item_done(item)
        elif etype in ("response.output_text.delta", "response.refusal.delta"):
            delta = event.get("delta")
            key = (event.get("item_id"), event.get("content_index"))
            if isinstance(delta, str):
                if self.open != ("text", key):
                    events += self._start({"type": "text", "text": ""}, ("text", key))
                events.append({"type": "content_block_delta", "index": self.index,
                               "delta": {"type": "text_delta", "text": delta}})
        elif etype == "response.function_call_arguments.delta":
            call = self.calls.get(str(event.get("item_id")))
            delta = event.get("delta")
            if call is not None and isinstance(delta, str) and delta:
                call["args"] = True
                events.append({"type": "content_block_delta", "index": call["index"],
                               "delta": {"type": "input_json_delta", "partial_json": delta}})
        elif etype in ("response.completed", "response.incomplete"):
            resp = found if isinstance(found := event.get("response"), dict) else {}
            events += self._finish(resp)
        return events

    def end(self) -> list[Event]:
        return []  # a stream without ``response.completed`` ended unfinished: nothing is made up

    # ------------------------------------------------------------ internals

    def _error(self, event: Event) -> list[Event]:
        """``error`` (``code``, ``message`` at the top) or ``response.failed`` (``response.error``)."""
        self.failed = True
        resp = event.get("response")
        err = resp.get("error") if isinstance(resp, dict) else event
        err = err if isinstance(err, dict) else {}
        return [{"type": "error", "error": {"type": str(err.get("code") or "api_error"),
                                            "message": str(err.get("message") or "upstream error")}}]

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [{"type": "content_block_stop", "index": self.index}]

    def _start(self, block: dict[str, JSON], key: tuple[str, Any]) -> list[Event]:
        events = self._close()
        self.index += 1
        self.open = key
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return events

    def _flush_reasoning(self, nxt: dict[str, Any] | None) -> list[Event]:
        if self.reasoning is None:
            return []
        b = reasoning_block(self.reasoning, nxt, self.origin)
        self.reasoning = None
        assert b.sig is not None
        events = self._start({"type": "thought", "thinking": "", "_provider": {"origin": b.origin,
                                                                              "value": b.sig.value}},
                             ("thought", None))
        if b.text:
            events.append({"type": "content_block_delta", "index": self.index,
                           "delta": {"type": "thinking_delta", "thinking": b.text}})
        return events + self._close()

    def _added(self, item: dict[str, Any]) -> list[Event]:
        kind = item.get("type")
        self.kinds.append(str(kind))
        if kind == "reasoning":
            return self._flush_reasoning(None) + self._close()
        events = self._flush_reasoning(item)
        if kind == "function_call":
            events += self._start({"type": "tool_use", "id": str(item.get("call_id") or item.get("id") or ""),
                                   "name": str(item.get("name") or ""), "input": {}}, ("tool", item.get("id")))
            self.calls[str(item.get("id"))] = {"index": self.index, "args": False}
            args = item.get("arguments")
            if isinstance(args, str) and args:
                self.calls[str(item.get("id"))]["args"] = True
                events.append({"type": "content_block_delta", "index": self.index,
                               "delta": {"type": "input_json_delta", "partial_json": args}})
        return events

    def _item_done(self, item: dict[str, Any]) -> list[Event]:
        kind = item.get("type")
        if kind == "reasoning":
            self.reasoning = item
            return self._close()
        events: list[Event] = []
        if kind == "function_call":
            call = self.calls.get(str(item.get("id")))
            args = item.get("arguments")
            if call is not None and not call["args"] and isinstance(args, str) and args:
                events.append({"type": "content_block_delta", "index": call["index"],
                               "delta": {"type": "input_json_delta", "partial_json": args}})
        return events + self._close()

    def _finish(self, resp: dict[str, Any]) -> list[Event]:
        self.done = True
        events = self._flush_reasoning(None) + self._close()
        calls = "function_call" in self.kinds
        reason = stop_reason(resp, [])
        return [*events, {"type": "message_delta",
                          "delta": {"stop_reason": "tool_use" if calls and reason == "end_turn" else reason,
                                    "stop_sequence": None}, "usage": usage(resp)},
                {"type": "message_stop"}]

"""OpenAI Responses API upstream SSE -> canonical (Anthropic-shaped) events.

- ``response.created`` -> ``message_start``;
- a ``reasoning`` item -> a ``thought`` block, opened when the item is announced, its summary text streamed as
  ``thinking_delta``s as it comes (parts joined as ``responses_upstream.summary_text`` joins them); it stays open until
  the next item is announced (or the response ends), then gets the item exactly as ``response.output_item.done`` gave
  it (``encrypted_content`` is complete only there) and the item that followed it (``reasoning_block``'s value) in
  one ``provider_delta`` (its ``ProviderSig``: the accumulator signs the block with it), and closes;
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

from gateway.dialects.canonical import JSON, PROVIDER, BlockProvider
from gateway.dialects.responses.upstream import SUMMARY_SEPARATOR, reasoning_block, stop_reason, usage

Event = dict[str, Any]


class ResponsesTranslator:
    def __init__(self, *, origin: str, model: str) -> None:
        self.origin, self.model = origin, model
        self.started = False
        self.index = -1
        self.open: tuple[str, Any] | None = None  # (kind, key): the open block's kind and its item/part
        self.thought: int | None = None               # the open thought block's index
        self.reasoning: dict[str, Any] | None = None  # its finished reasoning item, waiting for its next item
        self.summary_part: Any = None                 # the summary part the last summary delta was of
        self.summary_streamed = False
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
        elif etype == "response.reasoning_summary_text.delta":
            events += self._summary(event)
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
        """Close the open thought block: the finished reasoning item and its follower go in as its value."""
        if self.thought is None:
            return []
        index, self.thought = self.thought, None
        item, self.reasoning = self.reasoning, None
        events: list[Event] = []
        if item is not None:
            b = reasoning_block(item, nxt, self.origin)
            assert b.sig is not None
            if not self.summary_streamed and b.text:  # (no summary deltas came: the text from the finished item)
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "thinking_delta", "thinking": b.text}})
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "provider_delta", "sig": b.sig}})
        return events + self._close()

    def _summary(self, event: Event) -> list[Event]:
        delta, k = event.get("delta"), event.get("summary_index")
        if self.thought is None or not isinstance(delta, str) or not delta:
            return []
        text = delta
        if self.summary_part is not None and k != self.summary_part:
            text = SUMMARY_SEPARATOR + delta
        self.summary_part = k
        self.summary_streamed = True
        return [{"type": "content_block_delta", "index": self.thought,
                 "delta": {"type": "thinking_delta", "thinking": text}}]

    def _added(self, item: dict[str, Any]) -> list[Event]:
        kind = item.get("type")
        self.kinds.append(str(kind))
        if kind == "reasoning":
            events = self._flush_reasoning(None)
            events += self._start({"type": "thought", "thinking": "", PROVIDER: BlockProvider(self.origin)},
                                  ("thought", item.get("id")))
            self.thought, self.summary_part, self.summary_streamed = self.index, None, False
            return events
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
            self.reasoning = item  # (its block stays open: the next item is part of its value)
            return []
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

"""Canonical (Anthropic-shaped) stream events -> the Responses API's server-sent events, one upstream event at a time.

Every event is ``event: <type>`` + ``data: {..., "type", "sequence_number"}`` (numbered from 0), flushed as it comes:

- ``message_start`` -> ``response.created`` and ``response.in_progress`` (the Response, ``status: in_progress``);
- a ``thinking`` / ``redacted_thinking`` / ``thought`` block -> a ``reasoning`` item: ``response.output_item.added``;
  with ``reasoning.summary`` asked for, its text as ``response.reasoning_summary_part.added``,
  ``response.reasoning_summary_text.delta`` ... ``.done``, ``response.reasoning_summary_part.done``; at its stop
  ``response.output_item.done`` with the sealed ``encrypted_content`` (when ``include`` asks for it);
- a ``text`` block -> a ``message`` item: ``response.output_item.added``, ``response.content_part.added``,
  ``response.output_text.delta`` ..., ``response.output_text.done``, ``response.content_part.done``,
  ``response.output_item.done``;
- a ``tool_use`` block -> a ``function_call`` item: ``response.output_item.added``,
  ``response.function_call_arguments.delta`` ..., ``response.function_call_arguments.done``,
  ``response.output_item.done``;
- a signature riding on a text or tool block (Gemini ``thoughtSignature``) -> a reasoning item of its own (no
  summary) that carries it sealed, next to the block;
- the turn's message-level reasoning fields (an OpenAI-compatible upstream's, on the translated ``message_delta``)
  -> a reasoning item of their own (no summary) that carries them sealed, after every other item;
- the end -> ``response.completed`` (``response.incomplete`` for a turn cut by the token limit), written after the
  turn is recorded (``end``), with the ids it was recorded under;
- an upstream ``error`` event or a relay failure -> ``error`` then ``response.failed``, and nothing after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.dialects.accumulate import Snapshot, block_of
from gateway.dialects.canonical import JSON, PROVIDER, Block, BlockProvider, ProviderFields
from gateway.dialects.responses.codec import (
    FUNCTION_CALL,
    MESSAGE,
    REASONING,
    ItemIds,
    ResponsesRequest,
    call_item,
    message_item,
    parse_id,
    reasoning_item,
    response_object,
)
from gateway.sse import SSEEvent


class Seal(Protocol):
    """Canonical blocks (and a turn's message-level fields) -> encrypted_content (``reasoning_seal.Sealer.seal``)."""

    def __call__(self, blocks: list[Block], provider: ProviderFields | None = None, /) -> str: ...


MEDIA_TYPE = "text/event-stream"
_REASONING_TYPES = ("thinking", "redacted_thinking", "thought")


PENDING = -1  # a text block's output index until its first text opens its message item


@dataclass(slots=True)
class _Open:
    kind: str         # REASONING, MESSAGE or FUNCTION_CALL
    output_index: int
    text: str = ""    # summary text, message text or arguments so far
    item_id: str = ""  # the item's id


class StreamEncoder:
    """One per response. ``snapshot`` must be the one the relay accumulates into; ``final`` gives the ids the turn
    was recorded under (read once the relay has recorded it) and the conversation id."""

    def __init__(self, snapshot: Snapshot, *, ids: ItemIds, final: Callable[[], tuple[ItemIds, str | None]],
                 seal: Seal, model: str, created_at: int, echo: dict[str, JSON], include_encrypted: bool,
                 summary: bool, scid: str | None) -> None:
        self.snap = snapshot
        self.ids = ids
        self.final = final
        self.seal = seal
        self.model = model
        self.created_at = created_at
        self.echo = echo
        self.include_encrypted = include_encrypted
        self.summary = summary
        self.scid = scid
        self.seq = 0
        self.failed = False
        self.output: list[dict[str, JSON]] = []  # the items done so far, in output order
        self._open: dict[int, _Open] = {}  # block index -> its open item
        self._next = 0  # the next output index
        self._place = 0  # the next item's place in the turn's layout (``openai_responses.layout``): its id's index

    @classmethod
    def answering(cls, p: ResponsesRequest, snapshot: Snapshot, ids: ItemIds, seal: Seal,
                  final: Callable[[], tuple[ItemIds, str | None]], scid: str | None) -> StreamEncoder:
        """The encoder answering a decoded request (its model, echoed fields, ``include`` and summary choice)."""
        return cls(snapshot, ids=ids, final=final, seal=seal, model=p.request.model, created_at=int(time.time()),
                   echo=p.echo, include_encrypted=p.include_encrypted, summary=p.summary, scid=scid)

    # ------------------------------------------------------------ StreamEncoder protocol

    def event(self, data: dict[str, Any], ev: SSEEvent | None) -> bytes:
        handler = _HANDLERS.get(str(data.get("type")))
        return handler(self, data) if handler is not None and not self.failed else b""

    def passthrough(self, ev: SSEEvent) -> bytes:
        return b""

    def error(self, error_type: str, message: str) -> bytes:
        if self.failed:
            return b""
        self.failed = True
        code = error_type  # the upstream's type stays readable as the code, as in the OpenAI envelope
        failed = self._response("failed", error={"code": code, "message": message})
        return (self._emit("error", code=code, message=message, param=None)
                + self._emit("response.failed", response=failed))

    def end(self) -> bytes:
        if self.failed:
            return b""
        ids, scid = self.final()
        if ids != self.ids:  # recorded elsewhere than predicted (a fork): the final object names where
            self.output = [_renamed(item, ids) for item in self.output]
            self.ids, self.scid = ids, scid
        msg = self.snap.message or {}
        done = self._response("completed", stop_reason=msg.get("stop_reason"), usage_=msg.get("usage"))
        kind = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
        return self._emit(kind, response=done)

    def ends(self, data: dict[str, Any]) -> bool:
        return data.get("type") in ("message_delta", "message_stop")

    # ------------------------------------------------------------ events

    def _emit(self, etype: str, **fields: JSON) -> bytes:
        payload = {"type": etype, "sequence_number": self.seq, **fields}
        self.seq += 1
        return b"event: " + etype.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def _response(self, status: str, **kw: Any) -> dict[str, JSON]:
        return response_object(self.ids.response, model=self.model, created_at=self.created_at, echo=self.echo,
                               output=list(self.output), status=status, scid=self.scid, **kw)

    def _message_start(self, data: dict[str, Any]) -> bytes:
        msg = data.get("message")
        if isinstance(msg, dict) and isinstance(msg.get("model"), str) and msg["model"]:
            self.model = msg["model"]
        start = self._response("in_progress")
        return self._emit("response.created", response=start) + self._emit("response.in_progress", response=start)

    def _id(self, kind: str) -> str:
        """The next item's id (its place: ``layout``'s rule, the places of items left out counted)."""
        self._place += 1
        return self.ids.item(kind, self._place - 1)

    def _add(self, idx: int | None, kind: str, item: dict[str, JSON]) -> bytes:
        out = self._next
        self._next += 1
        if idx is not None:
            self._open[idx] = _Open(kind, out, item_id=str(item["id"]))
        return self._emit("response.output_item.added", output_index=out, item=item)

    def _done(self, item: dict[str, JSON], output_index: int) -> bytes:
        self.output.append(item)
        return self._emit("response.output_item.done", output_index=output_index, item=item)

    def _carrier(self, block: dict[str, JSON] | None, provider: ProviderFields | None = None) -> bytes:
        """A reasoning item of its own for a signature that rides on a text or tool block, or for the turn's
        message-level fields."""
        item_id = self._id(REASONING)
        if not self.include_encrypted:  # (shown only with include, its place kept: ``layout``)
            return b""
        k = self._next
        sealed = self.seal([block_of(block)] if block is not None else [], provider)
        item = reasoning_item(item_id, None, sealed, summary=False)
        return self._add(None, REASONING, {**item, "encrypted_content": None}) + self._done(item, k)

    def _message_delta(self, data: dict[str, Any]) -> bytes:
        delta = data.get("delta")
        provider = delta.get(PROVIDER) if isinstance(delta, dict) else None
        if not isinstance(provider, ProviderFields) or not provider.fields:
            return b""
        return self._carrier(None, provider)

    def _block_start(self, data: dict[str, Any]) -> bytes:
        idx, block = data.get("index"), data.get("content_block")
        if not isinstance(idx, int) or not isinstance(block, dict):
            return b""
        btype = block.get("type")
        k = self._next
        if btype in _REASONING_TYPES:
            rid = self._id(REASONING)
            head = self._add(idx, REASONING, reasoning_item(rid, None, None, summary=False))
            text = block.get("thinking")
            if self.summary:
                head += self._emit("response.reasoning_summary_part.added", item_id=rid,
                                   output_index=k, summary_index=0, part={"type": "summary_text", "text": ""})
                if isinstance(text, str) and text:
                    head += self._summary_delta(idx, text)
            return head
        if btype == "text":  # its message item opens with its first text: an empty text block is none (``layout``)
            self._open[idx] = _Open(MESSAGE, PENDING)
            text = block.get("text")
            return self._text_delta(idx, text) if isinstance(text, str) and text else b""
        if btype == "tool_use":
            head = self._carrier(block) if _signed(block) else b""
            item = call_item(self._id(FUNCTION_CALL), str(block.get("id")), str(block.get("name")), "",
                             "in_progress")
            return head + self._add(idx, FUNCTION_CALL, item)
        return b""

    def _summary_delta(self, idx: int, text: str) -> bytes:
        op = self._open[idx]
        op.text += text
        return self._emit("response.reasoning_summary_text.delta", item_id=op.item_id,
                          output_index=op.output_index, summary_index=0, delta=text)

    def _text_delta(self, idx: int, text: str) -> bytes:
        op = self._open[idx]
        head = b""
        if op.output_index == PENDING:
            op.item_id, op.output_index = self._id(MESSAGE), self._next
            head = self._add(None, MESSAGE, message_item(op.item_id, "", "in_progress"))
            head += self._emit("response.content_part.added", item_id=op.item_id, output_index=op.output_index,
                               content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        op.text += text
        return head + self._emit("response.output_text.delta", item_id=op.item_id,
                                 output_index=op.output_index, content_index=0, delta=text, logprobs=[])

    def _block_delta(self, data: dict[str, Any]) -> bytes:
        idx, delta = data.get("index"), data.get("delta")
        if not isinstance(idx, int) or idx not in self._open or not isinstance(delta, dict):
            return b""
        op, dtype = self._open[idx], delta.get("type")
        if dtype == "thinking_delta" and op.kind == REASONING and self.summary:
            text = delta.get("thinking")
            return self._summary_delta(idx, text) if isinstance(text, str) and text else b""
        if dtype == "text_delta" and op.kind == MESSAGE:
            text = delta.get("text")
            return self._text_delta(idx, text) if isinstance(text, str) and text else b""
        if dtype == "input_json_delta" and op.kind == FUNCTION_CALL:
            part = delta.get("partial_json")
            if not isinstance(part, str) or not part:
                return b""
            op.text += part
            return self._emit("response.function_call_arguments.delta",
                              item_id=op.item_id, output_index=op.output_index,
                              delta=part)
        return b""

    def _block_stop(self, data: dict[str, Any]) -> bytes:
        idx = data.get("index")
        if not isinstance(idx, int) or idx not in self._open:
            return b""
        op = self._open.pop(idx)
        block = self.snap.blocks.get(idx) or {}
        k = op.output_index
        if op.kind == REASONING:
            out = b""
            item_id = op.item_id
            if self.summary:
                out += self._emit("response.reasoning_summary_text.done", item_id=item_id, output_index=k,
                                  summary_index=0, text=op.text)
                out += self._emit("response.reasoning_summary_part.done", item_id=item_id, output_index=k,
                                  summary_index=0, part={"type": "summary_text", "text": op.text})
            sealed = self.seal([block_of(block)]) if self.include_encrypted else None
            return out + self._done(reasoning_item(item_id, op.text, sealed, summary=self.summary), k)
        signed = _signed(block)
        if op.kind == MESSAGE and op.output_index == PENDING:  # no text came: no message item, its signature's own
            return self._carrier(block) if signed else b""
        if op.kind == MESSAGE:
            item_id = op.item_id
            part: dict[str, JSON] = {"type": "output_text", "text": op.text, "annotations": [], "logprobs": []}
            out = self._emit("response.output_text.done", item_id=item_id, output_index=k, content_index=0,
                             text=op.text, logprobs=[])
            out += self._emit("response.content_part.done", item_id=item_id, output_index=k, content_index=0,
                              part=part)
            out += self._done(message_item(item_id, op.text), k)
            return out + (self._carrier(block) if signed else b"")
        args = op.text or orjson.dumps(block.get("input") or {}).decode()
        item_id = op.item_id
        out = self._emit("response.function_call_arguments.done", item_id=item_id, output_index=k,
                         name=str(block.get("name")), arguments=args)
        return out + self._done(call_item(item_id, str(block.get("id")), str(block.get("name")), args), k)

    def _error_event(self, data: dict[str, Any]) -> bytes:
        err = data.get("error")
        err = err if isinstance(err, dict) else {}
        message = text if isinstance(text := err.get("message"), str) else "upstream stream failed"
        etype = kind if isinstance(kind := err.get("type"), str) else "api_error"
        return self.error(etype, message)


def _renamed(item: dict[str, JSON], ids: ItemIds) -> dict[str, JSON]:
    """An item named where its turn was recorded."""
    named = parse_id(item.get("id"))
    return {**item, "id": ids.item(named.kind, named.index)} if named is not None and named.index is not None else item


_HANDLERS: dict[str, Callable[[StreamEncoder, dict[str, Any]], bytes]] = {
    "message_start": StreamEncoder._message_start,
    "content_block_start": StreamEncoder._block_start,
    "content_block_delta": StreamEncoder._block_delta,
    "content_block_stop": StreamEncoder._block_stop,
    "message_delta": StreamEncoder._message_delta,
    "error": StreamEncoder._error_event,
}


def _signed(block: dict[str, Any]) -> bool:
    """Whether a translated stream's text or tool block carries a per-part signature of its own."""
    return isinstance(prov := block.get(PROVIDER), BlockProvider) and prov.sig is not None

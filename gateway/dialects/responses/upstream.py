"""OpenAI Responses API UPSTREAM dialect (``POST {base}/responses``; routed by ``PREFIX=responses@BASE_URL``).

Requests (``encode_request``): canonical -> a Responses body: the system prompt as ``instructions``, the messages as
``input`` items (``encode_items``), Anthropic-shaped tools as function tools, ``tool_choice``, ``max_output_tokens``,
``reasoning`` from the thinking configuration, ``metadata.user_id`` as ``safety_identifier``, a JSON-schema
``output_config.format`` as ``text.format`` (the chat parameters that reach it: ``routing.PARAMS``' Responses column);
always ``store: false`` and ``include: ["reasoning.encrypted_content"]``:
thinkgate is the conversation's memory (its records), so the upstream keeps nothing and every replica can serve the
next request.

Answers (``decode_turn``; the stream form is ``ResponsesTranslator``, below): ``output`` items -> canonical blocks
(``decode_items``).

The item <-> canonical mapping is one function per direction, shared by the stream translator:

* a ``reasoning`` item -> a ``ThoughtBlock`` (its summary text, for clients that show reasoning) whose ``sig`` holds
  ``{"item": <the item exactly as received: id, summary, encrypted_content...>, "next": <the item that followed it:
  type, id (and call_id)>}``; recorded with the turn, and sent back as that very item. The API wants a reasoning item
  followed by the item it preceded, with its id, and an item carrying its id preceded by its reasoning item
  (docs/upstream-rules.md, "OpenAI Responses"): so the item after a restored reasoning item gets the recorded id, and
  no other item gets an id. A reasoning item whose following item is not the one it preceded (a client changed the
  turn), or recorded without encrypted content, is dropped by sanitize (rule 8, ``sendable``) and left out here too,
  never sent for the upstream to refuse; reasoning of another origin never reaches here (sanitize rule 6);
* a ``function_call`` item <-> a ``ToolUseBlock`` (``call_id`` is the tool id; ``arguments`` the JSON input);
* a ``message`` item's ``output_text`` / ``refusal`` parts <-> ``TextBlock``s;
* ``function_call_output`` <- a ``ToolResultBlock``; user text and images <- ``input_text`` / ``input_image``.

The stream (``ResponsesTranslator``): OpenAI Responses API upstream SSE -> canonical (Anthropic-shaped) events.

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

The same dialect (``same_dialect``): a Responses client's request for a Responses upstream: what the gateway does not
need to change passes as the client sent it.

``same_dialect`` takes the body thinkgate derived from the canonical request (``responses_upstream.encode_request``)
and the client's own top-level fields (``ClientRequest.fields``, in its order, values as received)
and keeps the client's fields, in the client's order, but for what thinkgate decides:

* ``model``, ``input`` (the repaired items), ``instructions`` (the client's with its ``system`` / ``developer``
  items' text, which the decoder moved out of ``input``), ``stream``;
* ``store: false`` (thinkgate is the conversation's memory: the upstream keeps nothing, any replica serves the
  next request) and no ``previous_response_id`` (it names a response thinkgate minted, rebuilt into ``input``);
* ``include``: the client's list, with what thinkgate asks (``reasoning.encrypted_content``: reasoning items go
  back from the records) added;
* ``reasoning`` passes as sent while thinking stays on; with thinking off (repair's choice) it is what thinkgate
  derived (none);
* ``temperature`` / ``top_p`` only while the canonical request still has them (sanitize may drop them).

Everything else (``metadata``, ``text``, ``tools`` and ``tool_choice`` as sent, hosted tools included,
``truncation``, ``user``, ``service_tier``, ``prompt_cache_key``, fields this code has never heard of) passes
through unchanged. Keys only thinkgate derived follow the client's (``metadata.user_id``'s ``safety_identifier``
only when the client sent no ``metadata`` of its own).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects.canonical import (
    JSON,
    PROVIDER,
    Block,
    BlockProvider,
    Message,
    ProviderSig,
    Request,
    TextBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.openai_chat.codec import EFFORT_BUDGETS
from gateway.dialects.openai_compat.wire import choice_fields, image_url, system_text, tool_function
from gateway.dialects.routing import ModelCaps
from gateway.dialects.toolchain import content_text
from gateway.errors import bad_request

INCLUDE = ["reasoning.encrypted_content"]
EFFORTS = ("minimal", "low", "medium", "high")  # ``reasoning.effort`` (a budget maps to the least that covers it)
SUMMARY_SEPARATOR = "\n\n"


# ---------------------------------------------------------------- items -> canonical

def following(item: dict[str, Any] | None) -> dict[str, JSON] | None:
    """What a reasoning item's next item is, as recorded with it (its type and id; a call's ``call_id``)."""
    if item is None or not isinstance(item.get("id"), str):
        return None
    kind = item.get("type")
    if kind == "function_call":
        return {"type": kind, "id": item["id"], "call_id": item.get("call_id")}
    if kind == "message":
        return {"type": kind, "id": item["id"]}
    return None


def summary_text(item: dict[str, Any]) -> str:
    parts = item.get("summary")
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] \
        if isinstance(parts, list) else []
    return SUMMARY_SEPARATOR.join(texts)


def reasoning_block(item: dict[str, Any], nxt: dict[str, Any] | None, origin: str) -> ThoughtBlock:
    return ThoughtBlock(summary_text(item), origin, ProviderSig(origin, {"item": item, "next": following(nxt)}))


def minted_item(value: JSON) -> dict[str, JSON] | None:
    """The reasoning item a Responses upstream minted, as it sent it (its id, summary and ``encrypted_content``), from
    a thought block's provider value (``reasoning_block``); None: the value is not one."""
    item = value.get("item") if isinstance(value, dict) else None
    if not isinstance(item, dict) or item.get("type") != "reasoning" or not isinstance(item.get("id"), str):
        return None
    return item


def decode_items(items: list[Any], origin: str) -> list[Block]:
    """Responses output items -> canonical blocks (unknown item types are left out: nothing to send back)."""
    dicts = [i for i in items if isinstance(i, dict)]
    blocks: list[Block] = []
    for n, item in enumerate(dicts):
        kind = item.get("type")
        if kind == "reasoning":
            blocks.append(reasoning_block(item, dicts[n + 1] if n + 1 < len(dicts) else None, origin))
        elif kind == "function_call":
            blocks.append(tool_use(item))
        elif kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict):
                    text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
                    if isinstance(text, str):
                        blocks.append(TextBlock(text))
    return blocks


def tool_use(item: dict[str, Any]) -> ToolUseBlock:
    try:
        args = orjson.loads(item.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        args = {}
    return ToolUseBlock(str(item.get("call_id") or item.get("id") or ""), str(item.get("name") or ""), args)


# ---------------------------------------------------------------- canonical -> items

def _recorded(b: ThoughtBlock) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """A thought block's recorded reasoning item and what followed it (None: it carries none, or one without
    ``encrypted_content``, which with ``store: false`` the upstream could only answer with "not found")."""
    value = b.sig.value if b.sig is not None else None
    if not isinstance(value, dict) or not isinstance(item := value.get("item"), dict) or \
            item.get("type") != "reasoning" or not isinstance(item.get("encrypted_content"), str):
        return None
    nxt = value.get("next")
    return item, nxt if isinstance(nxt, dict) else None


def sendable(b: ThoughtBlock, nxt: Block | None) -> bool:
    """Whether a thought block can go back as its recorded reasoning item: it carries one (with its encrypted
    content) and ``nxt`` (the block after it) is the item that followed it: its call (by call id), or its text."""
    recorded = _recorded(b)
    follower = recorded[1] if recorded is not None else None
    if follower is None:
        return False
    if follower.get("type") == "function_call":
        return isinstance(nxt, ToolUseBlock) and nxt.id == follower.get("call_id")
    return follower.get("type") == "message" and isinstance(nxt, TextBlock)


def encode_items(messages: list[Message]) -> list[dict[str, JSON]]:
    """Canonical messages -> Responses input items."""
    items: list[dict[str, JSON]] = []
    for m in messages:
        if m.role == "assistant":
            items += assistant_items(m.content)
        elif m.role == "user":
            items += user_items(m)
    return items


def assistant_items(blocks: list[Block]) -> list[dict[str, JSON]]:
    """One assistant message's blocks as output items: a recorded reasoning item as it was, with the id of the item
    it preceded on that item; text runs as one ``message`` each; tool calls as ``function_call``s."""
    out: list[dict[str, JSON]] = []
    pending: tuple[dict[str, Any], dict[str, Any] | None] | None = None  # a reasoning item waiting for its next

    def place(item: dict[str, JSON]) -> None:
        nonlocal pending
        if pending is not None:
            reasoning, nxt = pending
            pending = None
            if nxt is not None and nxt.get("type") == item["type"] and (
                    item["type"] != "function_call" or nxt.get("call_id") == item.get("call_id")):
                out.append(reasoning)
                item = {"type": item["type"], "id": nxt["id"], **{k: v for k, v in item.items() if k != "type"}}
            # else: the reasoning item's following item is gone: it is left out (degraded, never refused)
        out.append(item)

    texts: list[str] = []

    def flush() -> None:
        if texts:
            place({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": t} for t in texts]})
            texts.clear()

    for b in blocks:
        if isinstance(b, TextBlock):
            texts.append(b.text)
            continue
        flush()
        if isinstance(b, ThoughtBlock):
            recorded = _recorded(b)
            if recorded is not None:
                pending = recorded  # (a second one before any item replaces the first: that one had no follower)
        elif isinstance(b, ToolUseBlock):
            place({"type": "function_call", "call_id": b.id, "name": b.name,
                   "arguments": orjson.dumps(b.input).decode()})
    flush()
    return out


def user_items(m: Message) -> list[dict[str, JSON]]:
    """Tool results as ``function_call_output`` items (first), the rest as one user message."""
    out: list[dict[str, JSON]] = []
    parts: list[dict[str, JSON]] = []
    for b in m.content:
        if isinstance(b, ToolResultBlock):
            out.append({"type": "function_call_output", "call_id": b.tool_use_id, "output": content_text(b.content)})
        elif isinstance(b, TextBlock):
            parts.append({"type": "input_text", "text": b.text})
        elif (url := image_url(b)) is not None:
            parts.append({"type": "input_image", "image_url": url})
    if parts:
        single = m.content_was_string and len(parts) == 1 and parts[0]["type"] == "input_text"
        out.append({"type": "message", "role": "user", "content": parts[0]["text"] if single else parts})
    return out


# ---------------------------------------------------------------- requests

def encode_request(req: Request, caps: ModelCaps, client: dict[str, JSON] | None = None) -> dict[str, JSON]:
    """``client``: a Responses client's top-level fields (the same dialect, ``passthrough.same_dialect``)."""
    p = req.params
    body: dict[str, JSON] = {"model": req.model}
    system = system_text(p)
    if system:
        body["instructions"] = system
    body["input"] = encode_items(req.messages)
    tools = [{"type": "function", **tool_function(t)} for t in p.get("tools") or ()
             if isinstance(t, dict) and "input_schema" in t]
    if tools:
        body["tools"] = tools
        body.update(choice_fields(p.get("tool_choice"), lambda name: {"type": "function", "name": name}))
    if isinstance(p.get("max_tokens"), int):
        body["max_output_tokens"] = p["max_tokens"]
    for key in ("temperature", "top_p"):
        if p.get(key) is not None:
            body[key] = p[key]
    meta = p.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str):
        body["safety_identifier"] = meta["user_id"]
    reasoning = _reasoning(req)
    if reasoning is not None:
        body["reasoning"] = reasoning
    config = p.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        body["text"] = {"format": {"type": "json_schema", "name": "response", "schema": fmt["schema"]}}
    body["store"] = False
    body["include"] = list(INCLUDE)
    if req.stream:
        body["stream"] = True
    return same_dialect(body, client, req) if client is not None else body  # what thinkgate need not change passes


def _reasoning(req: Request) -> dict[str, JSON] | None:
    """The thinking configuration as ``reasoning``: an effort the client named (``output_config.effort``), else one
    from the budget; with a summary, so reasoning text reaches clients that show it."""
    if not req.thinking_enabled():
        return None
    config = req.params.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    if effort not in EFFORTS:
        budget = req.thinking.get("budget_tokens") if isinstance(req.thinking, dict) else None
        effort = "medium" if not isinstance(budget, int) else \
            next((e for e, b in EFFORT_BUDGETS.items() if budget <= b and e in EFFORTS), "high")
    return {"effort": effort, "summary": "auto"}


# ---------------------------------------------------------------- answers

def stop_reason(response: dict[str, Any], blocks: list[Block]) -> str:
    details = response.get("incomplete_details")
    if response.get("status") == "incomplete" and isinstance(details, dict) and \
            details.get("reason") == "max_output_tokens":
        return "max_tokens"
    return "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"


def usage(response: dict[str, Any]) -> dict[str, JSON]:
    u = found if isinstance(found := response.get("usage"), dict) else {}
    return {"input_tokens": u.get("input_tokens", 0), "output_tokens": u.get("output_tokens", 0)}


def decode_turn(body: Any, *, origin: str, model: str) -> Turn:
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        raise bad_request("upstream answer has no output")
    blocks = decode_items(body["output"], origin)
    return Turn(id=str(body.get("id") or ""), model=str(body.get("model") or model), content=blocks,
                stop_reason=stop_reason(body, blocks), usage=usage(body))


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


_OWNED = frozenset({"model", "input", "instructions", "stream", "store", "previous_response_id"})
_SANITIZED = ("temperature", "top_p")


def same_dialect(derived: dict[str, JSON], client: dict[str, JSON], req: Request) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, value in client.items():
        if key in _OWNED:
            if key in derived:
                out[key] = derived[key]
        elif key == "include":
            listed = value if isinstance(value, list) else []
            needed = derived.get(key)
            out[key] = [*listed, *(i for i in needed if i not in listed)] if isinstance(needed, list) else listed
        elif key == "reasoning":
            if req.thinking_enabled():
                out[key] = value
            elif key in derived:
                out[key] = derived[key]
        elif key not in _SANITIZED or key in req.params:
            out[key] = value
    for key, value in derived.items():
        if key not in out and not (key == "safety_identifier" and "metadata" in client):
            out[key] = value
    return out

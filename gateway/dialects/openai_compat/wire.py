"""The OpenAI-compatible upstream's wire (OpenRouter, Copilot, DeepSeek-style, generic): its request codec and its
stream translator. (Its rules are the entry, ``gateway.dialects.openai_compat``.)

Requests (``encode_request``): canonical -> a chat completions body. Assistant messages
carry their message-level provider fields exactly as received (``reasoning_details``,
``reasoning_opaque``, ``reasoning_text``, ``reasoning_content``; sanitize left only
the target's own) and a tool-only message is sent with ``content: null``, never ``[]``
or ``""``. Tool results become ``tool`` messages (before the user's own text), tools
and ``tool_choice`` their OpenAI forms, the thinking config the flavor's reasoning
parameter (OpenRouter ``reasoning``, generic ``reasoning_effort``; none for Copilot and DeepSeek).
A request from a chat completions client (its top-level fields, ``client``) keeps every other
top-level field as the client sent it, in its order, its own reasoning fields included
(``same_dialect``; the table is ``gateway.dialects.routing``), as the client's bytes of it
(``gateway.dialects.client_json``, at the call table).

Answers (``decode_turn``): reasoning text (``reasoning_content`` / ``reasoning`` /
``reasoning_text``) -> a ``ThoughtBlock``; content -> text; tool calls -> tool_use
(a Gemini ``extra_content.google.thought_signature`` -> the block's signature); the
message-level fields -> ``Turn.provider``.

The stream (``CompatTranslator``): ``chat.completion.chunk`` SSE -> canonical (Anthropic-shaped) events.

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

from collections.abc import Callable
from typing import Any

import orjson

from gateway.dialects import registry
from gateway.dialects.canonical import (
    JSON,
    PROVIDER,
    Block,
    BlockProvider,
    Message,
    OpaqueBlock,
    ProviderFields,
    ProviderSig,
    Request,
    TextBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
    from_openai,
)
from gateway.dialects.openai_chat.messages import openai_extra, signature_from_openai_extra, tool_call
from gateway.dialects.openai_compat import unsealed
from gateway.dialects.routing import ModelCaps
from gateway.dialects.toolchain import content_text
from gateway.errors import bad_request

PROVIDER_FIELDS = ("reasoning_details", "reasoning_opaque", "reasoning_text", "reasoning_content")
REASONING_TEXT = ("reasoning_content", "reasoning", "reasoning_text")
STOP_REASONS = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
                "content_filter": "refusal", "stop": "end_turn"}
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


# ---------------------------------------------------------------- requests

def encode_request(req: Request, caps: ModelCaps, client: dict[str, JSON] | None = None) -> dict[str, JSON]:
    """``client``: a chat completions client's top-level fields (the same dialect, ``same_dialect``)."""
    p = req.params
    msgs: list[dict[str, JSON]] = []
    system = system_text(p)
    if system:
        msgs.append({"role": "system", "content": system})
    for m in req.messages:
        if m.role == "assistant":
            msgs.append(assistant(m))
        elif m.role == "user":
            msgs += user(m)
    body: dict[str, JSON] = {"model": req.model, "messages": msgs}
    tools = [{"type": "function", "function": tool_function(t)} for t in p.get("tools") or ()
             if isinstance(t, dict) and "input_schema" in t]
    if tools:
        body["tools"] = tools
        body.update(choice_fields(p.get("tool_choice"), lambda name: {"type": "function", "function": {"name": name}}))
    for src, dst in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                     ("stop_sequences", "stop")):
        if p.get(src) is not None:
            body[dst] = p[src]
    meta = p.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str):
        body["user"] = meta["user_id"]
    _reasoning(req, caps, body)
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return same_dialect(body, client, req, caps) if client is not None else body


# the reasoning parameters any flavor reads (each flavor's own: ``Flavor.reads``)
_REASONING_KEYS = ("reasoning", "reasoning_effort", "thinking")
_OWNED = frozenset({"model", "messages", "stream", "stream_options", *_REASONING_KEYS})
_SANITIZED = ("temperature", "top_p", "top_k")  # sent only while the canonical request still has them


def same_dialect(derived: dict[str, JSON], client: dict[str, JSON], req: Request, caps: ModelCaps) -> dict[str, JSON]:
    """A chat completions client's request for a chat completions upstream: the client's top-level fields as
    received and in its order, but for what thinkgate decides: the model, the (repaired) messages, the
    stream options it needs, and a reasoning parameter consistent with the thinking config after repair (a
    client's own reasoning fields pass as received while thinking stays on; the flavor's parameter is added
    from the config when the client sent none it reads). Tools the client sent in another dialect's form
    (flat, Anthropic-shaped) and Anthropic-shaped ``tool_choice`` go in their OpenAI form. Keys only
    thinkgate derived (a default ``max_tokens``) follow the client's."""
    owned = set(_OWNED)
    tools = client.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(_openai_tool(t) for t in tools)):
        owned |= {"tools", "tool_choice"}
    choice = client.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool", "none"):
        owned.add("tool_choice")
    on = req.thinking_enabled()
    reasoning = {k: v for k in _REASONING_KEYS if k in client and _keeps(k, v := client[k], on)}
    if "reasoning" in reasoning and isinstance(r := reasoning["reasoning"], dict) and "exclude" in r:
        trimmed = {k: v for k, v in r.items() if k != "exclude"}  # thinkgate answers exclude: it records
        if trimmed:
            reasoning["reasoning"] = trimmed
        else:
            del reasoning["reasoning"]
    reads = registry.flavor(caps.flavor).reads
    if any(k in reasoning for k in reads):  # the client's own choice stands; thinkgate adds none of its own
        for k in _REASONING_KEYS:
            derived.pop(k, None)
    out: dict[str, JSON] = {}
    for key, value in client.items():
        if key in _REASONING_KEYS:
            if key in reasoning:
                out[key] = reasoning[key]
            elif key in derived:
                out[key] = derived[key]
        elif key == "stream_options":
            if req.stream:
                out[key] = {**(value if isinstance(value, dict) else {}), "include_usage": True}
        elif key == "stream" and "stream" not in derived:
            out[key] = value
        elif key in owned:
            if key in derived:
                out[key] = derived[key]
        elif key not in _SANITIZED or key in req.params:
            out[key] = value
    extra = set(owned) | {"max_tokens"}  # what thinkgate may add: a default max_tokens, its own reasoning parameter
    if "max_completion_tokens" in client:
        extra.discard("max_tokens")
    if "tool_choice" in owned:
        extra.add("parallel_tool_calls")  # an Anthropic-shaped choice's disable_parallel_tool_use
    for key, value in derived.items():
        if key not in out and key in extra:
            out[key] = value
    return out


def _keeps(key: str, value: JSON, on: bool) -> bool:
    """A client's reasoning field passes while thinking is on; once thinking is off (the client's choice, or
    repair's) only a field that says off does."""
    if on:
        return True
    if key == "reasoning_effort":
        return value == "none" if isinstance(value, str) else False
    if key == "thinking":
        return isinstance(value, dict) and value.get("type") == "disabled"
    return isinstance(value, dict) and (value.get("enabled") is False or value.get("effort") == "none")


def _openai_tool(t: JSON) -> bool:
    return isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)


def choice_fields(choice: JSON, named: Callable[[JSON], JSON]) -> dict[str, JSON]:
    """An Anthropic-shaped ``tool_choice`` as OpenAI's ``tool_choice`` (``named``: the dialect's form of a chosen
    tool) and ``parallel_tool_calls: false`` for ``disable_parallel_tool_use``."""
    out: dict[str, JSON] = {}
    if isinstance(choice, dict):
        if choice.get("type") in _CHOICES:
            out["tool_choice"] = _CHOICES[choice["type"]]
        elif choice.get("type") == "tool":
            out["tool_choice"] = named(choice.get("name"))
        if choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False
    return out


def tool_function(tool: dict[str, JSON]) -> dict[str, JSON]:
    """An Anthropic-shaped tool as an OpenAI function (name, description, parameters)."""
    fn: dict[str, JSON] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    fn["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
    return fn


def _reasoning(req: Request, caps: ModelCaps, body: dict[str, JSON]) -> None:
    t = req.thinking
    if not isinstance(t, dict) or t.get("type") not in ("enabled", "adaptive"):
        return
    registry.flavor(caps.flavor).reasoning(t, body)


def assistant(m: Message) -> dict[str, JSON]:
    texts = [b.text for b in m.content if isinstance(b, TextBlock)]
    calls = [tool_call(b) for b in m.content if isinstance(b, ToolUseBlock)]
    text = "".join(texts)
    out: dict[str, JSON] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        out["tool_calls"] = calls
    signed = [b for b in m.content if isinstance(b, TextBlock) and b.sig is not None]
    if signed and (extra := openai_extra(signed[-1].sig)) is not None:
        out["extra_content"] = extra
    if m.provider is not None:
        out.update(unsealed(m.provider.fields))  # thinkgate's seals never go upstream
    return out


def system_text(params: dict[str, JSON]) -> str | None:
    """The canonical ``system`` parameter as one string (text blocks joined), None when there is none."""
    system = params.get("system")
    if isinstance(system, list):
        system = "\n\n".join(b["text"] for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    return system if isinstance(system, str) and system else None


def image_url(b: Block) -> str | None:
    """An Anthropic-shaped image block's source as a URL (a ``data:`` URL for base64 data); None: not an image."""
    if not (isinstance(b, OpaqueBlock) and b.type == "image" and isinstance(src := b.raw.get("source"), dict)):
        return None
    return str(src.get("url")) if src.get("type") == "url" else f"data:{src.get('media_type')};base64,{src.get('data')}"


def user(m: Message) -> list[dict[str, JSON]]:
    out: list[dict[str, JSON]] = []
    parts: list[dict[str, JSON]] = []
    for b in m.content:
        if isinstance(b, ToolResultBlock):
            out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": content_text(b.content)})
        elif isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif (url := image_url(b)) is not None:
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if parts:
        single = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if single else parts})
    return out


# ---------------------------------------------------------------- answers

def provider_fields(msg: dict[str, Any], origin: str) -> ProviderFields | None:
    fields = {k: msg[k] for k in PROVIDER_FIELDS if msg.get(k) not in (None, "", [])}
    return ProviderFields(origin, fields) if fields else None


def reasoning_text(msg: dict[str, Any]) -> str | None:
    return next((msg[k] for k in REASONING_TEXT if isinstance(msg.get(k), str) and msg[k]), None)


def decode_turn(body: Any, *, origin: str, model: str) -> Turn:
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
        raise bad_request("upstream answer has no choices")
    choice = body["choices"][0] if isinstance(body["choices"][0], dict) else {}
    msg = found if isinstance(found := choice.get("message"), dict) else {}
    blocks: list[Block] = []
    thought = reasoning_text(msg)
    if thought:
        blocks.append(ThoughtBlock(thought, origin))
    content = msg.get("content")
    sig = signature_from_openai_extra(msg.get("extra_content"))
    if isinstance(content, str) and (content or sig):
        blocks.append(TextBlock(content, sig=ProviderSig(origin, sig) if sig else None))
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        try:
            args = orjson.loads(fn.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            args = {}
        csig = signature_from_openai_extra(call.get("extra_content"))
        blocks.append(ToolUseBlock(str(call.get("id") or ""), fn["name"], args,
                                   sig=ProviderSig(origin, csig) if csig else None))
    return Turn(id=str(body.get("id") or ""), model=str(body.get("model") or model), content=blocks,
                stop_reason=STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"),
                usage=from_openai(body.get("usage")),
                provider=provider_fields(msg, origin))


# ---------------------------------------------------------------- headers

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

"""Gemini's wire (``generateContent``): canonical <-> Gemini bodies, and its streams both ways (parts live in
``gemini_parts``).

Upstream requests (``encode_request``): messages -> ``contents`` (``user`` / ``model``
roles; tool results -> ``functionResponse`` parts named after their call), and either
the native top-level fields a Gemini client sent (``native``, in the client's order: the call
table forwards them as the client's bytes, ``gateway.dialects.client_json``)
or a translation of the Anthropic-shaped params: ``system`` -> ``systemInstruction``,
tools -> ``functionDeclarations``, ``tool_choice`` -> ``toolConfig``, ``max_tokens``,
``temperature``, ``top_p``, ``top_k``, ``stop_sequences``, ``output_config.format`` (structured
output), a chat client's ``seed`` / penalties / ``response_format`` json_object and the thinking config ->
``generationConfig`` (``thinkingConfig`` gets ``includeThoughts`` and either a
``thinkingBudget`` or a ``thinkingLevel``, never both).

Native requests (``decode_request``, the /v1beta surface): ``contents`` -> canonical
messages; provider data the client sent is ``CLIENT``-origin (repair restores the
recorded form); call ids are minted deterministically from the conversation so a
replay finds its records again.

Answers (``decode_turn``): the first candidate's parts -> blocks; ``finishReason`` ->
stop reason (``tool_use`` when a call was made); ``usageMetadata`` -> usage.

The stream: Gemini ``streamGenerateContent?alt=sse`` chunks -> canonical (Anthropic-shaped) stream events.

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
    CLIENT,
    JSON,
    PROVIDER,
    UPSTREAM_EVENT,
    Block,
    BlockProvider,
    Message,
    OpaqueBlock,
    ProviderSig,
    Request,
    TextBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
    from_gemini,
)
from gateway.dialects.gemini.parts import (
    Mint,
    PrefixHash,
    block_from_part,
    blocks_from_parts,
    camel_part,
    deterministic_ids,
    map_responses,
    part_from_block,
)
from gateway.errors import GatewayError, bad_request, render_error
from gateway.sse import SSEEvent

STOP_REASONS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens", "SAFETY": "refusal", "RECITATION": "refusal",
                "BLOCKLIST": "refusal", "PROHIBITED_CONTENT": "refusal", "SPII": "refusal"}
_TOOL_MODES = {"auto": "AUTO", "any": "ANY", "tool": "ANY", "none": "NONE"}
_EFFORT_LEVELS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}
_CHAT_GENERATION = (("seed", "seed"), ("presence_penalty", "presencePenalty"),
                    ("frequency_penalty", "frequencyPenalty"))


# ---------------------------------------------------------------- upstream requests

def encode_contents(msgs: list[Message]) -> list[dict[str, JSON]]:
    names: dict[str, str] = {}
    out: list[dict[str, JSON]] = []
    for m in msgs:
        if m.role not in ("user", "assistant"):
            continue
        for b in m.content:
            if isinstance(b, ToolUseBlock):
                names[b.id] = b.name
        parts = [p for b in m.content if (p := part_from_block(b, names)) is not None]
        if parts:
            out.append({"role": "model" if m.role == "assistant" else "user", "parts": parts})
    return out


def encode_request(req: Request, native: dict[str, JSON] | None = None,
                   chat: dict[str, JSON] | None = None) -> dict[str, JSON]:
    """``native``: a Gemini client's top-level fields (the same dialect: they pass, ``contents`` is thinkgate's);
    ``chat``: a chat completions client's, of which Gemini takes the sampling fields it has."""
    contents = encode_contents(req.messages)
    if native is not None:
        same = dict(native)
        same["contents"] = contents  # (where the client put it)
        return same
    body: dict[str, JSON] = {"contents": contents}
    p = req.params
    system = _system_text(p.get("system"))
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    decls = [_declaration(t) for t in p.get("tools") or () if isinstance(t, dict) and "input_schema" in t]
    if decls:
        body["tools"] = [{"functionDeclarations": decls}]
        choice = p.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") in _TOOL_MODES:
            cfg: dict[str, JSON] = {"mode": _TOOL_MODES[choice["type"]]}
            if choice["type"] == "tool" and isinstance(choice.get("name"), str):
                cfg["allowedFunctionNames"] = [choice["name"]]
            body["toolConfig"] = {"functionCallingConfig": cfg}
    gen: dict[str, JSON] = {}
    for src, dst in (("max_tokens", "maxOutputTokens"), ("temperature", "temperature"), ("top_p", "topP"),
                     ("top_k", "topK"), ("stop_sequences", "stopSequences")):
        if p.get(src) is not None:
            gen[dst] = p[src]
    gen.update(_output(req, chat or {}))
    thinking = _thinking_config(req)
    if thinking is not None:
        gen["thinkingConfig"] = thinking
    if gen:
        body["generationConfig"] = gen
    return body


def _output(req: Request, client: dict[str, JSON]) -> dict[str, JSON]:
    """Structured output (``output_config.format`` -> ``responseJsonSchema``, a chat client's ``response_format``
    json_object -> ``responseMimeType``) and the chat client's sampling fields Gemini has (``params.PARAMS``)."""
    gen: dict[str, JSON] = {}
    for src, dst in _CHAT_GENERATION:
        if client.get(src) is not None:
            gen[dst] = client[src]
    config = req.params.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        gen["responseMimeType"] = "application/json"
        gen["responseJsonSchema"] = fmt["schema"]
    elif isinstance(rf := client.get("response_format"), dict) and rf.get("type") == "json_object":
        gen["responseMimeType"] = "application/json"
    return gen


def _system_text(system: JSON) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n\n".join(b["text"] for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _declaration(tool: dict[str, JSON]) -> dict[str, JSON]:
    decl: dict[str, JSON] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        decl["description"] = tool["description"]
    schema = tool.get("input_schema")
    if isinstance(schema, dict) and schema.get("properties"):
        decl["parameters"] = {k: v for k, v in schema.items() if k not in ("$schema", "additionalProperties")}
    return decl


def _thinking_config(req: Request) -> dict[str, JSON] | None:
    t = req.thinking
    if not isinstance(t, dict) or t.get("type") not in ("enabled", "adaptive"):
        return None
    cfg: dict[str, JSON] = {"includeThoughts": True}
    budget = t.get("budget_tokens")
    effort = (req.params.get("output_config") or {}).get("effort") \
        if isinstance(req.params.get("output_config"), dict) else None
    if t["type"] == "enabled" and isinstance(budget, int) and not isinstance(budget, bool):
        cfg["thinkingBudget"] = budget
    elif isinstance(effort, str) and effort in _EFFORT_LEVELS:
        cfg["thinkingLevel"] = _EFFORT_LEVELS[effort]
    return cfg


# ---------------------------------------------------------------- native requests

def decode_request(body: Any, model: str, *, stream: bool) -> Request:
    if not isinstance(body, dict):
        raise bad_request("Invalid JSON payload received. Expected an object.")
    contents = body.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list) or not contents:
        raise bad_request("* GenerateContentRequest.contents: contents is not specified")
    msgs: list[Message] = []
    before = PrefixHash()  # the user side of ``msgs``, hashed once per message
    for i, c in enumerate(contents):
        if not isinstance(c, dict) or not isinstance(c.get("parts"), list):
            raise bad_request(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty")
        role = c.get("role", "user")
        if role not in ("user", "model", "function"):
            raise bad_request(f"* GenerateContentRequest.contents[{i}].role: Please use a valid role: user, model.")
        msgs.append(_native_message(c["parts"], role, msgs, before))
        before.add(msgs[-1])
    return Request(model, msgs, None, stream, {})


def _native_message(parts: list[Any], role: str, before: list[Message], prefix: PrefixHash) -> Message:
    if role == "model":
        return Message("assistant", blocks_from_parts(parts, CLIENT, deterministic_ids(prefix)))
    prev = before[-1] if before and before[-1].role == "assistant" else None
    calls = [b for b in prev.content if isinstance(b, ToolUseBlock)] if prev is not None else []
    parts = [camel_part(p) if isinstance(p, dict) else p for p in parts]
    responses = [p["functionResponse"] for p in parts
                 if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
    ids = iter(map_responses(calls, responses))
    blocks: list[Block] = []
    for p in parts:
        if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict):
            response = p["functionResponse"].get("response")
            blocks.append(ToolResultBlock(next(ids), orjson.dumps(response if response is not None else {}).decode()))
        else:
            blocks += blocks_from_parts([p], CLIENT, deterministic_ids(prefix))
    return Message("user", blocks)


# ---------------------------------------------------------------- answers

def stop_reason(finish: JSON, called: bool) -> str | None:
    if finish is None:
        return None
    if called and finish in ("STOP", "FINISH_REASON_UNSPECIFIED"):
        return "tool_use"
    return STOP_REASONS.get(str(finish), "end_turn")


def usage(meta: JSON) -> dict[str, JSON]:
    """``usageMetadata`` -> canonical usage (``dialects.usage``)."""
    return from_gemini(meta)


def decode_turn(body: Any, *, origin: str, mint: Mint, model: str) -> Turn:
    if not isinstance(body, dict):
        raise bad_request("upstream answer is not a JSON object")
    cands = body.get("candidates")
    cand = cands[0] if isinstance(cands, list) and cands and isinstance(cands[0], dict) else {}
    content = found if isinstance(found := cand.get("content"), dict) else {}
    parts = listed if isinstance(listed := content.get("parts"), list) else []
    blocks = blocks_from_parts(parts, origin, mint)
    called = any(isinstance(b, ToolUseBlock) for b in blocks)
    return Turn(id=str(body.get("responseId") or ""), model=str(body.get("modelVersion") or model),
                content=blocks, stop_reason=stop_reason(cand.get("finishReason") or "STOP", called),
                usage=usage(body.get("usageMetadata")))


def text_of(turn: Turn) -> str:
    return "".join(b.text for b in turn.content if isinstance(b, TextBlock))




def is_google_error(body: bytes) -> bool:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict) and "status" in data["error"]


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

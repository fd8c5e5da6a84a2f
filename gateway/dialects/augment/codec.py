"""Augment chat-stream dialect (``POST /gateway/chat-stream``): requests to canonical.

The wire format follows Augment-BYOK (``AnkRoot/Augment-BYOK``
``payload/extension/out/byok/core/augment-protocol.js``, ``augment-chat.*.js``), which patches the
real extension, so it is what the extension parses (no first-party specification exists; the node and stop-reason
numbering are that file's).

Request (keys also accepted in camelCase, as the extension's own normaliser does)::

    {"model": "claude-opus-4-5", "conversation_id": "<uuid>", "message": "<user text>",
     "nodes": [<request node>...], "chat_history": [<exchange>...], "tool_definitions": [...],
     "user_guidelines": "...", "workspace_guidelines": "...", "rules": ..., "agent_memories": "...",
     "feature_detection_flags": {"support_tool_use_start": true},
     # thinkgate extensions (optional): "system", "max_tokens", "thinking" (Anthropic shape)}

    exchange = {"request_message": "...", "request_nodes": [...], "response_text": "...",
                "response_nodes": [<response node>...]}

An exchange's ``request_nodes`` carry the TOOL_RESULT nodes answering the previous exchange's
tool calls; the current request's ``nodes`` answer the last exchange. Each exchange becomes one
user message (tool results first, then text) and one assistant message (thinking from THINKING
nodes, then text, then tool calls); adjacent messages of one role are merged.

Defaults where the extension sends nothing: ``max_tokens`` 32000 and thinking enabled with
``budget_tokens`` 10000 (thinkgate fronts thinking models); ``"thinking": null`` or
``{"type": "disabled"}`` turns it off. Per-request editor context (``prefix``, ``suffix``,
``path``, ``lang``, ``mode``) is not put into the system prompt, so the prompt prefix stays
byte-stable across the requests of one thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.dialects.canonical import (
    JSON,
    Block,
    Message,
    OpaqueBlock,
    Request,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.errors import bad_request

# Request node types.
REQ_TEXT, REQ_TOOL_RESULT, REQ_IMAGE, REQ_IMAGE_ID, REQ_IDE_STATE, REQ_EDIT_EVENTS = 0, 1, 2, 3, 4, 5
REQ_CHECKPOINT_REF, REQ_CHANGE_PERSONALITY, REQ_FILE, REQ_FILE_ID, REQ_HISTORY_SUMMARY = 6, 7, 8, 9, 10
# Response node types.
RAW_RESPONSE, SUGGESTED_QUESTIONS, MAIN_TEXT_FINISHED, TOOL_USE, AGENT_MEMORY = 0, 1, 2, 5, 6
TOOL_USE_START, THINKING, BILLING_METADATA, TOKEN_USAGE = 7, 8, 9, 10
# stop_reason values.
STOP_UNSPECIFIED, STOP_END_TURN, STOP_MAX_TOKENS, STOP_TOOL_USE_REQUESTED = 0, 1, 2, 3
STOP_SAFETY, STOP_RECITATION, STOP_MALFORMED_FUNCTION_CALL = 4, 5, 6

# The one stop_reason table (reference section 6). ``refusal`` is the canonical name of OpenAI's
# ``content_filter`` (which the reference maps to SAFETY, 4), Gemini's SAFETY/RECITATION/BLOCKLIST/...
# finish reasons and Anthropic's own ``refusal``.
_ANTHROPIC_STOP = {"end_turn": STOP_END_TURN, "stop_sequence": STOP_END_TURN, "max_tokens": STOP_MAX_TOKENS,
                   "tool_use": STOP_TOOL_USE_REQUESTED, "refusal": STOP_SAFETY, "safety": STOP_SAFETY,
                   "recitation": STOP_RECITATION}
# Request nodes the model sees as labelled JSON text (as Augment-BYOK does).
_LABELLED = {REQ_IMAGE_ID: ("image_id_node", "ImageId"), REQ_IDE_STATE: ("ide_state_node", "IdeState"),
             REQ_EDIT_EVENTS: ("edit_events_node", "EditEvents"),
             REQ_CHECKPOINT_REF: ("checkpoint_ref_node", "CheckpointRef"),
             REQ_CHANGE_PERSONALITY: ("change_personality_node", "ChangePersonality"),
             REQ_FILE: ("file_node", "File"), REQ_FILE_ID: ("file_id_node", "FileId"),
             REQ_HISTORY_SUMMARY: ("history_summary_node", "HistorySummary")}
_IMAGE_FORMATS = {2: "image/jpeg", 3: "image/gif", 4: "image/webp"}

DEFAULT_MAX_TOKENS = 32_000
DEFAULT_THINKING: dict[str, JSON] = {"type": "enabled", "budget_tokens": 10_000}


@dataclass(frozen=True, slots=True)
class ToolMeta:
    mcp_server_name: str = ""
    mcp_tool_name: str = ""


@dataclass(slots=True)
class ChatRequest:
    """A decoded chat-stream request: the canonical request plus what the response needs."""

    request: Request
    conversation_id: str | None = None
    tool_meta: dict[str, ToolMeta] = field(default_factory=dict)
    tool_use_start: bool = True  # the client did not opt out of TOOL_USE_START nodes


def stop_reason_of(anthropic_reason: object) -> int:
    """Anthropic ``stop_reason`` -> Augment number (unknown values end the turn, as BYOK does)."""
    r = anthropic_reason.strip().lower() if isinstance(anthropic_reason, str) else ""
    return _ANTHROPIC_STOP.get(r, STOP_END_TURN)


# ---------------------------------------------------------------- helpers

def _pick(d: Any, *keys: str) -> Any:
    if isinstance(d, dict):
        for k in keys:
            if k in d:
                return d[k]
    return None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _node_type(node: Any) -> int:
    t = _pick(node, "type", "node_type", "nodeType")
    return t if isinstance(t, int) and not isinstance(t, bool) else -1


def _is_placeholder(text: str) -> bool:
    s = text.strip()
    return 0 < len(s) <= 16 and set(s) == {"-"}


def _image_block(img: Any) -> dict[str, JSON] | None:
    data = _str(_pick(img, "image_data", "imageData"))
    if not data:
        return None
    fmt = _pick(img, "format")
    media = _IMAGE_FORMATS.get(fmt, "image/png") if isinstance(fmt, int) else "image/png"
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}


# ---------------------------------------------------------------- request side

def _tool_result(node: Any) -> ToolResultBlock | None:
    tr = _pick(node, "tool_result_node", "toolResultNode")
    tid = _str(_pick(tr, "tool_use_id", "toolUseId")).strip()
    if not tid:
        return None
    parts: list[dict[str, JSON]] = []
    for n in _list(_pick(tr, "content_nodes", "contentNodes")):
        t = _node_type(n)
        if t == 1 and (text := _str(_pick(n, "text_content", "textContent"))).strip():
            parts.append({"type": "text", "text": text})
        elif t == 2 and (img := _image_block(_pick(n, "image_content", "imageContent"))) is not None:
            parts.append(img)
    raw = _pick(tr, "content")
    content: JSON
    if parts:
        content = parts
    elif isinstance(raw, str) or raw is None:
        content = raw or ""
    else:  # a client that sent a structured result: JSON text, as the upstream wants strings or blocks
        content = orjson.dumps(raw).decode()
    is_error = _pick(tr, "is_error", "isError") is True
    return ToolResultBlock(tid, content, True if is_error else None)


def _user_blocks(message: str, nodes: list[Any]) -> list[Block]:
    """Tool results first (the upstream wants them at the start), then text and other content."""
    results: list[Block] = []
    rest: list[Block] = []
    last_text: str | None = None

    def text(t: str) -> None:
        nonlocal last_text
        s = t.strip()
        if not s or _is_placeholder(s) or s == last_text:
            return
        rest.append(TextBlock(t))
        last_text = s

    text(message)
    for node in nodes:
        t = _node_type(node)
        if t == REQ_TEXT:
            text(_str(_pick(_pick(node, "text_node", "textNode"), "content")))
        elif t == REQ_TOOL_RESULT:
            if (tr := _tool_result(node)) is not None:
                results.append(tr)
        elif t == REQ_IMAGE:
            if (img := _image_block(_pick(node, "image_node", "imageNode"))) is not None:
                rest.append(OpaqueBlock(img))
                last_text = None
        elif t in _LABELLED:
            key, label = _LABELLED[t]
            camel = key.split("_")[0] + "".join(w.title() for w in key.split("_")[1:])
            value = _pick(node, key, camel)
            if value is not None:
                text(f"{label}: {orjson.dumps(value).decode()}")
    return results + rest


def _assistant_blocks(text: str, nodes: list[Any]) -> list[Block]:
    thinking: list[Block] = []
    finished, raw = "", ""
    uses: list[Any] = []
    starts: list[Any] = []
    for n in nodes:
        t = _node_type(n)
        if t == THINKING:
            th = _pick(n, "thinking")
            summary = _pick(th, "summary", "text")
            sig = _pick(th, "signature")
            if isinstance(summary, str) and summary:
                thinking.append(ThinkingBlock(summary, sig if isinstance(sig, str) and sig else None))
        elif t == MAIN_TEXT_FINISHED and _str(_pick(n, "content")).strip():
            finished = _str(_pick(n, "content"))
        elif t == RAW_RESPONSE:
            raw += _str(_pick(n, "content"))
        elif t == TOOL_USE:
            uses.append(n)
        elif t == TOOL_USE_START:
            starts.append(n)
    if not text.strip():
        text = finished if finished.strip() else raw
    out: list[Block] = list(thinking)
    if text.strip():
        out.append(TextBlock(text))
    seen: set[str] = set()
    for n in uses or starts:
        tu = _pick(n, "tool_use", "toolUse")
        tid = _str(_pick(tu, "tool_use_id", "toolUseId")).strip()
        name = _str(_pick(tu, "tool_name", "toolName")).strip()
        if not tid or not name or tid in seen:
            continue
        seen.add(tid)
        out.append(ToolUseBlock(tid, name, _json_object(_str(_pick(tu, "input_json", "inputJson")))))
    return out


def _json_object(raw: str) -> JSON:
    try:
        v = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return {}
    return v if isinstance(v, dict) else {}


def _request_nodes(d: Any, *keys: str) -> list[Any]:
    out: list[Any] = []
    for k in keys:
        out += _list(_pick(d, k))
    return out


def _messages(body: dict[str, Any]) -> list[Message]:
    msgs: list[Message] = []

    def add(role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if msgs and msgs[-1].role == role:
            msgs[-1].content += blocks
        else:
            msgs.append(Message(role, blocks))

    for i, h in enumerate(_list(_pick(body, "chat_history", "chatHistory"))):
        if not isinstance(h, dict):
            raise bad_request(f"chat_history.{i}: Input should be a valid dictionary")
        nodes = _request_nodes(h, "request_nodes", "requestNodes", "structured_request_nodes",
                               "structuredRequestNodes", "nodes")
        add("user", _user_blocks(_str(_pick(h, "request_message", "requestMessage", "message")), nodes))
        out_nodes = _request_nodes(h, "response_nodes", "responseNodes", "structured_output_nodes",
                                   "structuredOutputNodes")
        add("assistant", _assistant_blocks(_str(_pick(h, "response_text", "responseText", "response")),
                                           out_nodes))
    nodes = _request_nodes(body, "nodes", "structured_request_nodes", "structuredRequestNodes", "request_nodes",
                           "requestNodes")
    add("user", _user_blocks(_str(_pick(body, "message", "prompt")), nodes))
    return msgs


def _tools(defs: list[Any]) -> tuple[list[dict[str, JSON]], dict[str, ToolMeta]]:
    tools: list[dict[str, JSON]] = []
    meta: dict[str, ToolMeta] = {}
    for d in defs:
        name = _str(_pick(d, "name")).strip()
        if not name:
            continue
        schema = _pick(d, "input_schema", "inputSchema")
        if not isinstance(schema, dict):
            schema = _json_object(_str(_pick(d, "input_schema_json", "inputSchemaJson"))) or \
                {"type": "object", "properties": {}}
        tool: dict[str, JSON] = {"name": name}
        if (desc := _str(_pick(d, "description"))).strip():
            tool["description"] = desc
        tool["input_schema"] = schema
        tools.append(tool)
        server = _str(_pick(d, "mcp_server_name", "mcpServerName")).strip()
        mcp_tool = _str(_pick(d, "mcp_tool_name", "mcpToolName")).strip()
        if server or mcp_tool:
            meta[name] = ToolMeta(server, mcp_tool)
    return tools, meta


def _system(body: dict[str, Any]) -> str:
    parts = [_str(_pick(body, "system"))]
    parts += [_str(_pick(body, k, c)) for k, c in (("user_guidelines", "userGuidelines"),
                                                  ("workspace_guidelines", "workspaceGuidelines"))]
    rules = _pick(body, "rules")
    parts.append("\n".join(str(r).strip() for r in rules if str(r).strip()) if isinstance(rules, list)
                 else _str(rules))
    parts.append(_str(_pick(body, "agent_memories", "agentMemories")))
    return "\n\n".join(p.strip() for p in parts if p.strip())


def decode_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request("Request body must be a JSON object")
    model = _pick(body, "model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("model: Field required (the upstream model name, e.g. claude-opus-4-5)")
    history = _pick(body, "chat_history", "chatHistory")
    if history is not None and not isinstance(history, list):
        raise bad_request("chat_history: Input should be a valid list")
    msgs = _messages(body)
    if not msgs:
        raise bad_request("message: the request has no message, nodes or history")
    max_tokens = _pick(body, "max_tokens", "maxTokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    elif not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise bad_request("max_tokens: Input should be a valid integer")
    thinking = body["thinking"] if "thinking" in body else dict(DEFAULT_THINKING)
    if thinking is not None and not isinstance(thinking, dict):
        raise bad_request("thinking: Input should be a valid dictionary")
    params: dict[str, JSON] = {"max_tokens": max_tokens}
    if system := _system(body):
        params["system"] = system
    tools, meta = _tools(_list(_pick(body, "tool_definitions", "toolDefinitions")))
    if tools:
        params["tools"] = tools
    conv = _pick(body, "conversation_id", "conversationId", "conversationID")
    flags = _pick(body, "feature_detection_flags", "featureDetectionFlags")
    start = _pick(flags, "support_tool_use_start", "supportToolUseStart")
    return ChatRequest(
        request=Request(model=model, messages=msgs, thinking=thinking, stream=True, params=params),
        conversation_id=conv.strip() if isinstance(conv, str) and conv.strip() else None,
        tool_meta=meta,
        tool_use_start=start is not False,
    )

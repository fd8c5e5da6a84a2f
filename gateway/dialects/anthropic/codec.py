"""Anthropic Messages dialect: wire dicts <-> canonical model.

Decoding validates only what thinkgate itself relies on (types of the fields it
reads) and raises ``ClientError`` with a JSON-path message; everything else is
forwarded untouched for the upstream to judge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.dialects.canonical import (
    JSON,
    Block,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    Request,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
)
from gateway.errors import bad_request
from gateway.sse import SSEEvent, encode_event
from state.keys import replay_digest

_REQUEST_KEYS = frozenset(("model", "messages", "thinking", "stream"))
_TURN_KEYS = frozenset(("id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"))


# ---------------------------------------------------------------- blocks

def check_block(raw: Any, path: str) -> None:
    """Every rule a request block must meet (400 otherwise); ``decode_block`` builds on it."""
    problem = block_problem(raw)
    if problem is not None:
        raise bad_request(path + problem)


def block_problem(raw: Any) -> str | None:
    """What is wrong with a request block (the message after its JSON path), None when nothing is: the
    path is formatted only for a block that fails."""
    if type(raw) is not dict and not isinstance(raw, dict):
        return ": Input should be a valid dictionary or object to extract fields from"
    t = raw.get("type")
    if t == "text":
        if not isinstance(raw.get("text"), str):
            return ".text: Input should be a valid string"
    elif t == "thinking":
        thinking, signature = raw.get("thinking"), raw.get("signature")
        if thinking is not None and not isinstance(thinking, str):
            return ".thinking.thinking: Input should be a valid string"
        if signature is not None and not isinstance(signature, str):
            return ".thinking.signature: Input should be a valid string"
    elif t == "tool_use":
        if not isinstance(raw.get("id"), str):
            return ".tool_use.id: Input should be a valid string"
        if not isinstance(raw.get("name"), str):
            return ".tool_use.name: Input should be a valid string"
    elif t == "tool_result":
        if not isinstance(raw.get("tool_use_id"), str):
            return ".tool_result.tool_use_id: Input should be a valid string"
        is_error = raw.get("is_error")
        if is_error is not None and not isinstance(is_error, bool):
            return ".tool_result.is_error: Input should be a valid boolean"
    elif t == "redacted_thinking":
        if not isinstance(raw.get("data"), str):
            return ".redacted_thinking.data: Input should be a valid string"
    return None


def decode_block(raw: Any, path: str) -> Block:
    check_block(raw, path)
    return build_block(raw)


def build_block(raw: dict[str, JSON]) -> Block:
    """A block that passed ``check_block``, in canonical form."""
    t = raw.get("type")
    if t == "tool_result":
        return ToolResultBlock(raw["tool_use_id"], raw.get("content"), raw.get("is_error"), _rest(raw, _RESULT_KEYS))
    if t == "text":
        return TextBlock(raw["text"], _rest(raw, _TEXT_KEYS))
    if t == "thinking":
        return ThinkingBlock(raw.get("thinking"), raw.get("signature"), _rest(raw, _THINKING_KEYS))
    if t == "tool_use":
        return ToolUseBlock(raw["id"], raw["name"], raw.get("input"), _rest(raw, _TOOL_USE_KEYS))
    if t == "redacted_thinking":
        return RedactedThinkingBlock(raw["data"], _rest(raw, _REDACTED_KEYS))
    return OpaqueBlock(raw)


def encode_block(block: Block) -> dict[str, JSON]:
    if isinstance(block, OpaqueBlock):
        return block.raw
    if isinstance(block, TextBlock):
        out: dict[str, JSON] = {"type": "text", "text": block.text}
    elif isinstance(block, ThinkingBlock):
        out = {"type": "thinking"}
        if block.thinking is not None:
            out["thinking"] = block.thinking
        if block.signature is not None:
            out["signature"] = block.signature
    elif isinstance(block, RedactedThinkingBlock):
        out = {"type": "redacted_thinking", "data": block.data}
    elif isinstance(block, ToolUseBlock):
        out = {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    elif isinstance(block, ToolResultBlock):
        out = {"type": "tool_result", "tool_use_id": block.tool_use_id}
        if block.content is not None:
            out["content"] = block.content
        if block.is_error is not None:
            out["is_error"] = block.is_error
    else:  # another family's block (a Gemini thought): no Anthropic form (``records.store_block`` has one)
        raise ValueError(f"a {block.type} block has no Anthropic form")
    if block.extra:
        out.update(block.extra)
    return out


# ---------------------------------------------------------------- messages

def decode_message(raw: Any, i: int) -> Message:
    if type(raw) is not dict and not isinstance(raw, dict):
        raise bad_request(f"messages.{i}: Input should be a valid dictionary")
    role = raw.get("role")
    if not isinstance(role, str):
        raise bad_request(f"messages.{i}.role: Field required")
    content = raw.get("content")
    extra = _rest(raw, _MESSAGE_KEYS)
    if isinstance(content, str):
        return Message(role, [TextBlock(content)], content_was_string=True, extra=extra)
    if not isinstance(content, list):
        raise bad_request(f"messages.{i}.content: Input should be a valid list")
    for j, b in enumerate(content):
        problem = block_problem(b)
        if problem is not None:
            raise bad_request(f"messages.{i}.content.{j}{problem}")
    if role == "assistant":
        # checked now, built on first use: a turn replayed verbatim (its digest matches a record) may
        # never be built
        def blocks() -> list[Block]:
            return [build_block(b) for b in content]

        return Message(role, extra=extra, replay_digest=replay_digest(content), lazy=(content, blocks))
    return Message(role, [build_block(b) for b in content], extra=extra)


def encode_message(msg: Message) -> dict[str, JSON]:
    raw = msg.raw_blocks
    if raw is not None:  # never decoded: the client's own JSON goes through as it came
        return {"role": msg.role, "content": raw, **msg.extra}
    if msg.content_was_string and len(msg.content) == 1 and isinstance(msg.content[0], TextBlock) \
            and not msg.content[0].extra:
        content: JSON = msg.content[0].text
    else:
        content = [encode_block(b) for b in msg.content]
    out: dict[str, JSON] = {"role": msg.role, "content": content}
    if msg.extra:
        out.update(msg.extra)
    return out


# ---------------------------------------------------------------- requests

def decode_request(body: Any, decode_messages: Callable[[list[Any]], list[Message]] | None = None) -> Request:
    """``decode_messages`` decodes the (list) ``messages`` when given (``decode_message`` each, or reusing
    an earlier request's: ``gateway.continuation.replay_memo``)."""
    if not isinstance(body, dict):
        raise bad_request("Request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str):
        raise bad_request("model: Field required" if model is None else "model: Input should be a valid string")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad_request("messages: Field required" if messages is None else
                          "messages: Input should be a valid list")
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        raise bad_request("thinking: Input should be a valid dictionary")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad_request("stream: Input should be a valid boolean")
    return Request(
        model=model,
        messages=decode_messages(messages) if decode_messages is not None else
        [decode_message(m, i) for i, m in enumerate(messages)],
        thinking=thinking,
        stream=stream,
        params=_rest(body, _REQUEST_KEYS),
    )


def encode_request(req: Request, message: Callable[[Message], Any] = encode_message) -> dict[str, JSON]:
    """``message`` encodes each message."""
    return request_fields(req, [message(m) for m in req.messages])


def request_fields(req: Request, messages: Any) -> dict[str, JSON]:
    """The request's body with ``messages`` as its messages' value (``gateway.continuation.splice`` hands in their
    JSON)."""
    out: dict[str, JSON] = {"model": req.model, "messages": messages}
    if req.stream is not None:
        out["stream"] = req.stream
    if req.thinking is not None:
        out["thinking"] = req.thinking
    out.update(req.params)
    return out


# ---------------------------------------------------------------- responses

def decode_turn(body: Any) -> Turn:
    if not isinstance(body, dict) or not isinstance(body.get("content"), list):
        raise bad_request("upstream message has no content list")
    return Turn(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=[decode_block(b, f"content.{j}") for j, b in enumerate(body["content"])],
        stop_reason=body.get("stop_reason"),
        stop_sequence=body.get("stop_sequence"),
        usage=body.get("usage") or {},
        extra=_rest(body, _TURN_KEYS),
    )


def encode_turn(turn: Turn) -> dict[str, JSON]:
    out: dict[str, JSON] = {
        "id": turn.id, "type": "message", "role": "assistant", "model": turn.model,
        "content": [encode_block(b) for b in turn.content],
        "stop_reason": turn.stop_reason, "stop_sequence": turn.stop_sequence, "usage": turn.usage,
    }
    out.update(turn.extra)
    return out


_MESSAGE_KEYS = frozenset(("role", "content"))
_TEXT_KEYS = frozenset(("type", "text"))
_THINKING_KEYS = frozenset(("type", "thinking", "signature"))
_REDACTED_KEYS = frozenset(("type", "data"))
_TOOL_USE_KEYS = frozenset(("type", "id", "name", "input"))
_RESULT_KEYS = frozenset(("type", "tool_use_id", "content", "is_error"))


def _rest(raw: dict[str, JSON], known: frozenset[str]) -> dict[str, JSON]:
    if raw.keys() <= known:  # the common case, nothing unknown to carry (one C-level check)
        return {}
    return {k: v for k, v in raw.items() if k not in known}


# ---------------------------------------------------------------- streams

def betas(headers: Mapping[str, str]) -> list[str]:
    """The betas an ``anthropic-beta`` header names, in order (comma-separated, the lines joined)."""
    return [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]


def is_error_body(body: bytes) -> bool:
    """Whether an error body is the Messages API's own envelope (``{"type": "error", "error": {...}}``)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("type") == "error" and isinstance(data.get("error"), dict)


class StreamEncoder:
    """Anthropic client <- Anthropic upstream: events pass byte-for-byte; ``message_start``
    gains ``message._gateway.conversation_id`` when the conversation is known."""

    def __init__(self, scid: str | None) -> None:
        self.scid = scid

    def event(self, data: dict[str, Any], ev: SSEEvent | None) -> bytes:
        if self.scid is not None and data.get("type") == "message_start" and isinstance(data.get("message"), dict):
            data = {**data, "message": {**data["message"], "_gateway": {"conversation_id": self.scid}}}
            return encode_event(ev.event if ev is not None else "message_start", data)
        return ev.raw if ev is not None else encode_event(str(data.get("type")), data)

    def passthrough(self, ev: SSEEvent) -> bytes:
        return ev.raw

    def error(self, error_type: str, message: str) -> bytes:
        return encode_event("error", {"type": "error", "error": {"type": error_type, "message": message}})

    def end(self) -> bytes:
        return b""

    def ends(self, data: dict[str, Any]) -> bool:
        return data.get("type") in ("message_delta", "message_stop")  # the stop reason, the stop

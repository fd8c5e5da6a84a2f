"""Conversation export formats (``GET /gateway/conversations/{scid}``). Pure.

A stored conversation is a list of turn records: each has ``prompt`` (the request-side messages
that came after the previous assistant turn, Anthropic-shaped) and ``content`` (the assistant
blocks exactly as relayed). The export replays them in position order.

``openai`` (default) follows ADR 002 option 2 (per-iteration history): each tool-loop iteration
is ONE assistant message (its text blocks concatenated, ``content: ""`` when there is none, every
tool call in ``tool_calls``), followed by ONE ``tool`` message per result (``tool_call_id``;
string results as they are, anything else serialised as compact JSON). User text becomes a
``user`` message after the tool messages of the same request. Thinking travels next to the
message it belongs to, in OpenRouter's shape: ``reasoning_content`` (the thinking text) and
``reasoning_details`` (``reasoning.text`` with ``signature``; ``reasoning.encrypted`` with
``data`` for redacted thinking; ``format: "anthropic-claude-v1"``).

``anthropic``: the Messages-API ``messages`` list (prompt messages, then each turn's content).

Signatures and opaque fields (``signature``, redacted-thinking ``data``, ``thoughtSignature``,
``encrypted_content``, ``reasoning_opaque``, and the record's provider fields) are replaced by
``[redacted len=N]`` (N = the value's length in characters) unless ``include_signatures``.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from state.records import ConversationState, TurnRecord

Format = Literal["openai", "anthropic"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic")
REASONING_FORMAT = "anthropic-claude-v1"
OPAQUE_KEYS = frozenset({"signature", "thoughtSignature", "thought_signature", "encrypted_content", "_provider",
                         "reasoning_opaque"})
Msg = dict[str, Any]


def redacted(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return f"[redacted len={len(text)}]"


def export_conversation(conv: ConversationState, fmt: Format = "openai", *,
                        include_signatures: bool = False) -> dict[str, Any]:
    keep = include_signatures
    messages: list[Msg] = []
    for rec in conv.turns:
        if fmt == "anthropic":
            messages += [dict(m) for m in rec.prompt]
            messages.append({"role": "assistant", "content": [_block(b, keep) for b in rec.content]})
        else:
            for m in rec.prompt:
                messages += openai_request_messages(m)
            messages.append(openai_assistant(rec.content, keep))
    return {
        "conversation_id": conv.scid,
        "format": fmt,
        "signatures": "included" if keep else "redacted",
        "created_at": conv.created_at,
        "updated_at": conv.updated_at,
        "forked_from": conv.forked_from,
        "first_position": conv.first_position,
        "turns": [_turn_meta(rec, keep) for rec in conv.turns],
        "messages": messages,
    }


def _turn_meta(rec: TurnRecord, keep: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"position": rec.position, "turn_id": rec.turn_id, "model": rec.model,
                            "upstream": rec.upstream, "dialect": rec.dialect, "created_at": rec.created_at}
    if rec.provider:
        meta["provider"] = rec.provider if keep else {k: redacted(v) for k, v in rec.provider.items()}
    return meta


def _block(b: dict[str, Any], keep: bool) -> dict[str, Any]:
    """A block with its opaque top-level fields redacted (tool inputs and results are data, not touched)."""
    if keep:
        return dict(b)
    out = {}
    for k, v in b.items():
        opaque = k in OPAQUE_KEYS or (k == "data" and b.get("type") == "redacted_thinking")
        out[k] = redacted(v) if opaque and v is not None else v
    return out


# ------------------------------------------------------------------ OpenAI (ADR 002 option 2)

def tool_content(content: Any) -> str:
    """A tool result as the ``tool`` message's content: strings as they are, anything else as JSON."""
    if isinstance(content, str):
        return content
    return "" if content is None else orjson.dumps(content).decode()


def openai_request_messages(m: Msg) -> list[Msg]:
    """One request-side message -> ``tool`` messages (one per result), then the user's own content."""
    role = m.get("role", "user")
    content = m.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content}]
    tools: list[Msg] = []
    parts: list[Any] = []
    for b in content:
        btype = b.get("type") if isinstance(b, dict) else None
        if btype == "tool_result":
            tools.append({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                          "content": tool_content(b.get("content"))})
        elif btype == "text":
            parts.append({"type": "text", "text": b.get("text", "")})
        elif btype == "image" and isinstance(src := b.get("source"), dict) and src.get("type") == "base64":
            parts.append({"type": "image_url",
                          "image_url": {"url": f"data:{src.get('media_type')};base64,{src.get('data')}"}})
        else:
            parts.append(b)  # no OpenAI equivalent: the block as recorded
    if not parts:
        return tools
    single_text = len(parts) == 1 and isinstance(parts[0], dict) and parts[0].get("type") == "text"
    return [*tools, {"role": role, "content": parts[0]["text"] if single_text else parts}]


def openai_assistant(blocks: list[dict[str, Any]], keep: bool) -> Msg:
    """One assistant turn (one tool-loop iteration) -> one merged assistant message."""
    text: list[str] = []
    thinking: list[str] = []
    details: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for b in blocks:
        btype = b.get("type")
        if btype == "text":
            text.append(b.get("text", ""))
        elif btype == "thinking":
            if b.get("thinking"):
                thinking.append(b["thinking"])
            sig = b.get("signature")
            details.append({"type": "reasoning.text", "text": b.get("thinking"),
                            "signature": sig if keep or sig is None else redacted(sig),
                            "format": REASONING_FORMAT, "index": len(details)})
        elif btype == "redacted_thinking":
            data = b.get("data")
            details.append({"type": "reasoning.encrypted", "data": data if keep else redacted(data),
                            "format": REASONING_FORMAT, "index": len(details)})
        elif btype == "tool_use":
            calls.append({"id": b.get("id"), "type": "function",
                          "function": {"name": b.get("name"), "arguments": orjson.dumps(b.get("input")).decode()}})
    msg: Msg = {"role": "assistant", "content": "".join(text)}
    if thinking:
        msg["reasoning_content"] = "\n\n".join(thinking)
    if details:
        msg["reasoning_details"] = details
    if calls:
        msg["tool_calls"] = calls
    return msg

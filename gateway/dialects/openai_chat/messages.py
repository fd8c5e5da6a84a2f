"""OpenAI chat messages <-> canonical messages and blocks (both directions).

Decoding (``decode_messages``):

- ``system``/``developer`` messages -> the Anthropic ``system`` value; consecutive
  ``tool`` messages -> one user message of ``tool_result`` blocks in order (a user
  message right after them joins it); consecutive assistant messages merge (some
  clients send the reasoning and the tool calls of one answer as two messages).
- Assistant reasoning, most authoritative first: ``reasoning_details``
  (``reasoning.text`` -> thinking with its signature, ``reasoning.encrypted`` ->
  redacted_thinking), else ``reasoning_content`` / ``reasoning`` / vendor
  ``thinking`` + ``signature``: thinking without a signature, which repair restores
  from the records or sanitize drops. ``cot_id``, ``cot_summary`` and other vendor
  fields are ignored; entries of another provider keep their ``format`` in ``extra``.
- Anthropic blocks inside OpenAI content lists (``tool_result``, ``image``,
  ``thinking`` ...) are tolerated as they are; ``content`` may be null, ``[]`` or
  ``""`` on tool-only assistant messages.

- Provider data: ``tool_calls[i].extra_content.google.thought_signature`` (and a
  message-level ``extra_content``, for the last text) -> the block's ``ProviderSig``;
  with ``provider_fields`` (the model routes to an OpenAI-compatible upstream) the
  message-level reasoning fields are kept whole as ``Message.provider`` instead of
  becoming thinking blocks. Both are ``CLIENT``-origin until repair matches a record.
- A replayed history (``continue_messages``, for ``gateway.continuation.replay_memo``): messages
  appended to a history decoded before are decoded alone when that gives exactly
  what decoding the whole history gives (nothing they hold merges with it).

Encoding: ``assistant_message`` (a finished turn as ``choices[0].message``) and the
``reasoning_details`` entries the stream encoder shares. Thinking text and signatures
are copied verbatim both ways (never stripped or normalised). Thought blocks (another
family's reasoning) become ``reasoning_content``; signatures ``extra_content``; a
turn's provider fields are returned as they came.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    CLIENT,
    JSON,
    THINKING_TYPES,
    Block,
    Message,
    OpaqueBlock,
    ProviderFields,
    ProviderSig,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.openai_compat import SEAL_KEY
from gateway.errors import bad_request

FORMAT = "anthropic-claude-v1"
_NATIVE_BLOCKS = frozenset({"image", "document", "search_result", "tool_result", "tool_use", "thinking",
                            "redacted_thinking"})
_BAD_TOOL_ID = re.compile(r"[^A-Za-z0-9_-]")



# (with thinkgate's seal beside ``reasoning_opaque``: ``openai_compat.Seals``)
PROVIDER_FIELDS = ("reasoning_details", "reasoning_opaque", "reasoning_text", "reasoning_content", SEAL_KEY)
SYSTEM_ROLES = ("system", "developer")


def decode_messages(raw: list[JSON], *, provider_fields: bool = False,
                    start: int = 0) -> tuple[JSON, list[Message]]:
    """(Anthropic ``system`` or None, the conversation). ``start``: the index of ``raw[0]`` in the
    request's ``messages`` (error paths name it)."""
    system: list[dict[str, JSON]] = []
    out: list[Message] = []
    tool_run = False  # out[-1] is a user message made of ``tool`` messages
    for i, m in enumerate(raw, start):
        path = f"messages.{i}"
        if not isinstance(m, dict):
            raise bad_request(f"{path}: Input should be a valid dictionary")
        role = m.get("role")
        if role in SYSTEM_ROLES:
            system += _system_parts(m.get("content"), path)
        elif role == "tool":
            block = _tool_result(m, path)
            if tool_run:
                out[-1].content.append(block)
            else:
                out.append(Message("user", [block]))
            tool_run = True
        elif role == "user":
            blocks, was_string = _content(m.get("content"), path, allow_null=False)
            if tool_run:
                out[-1].content += blocks
            else:
                out.append(Message("user", blocks, content_was_string=was_string))
            tool_run = False
        elif role == "assistant":
            msg = _assistant(m, path, provider_fields)
            if out and out[-1].role == "assistant":
                prev, both = out[-1], out[-1].content + msg.content
                prev.content = [b for b in both if b.type in THINKING_TYPES] + \
                    [b for b in both if b.type not in THINKING_TYPES]
                prev.content_was_string = False
                if msg.provider is not None:
                    merged = {**(prev.provider.fields if prev.provider else {}), **msg.provider.fields}
                    prev.provider = ProviderFields(CLIENT, merged)
            else:
                out.append(msg)
            tool_run = False
        elif role == "function":
            raise bad_request(f"{path}.role: 'function' messages are not supported; use tool_calls and 'tool'")
        else:
            raise bad_request(f"{path}.role: Input should be 'system', 'developer', 'user', 'assistant' or 'tool'")
    return _system_value(system), out


def system_of(raw: list[JSON]) -> JSON:
    """The ``system`` value ``decode_messages(raw)`` gives (for a history it decoded without error)."""
    parts: list[dict[str, JSON]] = []
    for i, m in enumerate(raw):
        if isinstance(m, dict) and m.get("role") in SYSTEM_ROLES:
            parts += _system_parts(m.get("content"), f"messages.{i}")
    return _system_value(parts)


def continue_messages(kept: Sequence[Message | None], tail: list[JSON], start: int, *,
                      provider_fields: bool = False) -> list[Message] | None:
    """What ``decode_messages(raw + tail)[1]`` is, given ``kept`` = ``decode_messages(raw)[1]`` (untouched
    since; None where one is not) and ``start`` = ``len(raw)``, decoding only ``tail``. That holds when the
    tail is empty (a retry) or its first message is an assistant message following no assistant message:
    a ``tool`` or ``user`` message could join the kept last one, an assistant message the kept assistant
    one; past the first, the tail's messages merge only among themselves. None otherwise: decode it all.
    (System messages only feed the system value, which ``system_of`` takes from the whole history.)"""
    done = [m for m in kept if m is not None]
    if len(done) < len(kept):
        return None
    if not tail:
        return done
    if (done and done[-1].role == "assistant") or not _has_role(tail[0], ("assistant",)):
        return None
    return done + decode_messages(tail, provider_fields=provider_fields, start=start)[1]


def _has_role(m: JSON, roles: tuple[str, ...]) -> bool:
    return isinstance(m, dict) and m.get("role") in roles


def _system_value(parts: list[dict[str, JSON]]) -> JSON:
    if not parts:
        return None
    if len(parts) == 1 and set(parts[0]) == {"type", "text"}:
        return parts[0]["text"]
    return parts


def _system_parts(content: JSON, path: str) -> list[dict[str, JSON]]:
    blocks, _ = _content(content, path, allow_null=False)
    out = []
    for j, b in enumerate(blocks):
        if not isinstance(b, TextBlock):
            raise bad_request(f"{path}.content.{j}: system messages may only contain text")
        if b.text:
            out.append(anthropic.encode_block(b))
    return out


def _content(content: JSON, path: str, *, allow_null: bool) -> tuple[list[Block], bool]:
    """Blocks of a message's ``content`` and whether it was a plain string."""
    if isinstance(content, str):
        return ([TextBlock(content)] if content or not allow_null else []), True
    if isinstance(content, list):
        return [_part(p, f"{path}.content.{j}") for j, p in enumerate(content)], False
    if content is None and allow_null:
        return [], False
    raise bad_request(f"{path}.content: Input should be a string or a list of content parts")


def _part(p: JSON, path: str) -> Block:
    if not isinstance(p, dict):
        raise bad_request(f"{path}: Input should be a valid dictionary")
    t = p.get("type")
    if t in ("text", "input_text", "output_text", "refusal"):
        text = p.get("refusal" if t == "refusal" else "text")
        if not isinstance(text, str):
            raise bad_request(f"{path}.text: Input should be a valid string")
        return TextBlock(text, {"cache_control": p["cache_control"]} if "cache_control" in p else {})
    if t in ("image_url", "input_image"):
        return OpaqueBlock(_image(p, path))
    if t in ("file", "input_file"):
        return OpaqueBlock(_file(p, path))
    if t in _NATIVE_BLOCKS:
        return anthropic.decode_block(p, path)
    raise bad_request(f"{path}.type: content part type {t!r} is not supported")


def _data_url(url: str, path: str, kinds: tuple[str, ...]) -> tuple[str, str]:
    head, sep, data = url.partition(",")
    media = head[5:].split(";")[0]
    if not sep or ";base64" not in head or not media.startswith(kinds):
        raise bad_request(f"{path}: only base64 data URLs of type {' or '.join(kinds)} are supported")
    return media, data


def _image(p: dict[str, JSON], path: str) -> dict[str, JSON]:
    ref = p.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    if not isinstance(url, str) or not url:
        raise bad_request(f"{path}.image_url.url: Field required")
    if url.startswith("data:"):
        media, data = _data_url(url, f"{path}.image_url.url", ("image/",))
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise bad_request(f"{path}.image_url.url: Input should be an http(s) or data URL")


def _file(p: dict[str, JSON], path: str) -> dict[str, JSON]:
    ref = p.get("file", p)
    data = ref.get("file_data") if isinstance(ref, dict) else None
    if not isinstance(data, str):
        raise bad_request(f"{path}.file.file_data: Field required (uploaded file ids are not supported)")
    media, raw = _data_url(data, f"{path}.file.file_data", ("application/pdf",))
    return {"type": "document", "source": {"type": "base64", "media_type": media, "data": raw}}


def _tool_id(tid: JSON, path: str) -> str:
    if not isinstance(tid, str) or not tid:
        raise bad_request(f"{path}: Field required")
    return _BAD_TOOL_ID.sub("_", tid)  # Anthropic tool ids are [A-Za-z0-9_-]+; same mapping both sides


def _tool_result(m: dict[str, JSON], path: str) -> ToolResultBlock:
    tid = _tool_id(m.get("tool_call_id"), f"{path}.tool_call_id")
    content = m.get("content")
    if content is None or content == "" or content == []:
        return ToolResultBlock(tid)
    if isinstance(content, str):
        return ToolResultBlock(tid, content)
    blocks, _ = _content(content, path, allow_null=False)
    return ToolResultBlock(tid, [anthropic.encode_block(b) for b in blocks])


def _assistant(m: dict[str, JSON], path: str, provider_fields: bool = False) -> Message:
    fields = {k: m[k] for k in PROVIDER_FIELDS if m.get(k) not in (None, "", [])} if provider_fields else {}
    blocks = [] if provider_fields else _reasoning_blocks(m, path)
    content, was_string = _content(m.get("content"), path, allow_null=True)
    if m.get("function_call") is not None and not m.get("tool_calls"):
        raise bad_request(f"{path}.function_call: legacy function calls are not supported; use tool_calls")
    sig = signature_from_openai_extra(m.get("extra_content"))
    if sig is not None:
        texts = [b for b in content if isinstance(b, TextBlock)]
        if texts:
            texts[-1].sig = ProviderSig(CLIENT, sig)
        else:
            content.append(TextBlock("", sig=ProviderSig(CLIENT, sig)))
    blocks += content
    blocks += _tool_calls(m.get("tool_calls"), path)
    return Message("assistant", blocks, content_was_string=was_string and len(blocks) == 1 and bool(content)
                   and sig is None, provider=ProviderFields(CLIENT, fields) if fields else None)


def _reasoning_blocks(m: dict[str, JSON], path: str) -> list[Block]:
    details = m.get("reasoning_details")
    if details is not None:
        if not isinstance(details, list):
            raise bad_request(f"{path}.reasoning_details: Input should be a valid list")
        blocks = [b for j, d in enumerate(details)
                  if (b := _detail(d, f"{path}.reasoning_details.{j}")) is not None]
        if blocks:
            return blocks
    for key in ("reasoning_content", "reasoning"):
        text = m.get(key)
        if isinstance(text, str) and text:
            return [ThinkingBlock(text, None)]
    thinking, signature = m.get("thinking"), m.get("signature")
    if isinstance(thinking, dict):  # vendor shapes: {"thinking"|"text"|"content": ..., "signature": ...}
        signature = thinking.get("signature", signature)
        thinking = next((thinking[k] for k in ("thinking", "text", "content") if isinstance(thinking.get(k), str)),
                        None)
    signature = signature if isinstance(signature, str) and signature else None
    if isinstance(thinking, str) and (thinking or signature):
        return [ThinkingBlock(thinking, signature)]
    return []


def _detail(d: JSON, path: str) -> Block | None:
    if not isinstance(d, dict):
        raise bad_request(f"{path}: Input should be a valid dictionary")
    fmt = d.get("format")
    extra: dict[str, JSON] = {"format": fmt} if isinstance(fmt, str) and fmt not in (FORMAT, "unknown") else {}
    t = d.get("type")
    if t == "reasoning.text":
        text, signature = d.get("text"), d.get("signature")
        if not isinstance(text, str | None) or not isinstance(signature, str | None):
            raise bad_request(f"{path}: text and signature should be strings")
        if text is None and not signature:
            return None
        return ThinkingBlock(text, signature or None, extra)
    if t == "reasoning.encrypted":
        data = d.get("data")
        if not isinstance(data, str) or not data:
            raise bad_request(f"{path}.data: Input should be a non-empty string")
        return RedactedThinkingBlock(data, extra)
    if t == "reasoning.summary" and isinstance(d.get("summary"), str) and d["summary"]:
        return ThinkingBlock(d["summary"], None, extra)
    return None  # entry types nothing upstream can use


def _tool_calls(raw: JSON, path: str) -> list[Block]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"{path}.tool_calls: Input should be a valid list")
    out: list[Block] = []
    for j, call in enumerate(raw):
        p = f"{path}.tool_calls.{j}"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise bad_request(f"{p}.function: Field required")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad_request(f"{p}.function.name: Field required")
        sig = signature_from_openai_extra(call.get("extra_content"))
        out.append(ToolUseBlock(_tool_id(call.get("id"), f"{p}.id"), fn["name"],
                                _arguments(fn.get("arguments"), f"{p}.function.arguments"),
                                sig=ProviderSig(CLIENT, sig) if sig else None))
    return out


def _arguments(raw: JSON, path: str) -> JSON:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        raise bad_request(f"{path}: Input should be a JSON object encoded as a string")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"{path}: Input should be valid JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(value, dict):
        raise bad_request(f"{path}: Input should be a JSON object, not {type(value).__name__}")
    return value




# ---------------------------------------------------------------- answers

def text_entry(text: str | None, signature: str | None, index: int) -> dict[str, JSON]:
    return {"type": "reasoning.text", "text": text or "", "signature": signature, "format": FORMAT, "index": index}


def encrypted_entry(data: str, index: int) -> dict[str, JSON]:
    return {"type": "reasoning.encrypted", "data": data, "format": FORMAT, "index": index}


def tool_call(block: ToolUseBlock) -> dict[str, JSON]:
    call: dict[str, JSON] = {"id": block.id, "type": "function",
                             "function": {"name": block.name, "arguments": orjson.dumps(block.input).decode()}}
    extra = openai_extra(block.sig)
    if extra is not None:
        call["extra_content"] = extra
    return call


def assistant_message(content: Sequence[Block], *, exclude_reasoning: bool = False,
                      provider: ProviderFields | None = None) -> dict[str, JSON]:
    """A finished turn's blocks as ``choices[0].message``: text joined, thinking as
    ``reasoning_content`` (all text joined) and ``reasoning_details`` (one entry per block)."""
    texts: list[str] = []
    thoughts: list[str] = []
    details: list[dict[str, JSON]] = []
    calls: list[dict[str, JSON]] = []
    extra: dict[str, JSON] | None = None
    for b in content:
        if isinstance(b, TextBlock):
            texts.append(b.text)
            extra = openai_extra(b.sig) or extra
        elif isinstance(b, ThoughtBlock):
            thoughts.append(b.text)
        elif isinstance(b, ThinkingBlock):
            thoughts.append(b.thinking or "")
            details.append(text_entry(b.thinking, b.signature, len(details)))
        elif isinstance(b, RedactedThinkingBlock):
            details.append(encrypted_entry(b.data, len(details)))
        elif isinstance(b, ToolUseBlock):
            calls.append(tool_call(b))
    out: dict[str, JSON] = {"role": "assistant", "content": "".join(texts) if texts else None, "refusal": None}
    if not exclude_reasoning:
        if any(isinstance(b, ThinkingBlock | ThoughtBlock) for b in content):
            out["reasoning_content"] = "".join(thoughts)
        if details:
            out["reasoning_details"] = details
        if provider is not None:
            out.update(provider.fields)
    if extra is not None:
        out["extra_content"] = extra
    if calls:
        out["tool_calls"] = calls
    return out


# ---------------------------------------------------------------- Gemini's signature on the OpenAI wire
# Google's OpenAI compatibility carries a Gemini thought signature in a message's or a tool call's ``extra_content``
# (https://ai.google.dev/gemini-api/docs/thought-signatures): read and written here for OpenAI clients and for
# OpenAI-compatible upstreams alike.

def openai_extra(sig: ProviderSig | None) -> dict[str, JSON] | None:
    """``extra_content`` for an OpenAI client: ``{"google": {"thought_signature": ...}}``."""
    if sig is None or not isinstance(sig.value, str):
        return None
    return {"google": {"thought_signature": sig.value}}


def signature_from_openai_extra(extra: Any) -> str | None:
    google = extra.get("google") if isinstance(extra, dict) else None
    value = google.get("thought_signature") if isinstance(google, dict) else None
    return value if isinstance(value, str) and value else None

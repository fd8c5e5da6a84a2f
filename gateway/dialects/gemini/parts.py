"""Gemini ``parts`` <-> canonical blocks, both directions, and the signature conventions.

- A part keeps its ``thoughtSignature`` (or Vertex ``thought_signature``) as the
  block's ``ProviderSig``, on the part it arrived on: text parts (also empty-text,
  signature-only ones), ``thought: true`` parts (``ThoughtBlock``) and
  ``functionCall`` parts. Parts thinkgate does not model (``inlineData``,
  ``executableCode`` ...) travel whole as ``OpaqueBlock({"type": "gemini_part", ...})``.
- Gemini's function calls carry no id: thinkgate mints one per call (``Mint``) and
  maps ``functionResponse`` parts back to calls by name and order. A call that came
  with its own ``id`` keeps it, and it is sent back (with its response's ``id``).
- OpenAI clients see a signature as ``extra_content.google.thought_signature``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from gateway.dialects.canonical import (
    JSON,
    Block,
    Message,
    OpaqueBlock,
    ProviderSig,
    TextBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.toolchain import content_text

# The documented dummy signatures (reference 2.4): the first works on the Gemini API and Vertex AI,
# the second on the Gemini API only.
BYPASS_SIGNATURE = "skip_thought_signature_validator"
BYPASS_VALUES = (BYPASS_SIGNATURE, "context_engineering_is_the_way_to_go")
SIG_KEYS = ("thoughtSignature", "thought_signature")
OPAQUE_PART = "gemini_part"
_TEXT_KEYS = frozenset({"text", "thought", *SIG_KEYS})

Mint = Callable[[int, str, JSON], str]  # (k-th call of the answer, name, args) -> tool-use id
MINTED_ID = re.compile(r"^call_[0-9a-f]{24}$")  # ids thinkgate mints (never sent to Gemini)


def part_signature(part: dict[str, Any]) -> JSON:
    for key in SIG_KEYS:
        if part.get(key) is not None:
            return part[key]
    return None


_CAMEL = {"function_call": "functionCall", "function_response": "functionResponse", "inline_data": "inlineData",
          "file_data": "fileData", "executable_code": "executableCode",
          "code_execution_result": "codeExecutionResult"}


def camel_part(part: dict[str, Any]) -> dict[str, Any]:
    """A part with the snake_case names the API also accepts in their camelCase form."""
    if not any(k in _CAMEL for k in part):
        return part
    return {_CAMEL.get(k, k): v for k, v in part.items()}


def block_from_part(part: Any, origin: str, call_id: Callable[[str, JSON], str]) -> Block:
    if not isinstance(part, dict):
        return OpaqueBlock({"type": OPAQUE_PART, "part": part})
    part = camel_part(part)
    value = part_signature(part)
    sig = ProviderSig(origin, value) if value is not None else None
    fc = part.get("functionCall")
    if isinstance(fc, dict) and isinstance(fc.get("name"), str):
        args = fc.get("args")
        args = args if isinstance(args, dict) else {}
        tid = fc["id"] if isinstance(fc.get("id"), str) and fc["id"] else call_id(fc["name"], args)
        return ToolUseBlock(tid, fc["name"], args, sig=sig)
    text = part.get("text")
    if isinstance(text, str) and set(part) <= _TEXT_KEYS:
        if part.get("thought") is True:
            return ThoughtBlock(text, origin, sig)
        return TextBlock(text, sig=sig)
    return OpaqueBlock({"type": OPAQUE_PART, "part": part})


def blocks_from_parts(parts: Iterable[Any], origin: str, mint: Mint) -> list[Block]:
    k = 0

    def call_id(name: str, args: JSON) -> str:
        nonlocal k
        k += 1
        return mint(k - 1, name, args)

    return [block_from_part(p, origin, call_id) for p in parts]


def _signed(part: dict[str, JSON], sig: ProviderSig | None) -> dict[str, JSON]:
    if sig is not None:
        part["thoughtSignature"] = sig.value
    return part


def function_response(b: ToolResultBlock, name: str) -> dict[str, JSON]:
    """A tool result as Gemini's ``response`` object: a JSON object text as that object, other
    content as ``{"result": text}`` (``{"error": text}`` for an error result)."""
    content = b.content
    if isinstance(content, str):
        try:
            parsed = orjson.loads(content)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return {"name": name, "response": parsed}
    text = content_text(content)
    return {"name": name, "response": {"error" if b.is_error else "result": text}}


def part_from_block(b: Block, names: dict[str, str]) -> dict[str, JSON] | None:
    """One canonical block as a part (None: nothing Gemini can take)."""
    if isinstance(b, TextBlock):
        return _signed({"text": b.text}, b.sig)
    if isinstance(b, ThoughtBlock):
        return _signed({"text": b.text, "thought": True}, b.sig)
    if isinstance(b, ToolUseBlock):
        call: dict[str, JSON] = {"name": b.name, "args": b.input if isinstance(b.input, dict) else {}}
        if not MINTED_ID.match(b.id):
            call["id"] = b.id  # Gemini's own call id (Vertex sends them): given back as received
        return _signed({"functionCall": call}, b.sig)
    if isinstance(b, ToolResultBlock):
        fr = function_response(b, names.get(b.tool_use_id, "unknown_function"))
        if b.tool_use_id in names and not MINTED_ID.match(b.tool_use_id):
            fr = {"id": b.tool_use_id, **fr}
        return {"functionResponse": fr}
    if isinstance(b, OpaqueBlock):
        if b.type == OPAQUE_PART and isinstance(part := b.raw.get("part"), dict):
            return part
        src = b.raw.get("source")
        if b.type in ("image", "document") and isinstance(src, dict) and src.get("type") == "base64":
            return {"inlineData": {"mimeType": src.get("media_type"), "data": src.get("data")}}
        return {"text": f"[{b.type or 'content'} omitted]"}
    return None  # Anthropic thinking: sanitize removed it for this target


# ---------------------------------------------------------------- tool-call ids

class PrefixHash:
    """The user side of a conversation as it grows message by message (text and result counts): each message is
    hashed once, so a request's every answer gets its prefix's digest in time linear in the request (a digest per
    content, each over every earlier message, kept a worker busy for 32 s on 16,000 contents)."""

    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h = hashlib.sha256(b"tg-gemini-call/1")

    def add(self, m: Message) -> None:
        if m.role != "user":
            return
        h = self._h
        h.update(b"\x1eU")
        for b in m.content:
            if isinstance(b, TextBlock):
                h.update(b"\x1f" + b.text.encode("utf-8", "surrogatepass"))
            elif isinstance(b, ToolResultBlock):
                h.update(b"\x1dR")

    def digest(self) -> bytes:
        return self._h.copy().digest()


def prefix_digest(prefix: Sequence[Message]) -> bytes:
    """The user side of the conversation before an answer (text and result counts)."""
    h = PrefixHash()
    for m in prefix:
        h.add(m)
    return h.digest()


def deterministic_ids(prefix: Sequence[Message] | PrefixHash) -> Mint:
    """Ids that a client replaying the same conversation (without ids) gets again: the answer's
    user-side prefix, the call's position, name and arguments. The prefix's digest is taken on the first call
    only (most parts call nothing)."""
    digest: list[bytes] = []

    def mint(k: int, name: str, args: JSON) -> str:
        if not digest:
            digest.append(prefix.digest() if isinstance(prefix, PrefixHash) else prefix_digest(prefix))
        args_bytes = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
        h = hashlib.sha256(digest[0] + b"%d\0" % k + name.encode() + b"\0" + args_bytes)
        return "call_" + h.hexdigest()[:24]
    return mint


def map_responses(calls: Sequence[ToolUseBlock], parts: Iterable[dict[str, Any]]) -> list[str]:
    """Tool-use ids for ``functionResponse`` parts: by ``id`` when given, else the next unclaimed call
    of the same name in call order."""
    responses = list(parts)
    known = {c.id for c in calls}
    claimed = {r["id"] for r in responses if isinstance(r.get("id"), str) and r["id"] in known}
    queues: dict[str, list[str]] = {}
    for c in calls:
        if c.id not in claimed:
            queues.setdefault(c.name, []).append(c.id)
    out: list[str] = []
    for n, fr in enumerate(responses):
        rid, name = fr.get("id"), fr.get("name")
        if isinstance(rid, str) and rid in claimed:
            out.append(rid)
        elif isinstance(name, str) and queues.get(name):
            out.append(queues[name].pop(0))
        else:
            out.append(f"call_unmatched_{n}")
    return out

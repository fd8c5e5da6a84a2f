"""OpenAI Responses API (``POST /v1/responses``) as a client surface: request bodies -> canonical, turns -> Response
objects and their output items (shapes and sources: docs/responses-api.md; the stream is ``openai_responses_stream``).

Requests (``decode_request``) become the canonical request with Anthropic-shaped ``params``, as the chat decoder
does (its tool, tool-choice, reasoning and max-token rules are reused): ``instructions`` and ``system``/``developer``
message items become the system prompt; consecutive assistant-side items (``reasoning``, assistant ``message``,
``function_call``) become one assistant message; ``function_call_output`` items tool results in a user message.

Reasoning travels in ``reasoning`` items. Their ``encrypted_content`` is the gateway's own sealed encoding of the
canonical blocks the upstream needs back byte-exact (``Seal``/``Unseal``, supplied by the caller: a thinking block
with its signature, a redacted block, a Gemini thought, or the block a Gemini ``thoughtSignature`` rides on), or of
a turn's message-level reasoning fields (an OpenAI-compatible upstream's ``reasoning_details``, ``reasoning_opaque``
/ ``reasoning_text`` or ``reasoning_content``: a reasoning item of their own after the turn's other items, which go
back onto the turn's assistant message); a reasoning item whose content does not unseal carries nothing verifiable
and is dropped (thinking is never forged from a summary). Which of a turn's items the client kept does not matter
for a recorded conversation: repair restores the turn from its record.

Output item ids name the recorded turn (``ItemIds``): ``<kind>_<scid>.<position>.<place>``, ``place`` the item's place
in the turn's ``layout`` (the same with ``include`` and without), so ``previous_response_id`` and bare item references
resolve against the store on any replica, per tenant.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.dialects.canonical import (
    JSON,
    Block,
    Message,
    OpaqueBlock,
    ProviderFields,
    RedactedThinkingBlock,
    Request,
    SurfaceOptions,
    TextBlock,
    ThinkingBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.openai_chat.codec import max_tokens_of, reasoning_of, tool_and_sampling_params
from gateway.dialects.responses.upstream import minted_item
from gateway.errors import ClientError, bad_request


class Seal(Protocol):
    """Blocks (and a turn's message-level reasoning fields) -> encrypted_content."""

    def __call__(self, blocks: list[Block], provider: ProviderFields | None = None, /) -> str: ...


# encrypted_content -> (blocks, message-level fields) (None: not the gateway's, or altered)
Unseal = Callable[[str], tuple[list[Block], ProviderFields | None] | None]

ENCRYPTED = "reasoning.encrypted_content"
NOT_PERSISTED = (" Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove "
                 "this item from your input.")
REASONING, MESSAGE, FUNCTION_CALL = "rs", "msg", "fc"
_ID = re.compile(r"(resp|rs|msg|fc)_([A-Za-z0-9_-]{16,64})\.(\d{1,9})(?:\.(\d{1,6}))?")
# echoed on the Response object as the client sent them (with the API's defaults)
ECHOED: dict[str, JSON] = {"instructions": None, "max_output_tokens": None, "metadata": {}, "parallel_tool_calls": True,
                            "previous_response_id": None, "reasoning": None, "store": True, "temperature": 1.0,
                            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
                            "truncation": "disabled", "user": None}
_STOP_INCOMPLETE = {"max_tokens": "max_output_tokens", "model_context_window_exceeded": "max_output_tokens",
                    "refusal": "content_filter"}


@dataclass(frozen=True, slots=True)
class ItemIds:
    """The ids of one response and its output items: the conversation and position its turn is recorded at."""

    scid: str
    position: int

    @property
    def response(self) -> str:
        return f"resp_{self.scid}.{self.position}"

    def item(self, kind: str, index: int) -> str:
        return f"{kind}_{self.scid}.{self.position}.{index}"


@dataclass(frozen=True, slots=True)
class ParsedId:
    kind: str
    scid: str
    position: int
    index: int | None


def parse_id(value: object) -> ParsedId | None:
    """A response or item id this gateway minted (None: any other string)."""
    m = _ID.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        return None
    return ParsedId(m[1], m[2], int(m[3]), int(m[4]) if m[4] is not None else None)


@dataclass(slots=True)
class ResponsesRequest:
    """A decoded Responses request: the canonical request plus what the answer needs."""

    request: Request
    echo: dict[str, JSON]
    previous_response_id: str | None = None
    include_encrypted: bool = False
    summary: bool = False  # reasoning.summary asked for: thinking text streams as reasoning summary text


def previous_not_found(rid: str) -> ClientError:
    """The API's answer to a ``previous_response_id`` that names nothing (docs/upstream-rules.md)."""
    return ClientError(400, f"Previous response with id '{rid}' not found.", "invalid_request_error",
                       "previous_response_not_found")


# ---------------------------------------------------------------- requests

def references_of(body: Any) -> list[str]:
    """The ids of the input items that are bare references (``item_reference``, or an item with only an id)."""
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return []
    return [ref for item in items if (ref := _reference(item)) is not None]


def _reference(item: Any) -> str | None:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return None
    if item.get("type") == "item_reference" or set(item) <= {"id", "type"}:
        return str(item["id"])
    return None


def decode_request(body: Any, unseal: Unseal, resolved: dict[str, dict[str, JSON]] | None = None,
                   adaptive_only: bool | None = None) -> ResponsesRequest:
    """``resolved``: the full items of the bare references the caller looked up (by id); ``adaptive_only``: as
    ``openai_chat.decode_request``."""
    if not isinstance(body, dict):
        raise bad_request("Request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model: Field required" if model is None else "model: Input should be a non-empty string")
    stream = _typed(body, "stream", bool, "a valid boolean")
    prev = _typed(body, "previous_response_id", str, "a valid string")
    store = _typed(body, "store", bool, "a valid boolean")
    store = True if store is None else store
    include = _typed(body, "include", list, "a list of strings") or []
    if not all(isinstance(i, str) for i in include):
        raise bad_request("include: Input should be a list of strings")
    reasoning = _typed(body, "reasoning", dict, "a valid dictionary")
    instructions = _typed(body, "instructions", str, "a valid string")
    sealed: set[int] = set()
    system, messages = decode_items(body.get("input"), unseal, resolved or {}, store=store, sealed=sealed)
    if not messages:
        raise bad_request("input: the request has no input items")
    chat_view = {"reasoning": reasoning} if reasoning is not None else {}
    thinking, effort = reasoning_of(chat_view, model, adaptive_only)
    params: dict[str, JSON] = {}
    system_text = "\n\n".join(([instructions] if instructions else []) + system)
    if system_text:
        params["system"] = system_text
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise bad_request("max_output_tokens: Input should be a positive integer")
    params["max_tokens"] = max_tokens_of({"max_tokens": limit}, thinking)
    tools = body.get("tools")  # hosted and custom tools have no upstream counterpart here: left out
    if isinstance(tools, list):
        tools = [t for t in tools if not (isinstance(t, dict) and t.get("type") not in ("function", None))]
    params.update(tool_and_sampling_params(body, tools))
    if effort is not None:
        params["output_config"] = {"effort": effort}
    metadata = _typed(body, "metadata", dict, "a valid dictionary")
    if metadata is not None and not all(isinstance(v, str) for v in metadata.values()):
        raise bad_request("metadata: Input should be a dictionary of strings")
    echo = {k: body.get(k, default) for k, default in ECHOED.items()}
    orjson.dumps(echo)  # echoed on the answer: too deep to encode is the client's 400 (``pipeline.TOO_DEEP``), now
    summary = reasoning.get("summary") if isinstance(reasoning, dict) else None
    surface = SurfaceOptions(sealed=frozenset(sealed))
    return ResponsesRequest(Request(model, messages, thinking, bool(stream), params, surface=surface), echo, prev,
                            ENCRYPTED in include, summary is not None)


def _typed(body: dict[str, JSON], key: str, kind: type, what: str) -> Any:
    """``body[key]`` when absent (None) or of ``kind``, else a 400 naming it."""
    value = body.get(key)
    if value is not None and not isinstance(value, kind):
        raise bad_request(f"{key}: Input should be {what}")
    return value


def decode_items(items: Any, unseal: Unseal, resolved: dict[str, dict[str, JSON]], *, store: bool = True,
                 sealed: set[int] | None = None) -> tuple[list[str], list[Message]]:
    """Input items -> (system texts, messages). A bare reference the caller could not resolve is the API's 404.
    ``sealed`` gets the ``id()`` of every block decoded from sealed content (or given a sealed signature)."""
    return _decode_items(items, unseal, resolved, store, sealed if sealed is not None else set())


def _decode_items(items: Any, unseal: Unseal, resolved: dict[str, dict[str, JSON]], store: bool,
                  sealed: set[int]) -> tuple[list[str], list[Message]]:
    if isinstance(items, str):
        return [], [Message("user", [TextBlock(items)], content_was_string=True)]
    if items is None:
        return [], []
    if not isinstance(items, list):
        raise bad_request("input: Input should be a string or a list of input items")
    system: list[str] = []
    msgs: list[Message] = []
    carried: list[Block] = []  # unsealed blocks that ride on a later (or earlier) block of the same turn

    def add(role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if msgs and msgs[-1].role == role:
            if role == "user" and all(isinstance(b, ToolResultBlock) for b in blocks):
                lead: list[Block] = [b for b in msgs[-1].content if isinstance(b, ToolResultBlock)]
                rest: list[Block] = [b for b in msgs[-1].content if not isinstance(b, ToolResultBlock)]
                msgs[-1].content = lead + blocks + rest
            else:
                msgs[-1].content += blocks
        else:
            if msgs and msgs[-1].role == "assistant":
                _apply_carried(msgs[-1], carried, sealed)
            msgs.append(Message(role, blocks))

    for k, raw in enumerate(items):
        if not isinstance(raw, dict):
            raise bad_request(f"input.{k}: Input should be a valid dictionary")
        item = resolved.get(ref, raw) if (ref := _reference(raw)) is not None else raw
        if item is raw and ref is not None:
            raise ClientError(404, f"Item with id '{ref}' not found." + ("" if store else NOT_PERSISTED),
                              "invalid_request_error")
        t = item.get("type")
        if t in (None, "message"):
            role = item.get("role")
            if role in ("system", "developer"):
                system.append(_text_of(item.get("content"), f"input.{k}.content"))
            elif role in ("user", "assistant"):
                add(role, _content_blocks(item.get("content"), f"input.{k}.content", role))
            else:
                raise bad_request(f"input.{k}.role: Input should be 'user', 'assistant', 'system' or 'developer'")
        elif t == "function_call":
            add("assistant", [_call_block(item, k)])
        elif t == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise bad_request(f"input.{k}.call_id: Field required")
            add("user", [ToolResultBlock(call_id, _output(item.get("output"), f"input.{k}.output"))])
        elif t == "reasoning":
            token = item.get("encrypted_content")
            opened = unseal(token) if isinstance(token, str) and token else None
            blocks = opened[0] if opened is not None else None
            if opened is not None and opened[1] is not None:
                if not msgs or msgs[-1].role != "assistant":
                    msgs.append(Message("assistant", []))
                _add_fields(msgs[-1], opened[1])
            if blocks:
                reasoning = ThinkingBlock | RedactedThinkingBlock | ThoughtBlock
                own: list[Block] = [b for b in blocks if isinstance(b, reasoning)]
                sealed.update(id(b) for b in own)
                carried += [b for b in blocks if isinstance(b, TextBlock | ToolUseBlock) and b.sig is not None]
                if msgs and msgs[-1].role == "assistant":
                    msgs[-1].content += own
                elif own:
                    add("assistant", own)
                else:
                    msgs.append(Message("assistant", []))
        else:
            raise bad_request(f"input.{k}.type: input item type {t!r} is not supported")
    if msgs and msgs[-1].role == "assistant":
        _apply_carried(msgs[-1], carried, sealed)
    return system, [m for m in msgs if m.content]


def _add_fields(msg: Message, fields: ProviderFields) -> None:
    """A turn's sealed message-level fields go back onto its assistant message (a later item's win a key)."""
    held = msg.provider
    merged = {**held.fields, **fields.fields} if held is not None and held.origin == fields.origin else fields.fields
    msg.provider = ProviderFields(fields.origin, merged)


def _apply_carried(msg: Message, carried: list[Block], sealed: set[int]) -> None:
    """Signatures sealed in a turn's reasoning items go back onto the blocks they rode on (same call id and name,
    or the same text)."""
    for c in carried:
        for b in msg.content:
            if not isinstance(b, TextBlock | ToolUseBlock) or b.sig is not None:
                continue
            if (isinstance(c, ToolUseBlock) and isinstance(b, ToolUseBlock) and (b.id, b.name) == (c.id, c.name)) \
                    or (isinstance(c, TextBlock) and isinstance(b, TextBlock) and b.text == c.text):
                b.sig = c.sig
                sealed.add(id(b))
                break
    carried.clear()


def _text_of(content: Any, path: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise bad_request(f"{path}: Input should be a string or a list of content parts")


def _content_blocks(content: Any, path: str, role: str) -> list[Block]:
    if isinstance(content, str):
        return [TextBlock(content)] if content or role == "user" else []
    if not isinstance(content, list):
        raise bad_request(f"{path}: Input should be a string or a list of content parts")
    out: list[Block] = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise bad_request(f"{path}.{j}: Input should be a valid dictionary")
        ptype = part.get("type")
        if ptype in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(f"{path}.{j}.text: Field required")
            out.append(TextBlock(text))
        elif ptype == "refusal" and isinstance(part.get("refusal"), str):
            out.append(TextBlock(part["refusal"]))
        elif ptype == "input_image":
            out.append(OpaqueBlock(_image(part, f"{path}.{j}")))
        else:
            raise bad_request(f"{path}.{j}.type: content part type {ptype!r} is not supported")
    return out


def _image(part: dict[str, JSON], path: str) -> dict[str, JSON]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise bad_request(f"{path}.image_url: Field required")
    if url.startswith("data:") and ";base64," in url:
        media, _, data = url[5:].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _call_block(item: dict[str, JSON], k: int) -> ToolUseBlock:
    call_id, name, args = item.get("call_id"), item.get("name"), item.get("arguments")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"input.{k}.call_id: Field required")
    if not isinstance(name, str) or not name:
        raise bad_request(f"input.{k}.name: Field required")
    if not isinstance(args, str):
        raise bad_request(f"input.{k}.arguments: Input should be a valid string")
    try:
        value = orjson.loads(args) if args.strip() else {}
    except orjson.JSONDecodeError:
        raise bad_request(f"input.{k}.arguments: Input should be a JSON object encoded as a string") from None
    if not isinstance(value, dict):
        raise bad_request(f"input.{k}.arguments: Input should be a JSON object encoded as a string")
    return ToolUseBlock(call_id, name, value)


def _output(output: Any, path: str) -> JSON:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        parts: list[JSON] = []
        for j, p in enumerate(output):
            text = p.get("text") if isinstance(p, dict) else None
            if isinstance(p, dict) and p.get("type") in ("input_text", "output_text") and isinstance(text, str):
                parts.append({"type": "text", "text": p["text"]})
            elif isinstance(p, dict) and p.get("type") == "input_image":
                parts.append(_image(p, f"{path}.{j}"))
            else:
                raise bad_request(f"{path}.{j}: Input should be an input_text or input_image part")
        return parts
    raise bad_request(f"{path}: Input should be a string or a list of content parts")


# ---------------------------------------------------------------- answers

def reasoning_item(item_id: str, text: str | None, sealed: str | None, *, summary: bool) -> dict[str, JSON]:
    out: dict[str, JSON] = {"id": item_id, "type": "reasoning",
                            "summary": [{"type": "summary_text", "text": text}] if summary and text else []}
    if sealed is not None:
        out["encrypted_content"] = sealed
    return out


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, JSON]:
    done = status == "completed"
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if done else []
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, JSON]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


@dataclass(frozen=True, slots=True)
class Slot:
    """One place in a turn's item list: the item's kind and the block it shows (None: the turn's message-level
    fields). ``own``: a reasoning item of its own for a signature riding on ``block`` (or for the fields), shown only
    with ``include: ["reasoning.encrypted_content"]`` (without its sealed content it carries nothing)."""

    kind: str
    block: Block | None
    own: bool = False


def layout(blocks: Sequence[Block], provider: ProviderFields | None = None) -> list[Slot]:
    """The one rule for a turn's items and their ids: in order, one reasoning item per reasoning block, one message
    item per text block with text, one function call item per call, a reasoning item of its own for a signature
    riding on a call (before it) or a text (after it), and last one for the turn's message-level fields. An item's id
    names its place here (``ItemIds.item(kind, place)``) whether or not the answer shows the places before it, so its
    id is the same with ``include`` and without, streamed, answered whole or read back (``GET``, item references)."""
    out: list[Slot] = []
    for b in blocks:
        if isinstance(b, ThinkingBlock | ThoughtBlock | RedactedThinkingBlock):
            out.append(Slot(REASONING, b))
        elif isinstance(b, TextBlock):
            if b.text:  # an empty text (Gemini's last part may carry only a signature) is no message
                out.append(Slot(MESSAGE, b))
            if b.sig is not None:
                out.append(Slot(REASONING, b, own=True))
        elif isinstance(b, ToolUseBlock):
            if b.sig is not None:  # (the call as it starts, before its input: as the stream seals it)
                out.append(Slot(REASONING, ToolUseBlock(b.id, b.name, {}, sig=b.sig), own=True))
            out.append(Slot(FUNCTION_CALL, b))
    if provider is not None:
        out.append(Slot(REASONING, None, own=True))
    return out


def output_items(blocks: Sequence[Block], ids: ItemIds, seal: Seal, *, include_encrypted: bool,
                 summary: bool, provider: ProviderFields | None = None) -> list[dict[str, JSON]]:
    """A turn's blocks as output items (``layout``; the places of the items of their own left out without
    ``include``). A Responses upstream's own reasoning item (a thought block whose value is that item) is shown as
    the gateway's, its id, summary and ``encrypted_content`` sealed in ours, so it opens on any replica without
    records. The stream emits the very same items (``openai_responses_stream``)."""
    out: list[dict[str, JSON]] = []
    for place, slot in enumerate(layout(blocks, provider)):
        if slot.own and not include_encrypted:
            continue
        item_id, b = ids.item(slot.kind, place), slot.block
        if slot.own:
            out.append(reasoning_item(item_id, None, seal([], provider) if b is None else seal([b]), summary=summary))
        elif isinstance(b, ThinkingBlock | ThoughtBlock | RedactedThinkingBlock):
            text = b.text if isinstance(b, ThoughtBlock) else b.thinking if isinstance(b, ThinkingBlock) else None
            sealed = seal([b]) if include_encrypted else None
            out.append(reasoning_item(item_id, text, sealed, summary=summary))
        elif isinstance(b, TextBlock):
            out.append(message_item(item_id, b.text))
        elif isinstance(b, ToolUseBlock):
            out.append(call_item(item_id, b.id, b.name, orjson.dumps(b.input).decode()))
    return out


def minted_ids(blocks: Sequence[Block], ids: ItemIds) -> dict[str, str]:
    """The ids a Responses upstream minted for a turn's reasoning items (which earlier releases showed clients as
    they were) -> the gateway's ids of those items."""
    out: dict[str, str] = {}
    for place, slot in enumerate(layout(blocks)):
        b = slot.block
        minted = minted_item(b.sig.value) if isinstance(b, ThoughtBlock) and b.sig is not None else None
        if minted is not None:
            out[str(minted["id"])] = ids.item(REASONING, place)
    return out


def usage(u: JSON) -> dict[str, JSON]:
    """Anthropic usage -> Responses usage (input tokens include the cached ones)."""
    u = u if isinstance(u, dict) else {}

    def n(key: str) -> int:
        v = u.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    cached = n("cache_read_input_tokens")
    prompt = n("input_tokens") + n("cache_creation_input_tokens") + cached
    out_tokens = n("output_tokens")
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + out_tokens}


def response_object(rid: str, *, model: str, created_at: int, echo: dict[str, JSON], output: list[dict[str, JSON]],
                    status: str = "completed", stop_reason: JSON = None, usage_: JSON = None,
                    error: dict[str, JSON] | None = None, scid: str | None = None) -> dict[str, JSON]:
    incomplete = _STOP_INCOMPLETE.get(stop_reason) if isinstance(stop_reason, str) else None
    if status == "completed" and incomplete is not None:
        status = "incomplete"
    out: dict[str, JSON] = {"id": rid, "object": "response", "created_at": created_at, "status": status,
                            "error": error, "incomplete_details": {"reason": incomplete} if incomplete else None,
                            "model": model, "output": output, **echo,
                            "usage": usage(usage_) if status != "in_progress" else None}
    if scid is not None:
        out["_gateway"] = {"conversation_id": scid}
    return out


def encode_response(turn: Turn, ids: ItemIds, seal: Seal, *, echo: dict[str, JSON], created_at: int,
                    include_encrypted: bool, summary: bool, scid: str | None = None) -> dict[str, JSON]:
    output = output_items(turn.content, ids, seal, include_encrypted=include_encrypted, summary=summary,
                          provider=turn.provider)
    return response_object(ids.response, model=turn.model, created_at=created_at, echo=echo, output=output,
                           stop_reason=turn.stop_reason, usage_=turn.usage, scid=scid)


def answer(p: ResponsesRequest, turn: Turn, ids: ItemIds, seal: Seal, scid: str | None) -> dict[str, JSON]:
    """The Response object answering a decoded request with ``turn``."""
    return encode_response(turn, ids, seal, echo=p.echo, created_at=int(time.time()),
                           include_encrypted=p.include_encrypted, summary=p.summary, scid=scid)

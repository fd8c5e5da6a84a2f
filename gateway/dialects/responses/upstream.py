"""OpenAI Responses API UPSTREAM dialect (``POST {base}/responses``; routed by ``PREFIX=responses@BASE_URL``).

Requests (``encode_request``): canonical -> a Responses body: the system prompt as ``instructions``, the messages as
``input`` items (``encode_items``), Anthropic-shaped tools as function tools, ``tool_choice``, ``max_output_tokens``,
``reasoning`` from the thinking configuration, ``metadata.user_id`` as ``safety_identifier``, a JSON-schema
``output_config.format`` as ``text.format`` (the chat parameters that reach it: ``params``' Responses column);
always ``store: false`` and ``include: ["reasoning.encrypted_content"]``:
thinkgate is the conversation's memory (its records), so the upstream keeps nothing and every replica can serve the
next request.

Answers (``decode_turn``; the stream form is ``responses_upstream_stream``): ``output`` items -> canonical blocks
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
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects.canonical import (
    JSON,
    Block,
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
from gateway.dialects.responses.passthrough import same_dialect
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

"""The simulator's OpenRouter profile for Anthropic models (``/openrouter/api/v1/chat/completions``, model
``anthropic/...``): OpenRouter translates the chat completions body to Anthropic Messages, Anthropic validates it
(the strict Anthropic rules, ``thinkgate_sim.rules``) and OpenRouter relays Anthropic's error (docs/upstream-rules.md,
``compat-anthropic``).

The translation (reference 3.1, 3.2, 3.4; its details are INFERRED where no source shows them):

- ``reasoning`` (``enabled: false`` or ``effort: "none"``: off; ``max_tokens``: the budget; ``effort``, or
  ``reasoning_effort``: a budget per effort) -> ``thinking: enabled`` with ``budget_tokens``; no reasoning parameter:
  thinking off. The budget is at least 1024 and ``max_tokens`` above it (OpenRouter sizes them itself).
- An assistant message: its ``reasoning_details`` in order (``reasoning.text`` -> a ``thinking`` block with the
  entry's ``signature``, none when the entry has none; ``reasoning.encrypted`` -> ``redacted_thinking``), then its
  text, then a ``tool_use`` per tool call. ``tool`` messages -> ``tool_result`` blocks of one user message with the
  user text after them; ``system`` / ``developer`` -> ``system``.
- The model: ``anthropic/claude-sonnet-4.5`` -> ``claude-sonnet-4-5``.

Answers carry ``reasoning`` and ``reasoning_details`` (``reasoning.text`` with its ``signature``, format
``anthropic-claude-v1``; ``reasoning.encrypted`` for redacted thinking), as OpenRouter returns a Claude answer
(reference 3.2, 3.3). Every answer thinks when thinking is on (interleaved thinking).
"""

from __future__ import annotations

from typing import Any

import orjson

from thinkgate_sim.rules import INTERLEAVED_BETA, check_messages_request
from thinkgate_sim.scenarios import plan_reply
from thinkgate_sim.signing import Minter

PREFIX = "anthropic/"
FORMAT = "anthropic-claude-v1"
BETAS = frozenset({INTERLEAVED_BETA})
_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 24576}
_CHOICES = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def applies(profile_is_openrouter: bool, body: Any) -> bool:
    return profile_is_openrouter and isinstance(body, dict) and str(body.get("model", "")).startswith(PREFIX)


def _budget(body: dict[str, Any]) -> int | None:
    r, effort = body.get("reasoning"), body.get("reasoning_effort")
    if isinstance(r, dict):
        if r.get("enabled") is False or r.get("effort") == "none":
            return None
        if isinstance(r.get("max_tokens"), int):
            return int(r["max_tokens"])
        effort = r.get("effort") or effort or "medium"
    if not isinstance(effort, str) or effort == "none":
        return None
    return _BUDGETS.get(effort, 8192)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _assistant(m: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    details = m.get("reasoning_details")
    for d in details if isinstance(details, list) else ():
        if not isinstance(d, dict):
            continue
        if d.get("type") == "reasoning.text":
            block: dict[str, Any] = {"type": "thinking", "thinking": d.get("text") or ""}
            if d.get("signature"):
                block["signature"] = d["signature"]
            blocks.append(block)
        elif d.get("type") == "reasoning.encrypted":
            blocks.append({"type": "redacted_thinking", "data": d.get("data")})
    if text := _text(m.get("content")):
        blocks.append({"type": "text", "text": text})
    for c in m.get("tool_calls") or ():
        fn = c.get("function") or {} if isinstance(c, dict) else {}
        try:
            args = orjson.loads(fn.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            args = {}
        blocks.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"), "input": args})
    return blocks


def to_messages(body: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic Messages body OpenRouter would send for ``body``."""
    system: list[str] = []
    msgs: list[dict[str, Any]] = []
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text(m.get("content")))
            continue
        if role == "assistant":
            msgs.append({"role": "assistant", "content": _assistant(m)})
            continue
        block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": _text(m.get("content"))} \
            if role == "tool" else {"type": "text", "text": _text(m.get("content"))}
        if msgs and msgs[-1]["role"] == "user":
            msgs[-1]["content"].append(block)
        else:
            msgs.append({"role": "user", "content": [block]})
    budget = _budget(body)
    out: dict[str, Any] = {"model": body["model"][len(PREFIX):].replace(".", "-"), "messages": msgs}
    asked = body.get("max_tokens") or body.get("max_completion_tokens")
    out["max_tokens"] = asked if isinstance(asked, int) else 8192
    if budget is not None:
        budget = max(1024, budget)
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}
        out["max_tokens"] = max(out["max_tokens"], budget + 1)
    if system:
        out["system"] = "\n\n".join(system)
    tools = [t["function"] for t in body.get("tools") or () if isinstance(t, dict) and isinstance(t.get("function"),
                                                                                                 dict)]
    if tools:
        out["tools"] = [{"name": f.get("name"), "input_schema": f.get("parameters") or {"type": "object"}}
                        for f in tools]
    choice = body.get("tool_choice")
    if isinstance(choice, str) and choice in _CHOICES:
        out["tool_choice"] = _CHOICES[choice]
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out["tool_choice"] = {"type": "tool", "name": choice["function"].get("name")}
    for key in ("temperature", "top_p"):
        if key in body:
            out[key] = body[key]
    return out


def check(body: dict[str, Any], minter: Minter) -> tuple[int, Any, str] | None:
    """Anthropic's first violation of the translated body, relayed as OpenRouter relays a provider error."""
    v = check_messages_request(to_messages(body), betas=BETAS, minter=minter)
    if v is None:
        return None
    raw = orjson.dumps({"type": "error", "error": {"type": v.error_type, "message": v.message}}).decode()
    return v.status, {"error": {"message": "Provider returned error", "code": v.status,
                                "metadata": {"raw": raw, "provider_name": "Anthropic"}}}, f"anthropic-{v.rule}"


def plan(body: dict[str, Any], minter: Minter, default_tools: int = 0) -> tuple[dict[str, Any], str]:
    """(the assistant message, finish_reason): Anthropic's answer as OpenRouter returns it; ``default_tools``:
    ``scenarios.scenario_of``."""
    reply = plan_reply(to_messages(body), betas=BETAS, minter=minter, interleaved=True, default_tools=default_tools)
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    details: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for b in reply.message["content"]:
        if b["type"] == "thinking":
            details.append({"type": "reasoning.text", "text": b["thinking"], "signature": b["signature"],
                            "format": FORMAT, "index": len(details)})
        elif b["type"] == "redacted_thinking":
            details.append({"type": "reasoning.encrypted", "data": b["data"], "format": FORMAT,
                            "index": len(details)})
        elif b["type"] == "text":
            texts.append(b["text"])
        elif b["type"] == "tool_use":
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": orjson.dumps(b["input"]).decode()}})
    if texts:
        msg["content"] = "".join(texts)
    if details:
        msg["reasoning"] = "".join(d.get("text", "") for d in details)
        msg["reasoning_details"] = details
    if calls:
        msg["tool_calls"] = calls
    return msg, "tool_calls" if reply.message["stop_reason"] == "tool_use" else "stop"

"""OpenAI Chat Completions dialect: request bodies -> canonical, turns -> ``chat.completion``.

Requests (``decode_request``) become the canonical request with Anthropic-shaped
``params``, the one model every upstream encoder starts from (messages are the
business of ``openai_chat_messages``):

- ``thinking`` (vendor passthrough) > ``reasoning: {max_tokens|effort}`` (OpenRouter)
  > ``reasoning_effort`` -> the thinking config (a budget per effort; adaptive
  thinking with ``output_config.effort`` for adaptive-only models);
  ``max_completion_tokens``/``max_tokens`` (default: 8192 above the budget);
  ``stop`` -> ``stop_sequences``; ``tool_choice``/``parallel_tool_calls``;
  function tools (wrapped or flat) -> Anthropic tools (``function.strict`` -> ``strict``);
  ``user`` / ``safety_identifier`` -> ``metadata``; ``response_format`` json_schema ->
  ``output_config.format``; ``service_tier`` auto/default -> auto/standard_only.
- Every other parameter is judged by the one table (``gateway.dialects.routing``) for the
  ``route`` the model goes to: what that upstream cannot honour is a 400 naming the
  parameters, or with ``drop_unsupported`` (GATEWAY_DROP_UNSUPPORTED_PARAMS) dropped and
  listed in ``surface.dropped_params`` for the endpoint to count and log. The client's
  own top-level fields are what it sent (the chat body, ``chat_body``): an OpenAI-compatible
  upstream gets them as they are (``openai_compat``), Gemini the ones it maps (``gemini``).
- A Responses-API-shaped body (``input``, ``instructions``, flat tools), which
  Cursor posts to /v1/chat/completions, is first rewritten as a chat body (``chat_body``).
- Options that shape the answer but never go upstream travel in ``Request.surface``.

Every malformed input raises ``ClientError`` (400) naming its JSON path.
Answers: ``encode_completion`` here, ``chat.completion.chunk`` in ``openai_chat_stream``.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from gateway.dialects.canonical import JSON, Message, ProviderFields, Request, SurfaceOptions, Turn
from gateway.dialects.openai_chat.messages import assistant_message, decode_messages, system_of
from gateway.dialects.openai_compat import Seal
from gateway.dialects.routing import (
    ANTHROPIC_SERVICE_TIERS,
    ParamRoute,
    caps_for,
    maps,
    refusal,
    unsupported,
)
from gateway.errors import ClientError, bad_request

DEFAULT_MAX_TOKENS = 8192
EFFORT_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 24576}
_ADAPTIVE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "tool_use": "tool_calls",
                  "max_tokens": "length", "model_context_window_exceeded": "length", "refusal": "content_filter"}
# Anthropic request fields an OpenAI client may send as vendor extensions: forwarded as they are.
_VENDOR_PARAMS = ("top_k", "context_management", "container", "mcp_servers")
_SERVER_TOOL = re.compile(r"_\d{8}$")  # Anthropic server tools: web_search_20250305, bash_20250124 ...
_RESPONSES_KEPT = ("model", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "temperature",
                   "top_p", "user", "reasoning", "thinking", "max_tokens", "max_completion_tokens", "stop",
                   "output_config", *_VENDOR_PARAMS)


# ---------------------------------------------------------------- requests

def decode_request(body: Any, *, provider_fields: bool = False, replayed: list[Message] | None = None,
                   route: ParamRoute | None = None, drop_unsupported: bool = False, adaptive_only: bool | None = None
                   ) -> Request:
    """``replayed``: the messages already decoded (``openai_chat_messages.continue_messages``, for the
    replay memo); the system value is then taken from the body's system messages alone. ``route``: the
    kind of upstream the model goes to (None: no parameter is judged, as for a pure translation);
    ``adaptive_only``: whether the routed model takes adaptive thinking only (None: the built-in table's answer)."""
    body = chat_body(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model: Field required" if model is None else "model: Input should be a non-empty string")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad_request("messages: Field required" if raw is None else
                          "messages: Input should be a non-empty list of messages")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad_request("stream: Input should be a valid boolean")
    dropped = unsupported(body, route) if route is not None else []
    if dropped and not drop_unsupported:
        assert route is not None
        raise ClientError(400, refusal(dropped, route, model), "invalid_request_error", "unsupported_parameter")
    if body.get("n") not in (None, 1) and not dropped:
        raise bad_request("n: only n=1 is supported")
    if replayed is None:
        system, messages = decode_messages(raw, provider_fields=provider_fields)
    else:
        system, messages = system_of(raw), replayed
    thinking, effort = reasoning_of(body, model, adaptive_only)
    params: dict[str, JSON] = {}
    if system is not None:
        params["system"] = system
    params["max_tokens"] = max_tokens_of(body, thinking)
    params.update(tool_and_sampling_params(body, body.get("tools")))
    stops = _stop(body.get("stop"))
    if stops:
        params["stop_sequences"] = stops
    user = next((u for key in ("user", "safety_identifier") if isinstance(u := body.get(key), str) and u), None)
    if user is not None:
        params["metadata"] = {"user_id": user}
    output_config = body.get("output_config")
    fmt = _output_format(body.get("response_format")) if route is None or maps("response_format", route) else None
    if effort is not None or isinstance(output_config, dict) or fmt is not None:
        params["output_config"] = {**(output_config if isinstance(output_config, dict) else {}),
                                   **({"effort": effort} if effort else {}), **({"format": fmt} if fmt else {})}
    tier = body.get("service_tier")
    if (route is None or maps("service_tier", route)) and isinstance(tier, str) and tier in ANTHROPIC_SERVICE_TIERS:
        params["service_tier"] = ANTHROPIC_SERVICE_TIERS[tier]
    for key in _VENDOR_PARAMS:
        if key in body:
            params[key] = body[key]
    return Request(model, messages, thinking, stream, params, surface=_surface(body, dropped))


def chat_body(body: Any) -> dict[str, JSON]:
    """A chat completions body: ``body``, or a Responses-API-shaped one (``input``, ``instructions``, flat tools)
    rewritten as one; a 400 for what is not a JSON object."""
    if not isinstance(body, dict):
        raise bad_request("Request body must be a JSON object")
    return responses_to_chat(body) if "messages" not in body and "input" in body else body


def tool_and_sampling_params(body: dict[str, JSON], tools_raw: JSON) -> dict[str, JSON]:
    """``tools_raw`` (wrapped or flat function tools) with the body's ``tool_choice`` / ``parallel_tool_calls``, and
    its ``temperature`` / ``top_p``, as Anthropic-shaped parameters (shared with the Responses decoder)."""
    params: dict[str, JSON] = {}
    tools = _tools(tools_raw)
    if tools:
        params["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice is not None:
            params["tool_choice"] = choice
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None:
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise bad_request(f"{key}: Input should be a valid number")
            params[key] = value
    return params


def _surface(body: dict[str, JSON], dropped: list[str]) -> SurfaceOptions:
    options, reasoning = body.get("stream_options"), body.get("reasoning")
    return SurfaceOptions(
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        exclude_reasoning=isinstance(reasoning, dict) and reasoning.get("exclude") is True,
        dropped_params=tuple(dropped))


def _output_format(raw: JSON) -> dict[str, JSON] | None:
    """``response_format`` json_schema -> Anthropic's ``output_config.format`` (structured outputs)."""
    if not isinstance(raw, dict) or raw.get("type") != "json_schema":
        return None
    spec = raw.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise bad_request("response_format.json_schema.schema: Field required")
    return {"type": "json_schema", "schema": schema}


def reasoning_of(body: dict[str, JSON], model: str, adaptive_only: bool | None = None
                 ) -> tuple[dict[str, JSON] | None, str | None]:
    """(thinking config, adaptive effort) from the vendor, OpenRouter and OpenAI parameters."""
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict):
            raise bad_request("thinking: Input should be a valid dictionary")
        return thinking, None
    adaptive = caps_for(model).adaptive_only if adaptive_only is None else adaptive_only
    effort = body.get("reasoning_effort")
    r = body.get("reasoning")
    if r is not None:
        if not isinstance(r, dict):
            raise bad_request("reasoning: Input should be a valid dictionary")
        if r.get("enabled") is False:
            return None, None
        budget = r.get("max_tokens")
        if budget is not None:
            if not _is_int(budget) or budget < 1:
                raise bad_request("reasoning.max_tokens: Input should be a positive integer")
            return ({"type": "adaptive"}, None) if adaptive else ({"type": "enabled", "budget_tokens": budget}, None)
        effort = r.get("effort") or effort or "medium"  # OpenRouter: a reasoning object enables it
    if effort is None or effort == "none":
        return None, None
    if not isinstance(effort, str) or effort not in EFFORT_BUDGETS:
        raise bad_request(f"reasoning_effort: Input should be one of 'none', {', '.join(map(repr, EFFORT_BUDGETS))}")
    if adaptive:
        return {"type": "adaptive"}, _ADAPTIVE_EFFORT[effort]
    return {"type": "enabled", "budget_tokens": EFFORT_BUDGETS[effort]}, None


def max_tokens_of(body: dict[str, JSON], thinking: dict[str, JSON] | None) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None:
            if not _is_int(value) or value < 1:
                raise bad_request(f"{key}: Input should be a positive integer")
            return int(value)
    if isinstance(thinking, dict) and thinking.get("type") == "enabled" and _is_int(thinking.get("budget_tokens")):
        return DEFAULT_MAX_TOKENS + int(thinking["budget_tokens"])
    if isinstance(thinking, dict) and thinking.get("type") == "adaptive":
        return 2 * DEFAULT_MAX_TOKENS
    return DEFAULT_MAX_TOKENS


def _stop(raw: JSON) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [raw] if raw else []
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return [s for s in raw if s]
    raise bad_request("stop: Input should be a string or a list of strings")


def _tools(raw: JSON) -> list[dict[str, JSON]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("tools: Input should be a valid list")
    out: list[dict[str, JSON]] = []
    for j, t in enumerate(raw):
        if not isinstance(t, dict):
            raise bad_request(f"tools.{j}: Input should be a valid dictionary")
        ttype = t.get("type")
        if ttype == "function" or (ttype is None and "function" in t):
            fn = t.get("function", t)  # Responses-style tools are flat: no ``function`` wrapper
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise bad_request(f"tools.{j}.function.name: Field required")
            tool: dict[str, JSON] = {"name": fn["name"]}
            if isinstance(fn.get("description"), str) and fn["description"]:
                tool["description"] = fn["description"]
            schema = fn.get("parameters")
            schema = schema if isinstance(schema, dict) else {"properties": {}}
            tool["input_schema"] = schema if "type" in schema else {"type": "object", **schema}
            if "cache_control" in t:
                tool["cache_control"] = t["cache_control"]
            if fn.get("strict") is True:
                tool["strict"] = True
            out.append(tool)
        elif isinstance(t.get("name"), str) and ("input_schema" in t or _SERVER_TOOL.search(str(ttype or ""))):
            out.append(t)  # already an Anthropic tool
        else:
            raise bad_request(f"tools.{j}.type: tool type {ttype!r} is not supported; use function tools")
    return out


def _tool_choice(raw: JSON, parallel: JSON) -> dict[str, JSON] | None:
    choice: dict[str, JSON] | None
    if raw is None:
        choice = None
    elif raw in ("auto", "none"):
        choice = {"type": raw}
    elif raw == "required":
        choice = {"type": "any"}
    elif isinstance(raw, dict) and raw.get("type") == "function":
        fn = raw.get("function", raw)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request("tool_choice.function.name: Field required")
        choice = {"type": "tool", "name": fn["name"]}
    elif isinstance(raw, dict) and raw.get("type") == "allowed_tools":
        mode = raw.get("mode", (raw.get("allowed_tools") or {}).get("mode") if isinstance(
            raw.get("allowed_tools"), dict) else None)
        choice = {"type": "any" if mode == "required" else "auto"}
    elif isinstance(raw, dict) and raw.get("type") in ("auto", "any", "tool", "none"):
        choice = dict(raw)  # already Anthropic-shaped
    else:
        raise bad_request("tool_choice: Input should be 'none', 'auto', 'required' or a function choice")
    if parallel is False and (choice is None or choice.get("type") != "none"):
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    return choice


def _is_int(x: JSON) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# ---------------------------------------------------------------- Responses-shaped bodies

def responses_to_chat(body: dict[str, JSON]) -> dict[str, JSON]:
    """A Responses-API body (``input`` items, ``instructions``) rewritten as a chat body."""
    if body.get("previous_response_id") is not None:
        raise bad_request("previous_response_id: not supported on /v1/chat/completions; send the whole history "
                          "in `input` (or use `messages`)")
    out = {k: body[k] for k in _RESPONSES_KEPT if k in body}
    if "max_output_tokens" in body and "max_tokens" not in out:
        out["max_completion_tokens"] = body["max_output_tokens"]
    messages: list[JSON] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise bad_request("instructions: Input should be a valid string")
        messages.append({"role": "system", "content": instructions})
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise bad_request("input: Input should be a string or a list of input items")
    reasoning: str | None = None  # a reasoning item belongs to the assistant output that follows it
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise bad_request(f"input.{k}: Input should be a valid dictionary")
        t = item.get("type")
        if t in (None, "message") and "role" in item:
            messages.append({"role": item["role"], "content": item.get("content")})
        elif t == "function_call":
            call = {"id": item.get("call_id") or item.get("id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif t == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")})
        elif t == "reasoning":
            parts = [text for key in ("content", "summary") for p in item.get(key) or ()
                     if isinstance(p, dict) and isinstance(text := p.get("text"), str)]
            reasoning = "\n\n".join(parts) or None
            continue
        else:
            raise bad_request(f"input.{k}.type: input item type {t!r} is not supported on /v1/chat/completions")
        last = messages[-1]
        if reasoning and isinstance(last, dict) and last.get("role") == "assistant":
            last["reasoning_content"], reasoning = reasoning, None
    out["messages"] = messages
    return out


# ---------------------------------------------------------------- answers

def completion_id(message_id: str) -> str:
    """The answer's ``chatcmpl-`` id: the upstream message's id (an OpenAI-compatible upstream's is one already)."""
    if message_id.startswith("chatcmpl-"):
        return message_id
    return "chatcmpl-" + (message_id or secrets.token_hex(12))


def finish_reason(stop_reason: JSON) -> str:
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def usage(u: JSON) -> dict[str, JSON]:
    """Anthropic usage -> OpenAI usage (prompt tokens include the cached ones, as OpenAI counts them)."""
    u = u if isinstance(u, dict) else {}

    def n(key: str) -> int:
        v = u.get(key)
        return v if _is_int(v) else 0

    cached = n("cache_read_input_tokens")
    prompt = n("input_tokens") + n("cache_creation_input_tokens") + cached
    completion = n("output_tokens")
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def encode_completion(turn: Turn, *, created: int, scid: str | None = None,
                      exclude_reasoning: bool = False, seal: Seal | None = None) -> dict[str, JSON]:
    """``seal``: seals the turn's message-level provider fields for the client (``openai_compat.Seals``; the turn, which
    is recorded, keeps them as the upstream gave them)."""
    p = turn.provider
    provider = ProviderFields(p.origin, seal(p.origin, p.fields)) if seal is not None and p is not None else p
    out: dict[str, JSON] = {
        "id": completion_id(turn.id), "object": "chat.completion", "created": created, "model": turn.model,
        "choices": [{"index": 0, "message": assistant_message(turn.content, exclude_reasoning=exclude_reasoning,
                                                              provider=provider),
                     "logprobs": None, "finish_reason": finish_reason(turn.stop_reason)}],
        "usage": usage(turn.usage),
    }
    if scid is not None:
        out["_gateway"] = {"conversation_id": scid}
    return out

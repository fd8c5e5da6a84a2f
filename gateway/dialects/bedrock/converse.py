"""Bedrock's Converse API for Claude: the Messages body the pipeline produced, rewritten as a Converse request, and a
Converse answer (JSON, or its event-stream events) read back as the Messages API's, so every rule that holds for
Claude holds here unchanged.

Blocks: ``text`` <-> ``{text}``; ``thinking`` <-> ``{reasoningContent: {reasoningText: {text, signature}}}``;
``redacted_thinking`` <-> ``{reasoningContent: {redactedContent}}`` (a blob: base64 on the JSON wire, the redacted
data's bytes); ``tool_use`` <-> ``{toolUse: {toolUseId, name, input}}``; ``tool_result`` -> ``{toolResult: {toolUseId,
content: [{text} | {json}], status}}``. ``system`` -> ``[{text}]``; ``max_tokens``, ``temperature``, ``top_p``,
``stop_sequences`` -> ``inferenceConfig``; ``tools`` / ``tool_choice`` -> ``toolConfig``; ``thinking``,
``output_config``, ``top_k`` and the betas (``anthropic_beta``) -> ``additionalModelRequestFields`` (AWS: "Claude's
thinking is requested through additionalModelRequestFields"). A block Converse has no form for is a 400 naming it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.dialects.anthropic.codec import betas
from gateway.dialects.bedrock.wire import model_path
from gateway.errors import ClientError

_INFERENCE = {"max_tokens": "maxTokens", "temperature": "temperature", "top_p": "topP",
              "stop_sequences": "stopSequences"}
_ADDITIONAL = ("thinking", "output_config", "top_k", "context_management")
_DROPPED = frozenset({"model", "stream", "metadata", "service_tier", "anthropic_version"})


def path(model: str, stream: bool) -> str:
    return model_path(model, "converse-stream" if stream else "converse")


def _unsupported(what: str) -> ClientError:
    return ClientError(400, f"{what} has no form in Bedrock's Converse API (route the model to bedrock@ instead)",
                       "invalid_request_error")


def _result_content(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    out: list[dict[str, Any]] = []
    for part in content or ():
        if isinstance(part, dict) and part.get("type") == "text":
            out.append({"text": part.get("text", "")})
        else:
            out.append({"json": part})
    return out


def _block(b: Any) -> dict[str, Any]:
    t = b.get("type") if isinstance(b, dict) else None
    if t == "text":
        return {"text": b["text"]}
    if t == "thinking":
        return {"reasoningContent": {"reasoningText": {"text": b.get("thinking", ""), "signature": b.get("signature",
                                                                                                          "")}}}
    if t == "redacted_thinking":
        return {"reasoningContent": {"redactedContent": base64.b64encode(str(b.get("data", "")).encode()).decode()}}
    if t == "tool_use":
        return {"toolUse": {"toolUseId": b["id"], "name": b["name"], "input": b.get("input", {})}}
    if t == "tool_result":
        result: dict[str, Any] = {"toolUseId": b["tool_use_id"], "content": _result_content(b.get("content"))}
        if b.get("is_error"):
            result["status"] = "error"
        return {"toolResult": result}
    raise _unsupported(f"a {t!r} content block")


def _content(content: Any) -> list[dict[str, Any]]:
    return [{"text": content}] if isinstance(content, str) else [_block(b) for b in content]


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    specs = []
    for tool in body.get("tools") or ():
        if "input_schema" not in tool:
            raise _unsupported(f"the server tool {tool.get('name')!r}")
        spec = {"name": tool["name"], "inputSchema": {"json": tool["input_schema"]}}
        if tool.get("description"):
            spec["description"] = tool["description"]
        specs.append({"toolSpec": spec})
    config: dict[str, Any] = {"tools": specs}
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("auto", "any"):
        config["toolChoice"] = {choice["type"]: {}}
    elif isinstance(choice, dict) and choice.get("type") == "tool":
        config["toolChoice"] = {"tool": {"name": choice.get("name")}}
    return config


def finish(body: bytes, client: Mapping[str, str]) -> bytes:
    """A Messages request body as a Converse request."""
    data = orjson.loads(body)
    out: dict[str, Any] = {"messages": [{"role": m["role"], "content": _content(m["content"])}
                                        for m in data.get("messages", ())]}
    system = data.get("system")
    if system:
        out["system"] = [{"text": system}] if isinstance(system, str) else [
            {"text": b.get("text", "")} for b in system if isinstance(b, dict) and b.get("type") == "text"]
    inference = {key: data[name] for name, key in _INFERENCE.items() if name in data}
    if inference:
        out["inferenceConfig"] = inference
    if data.get("tools"):
        out["toolConfig"] = _tools(data)
    additional = {k: data[k] for k in _ADDITIONAL if k in data}
    asked = list(dict.fromkeys([*(data.get("anthropic_beta") or ()), *betas(client)]))
    if asked:
        additional["anthropic_beta"] = asked
    if additional:
        out["additionalModelRequestFields"] = additional
    rest = set(data) - _DROPPED - set(_INFERENCE) - set(_ADDITIONAL) - {"messages", "system", "tools", "tool_choice",
                                                                          "anthropic_beta"}
    if rest:
        raise _unsupported(f"the parameter {sorted(rest)[0]!r}")
    return orjson.dumps(out)


def count_body(body: bytes, client: Mapping[str, str]) -> bytes:
    """A count_tokens body as Bedrock's CountTokens takes a Converse input (``inferenceConfig`` is not one of its
    fields)."""
    data = orjson.loads(body)
    if isinstance(data, dict):
        data.setdefault("max_tokens", 1)
    converse = orjson.loads(finish(orjson.dumps(data), client))
    converse.pop("inferenceConfig", None)
    return orjson.dumps({"input": {"converse": converse}})


# ------------------------------------------------------------------ answers


def _redacted(blob: Any) -> str:
    try:
        return base64.b64decode(str(blob), validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return str(blob)


def anthropic_block(b: dict[str, Any]) -> dict[str, Any]:
    if "text" in b:
        return {"type": "text", "text": b["text"]}
    if "reasoningContent" in b:
        rc = b["reasoningContent"]
        if "redactedContent" in rc:
            return {"type": "redacted_thinking", "data": _redacted(rc["redactedContent"])}
        text = rc.get("reasoningText") or {}
        return {"type": "thinking", "thinking": text.get("text", ""), "signature": text.get("signature", "")}
    if "toolUse" in b:
        use = b["toolUse"]
        return {"type": "tool_use", "id": use["toolUseId"], "name": use["name"], "input": use.get("input", {})}
    return {"type": "text", "text": ""}


def _usage(u: Any) -> dict[str, Any]:
    u = u if isinstance(u, dict) else {}
    out = {"input_tokens": u.get("inputTokens", 0), "output_tokens": u.get("outputTokens", 0)}
    if "cacheReadInputTokens" in u:
        out["cache_read_input_tokens"] = u["cacheReadInputTokens"]
    if "cacheWriteInputTokens" in u:
        out["cache_creation_input_tokens"] = u["cacheWriteInputTokens"]
    return out


def as_message(body: Any, model: str = "") -> dict[str, Any]:
    """A Converse answer as the Messages API's message."""
    message = ((body or {}).get("output") or {}).get("message") or {}
    return {"id": "msg_bdrk_converse", "type": "message", "role": "assistant", "model": model,
            "content": [anthropic_block(b) for b in message.get("content") or () if isinstance(b, dict)],
            "stop_reason": body.get("stopReason"), "stop_sequence": None, "usage": _usage(body.get("usage"))}


class ConverseTranslator:
    """A Converse stream's events (``{"<event type>": payload}``, from the event-stream framing) as the Messages
    API's events. Text and reasoning blocks have no start event in Converse: their first delta starts them; the
    stop reason (``messageStop``) comes before the usage (``metadata``): both close the message together."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.open: dict[int, str] = {}  # index -> the block type started
        self.stop: str | None = None
        self.closed = False

    def feed(self, data: str) -> list[dict[str, Any]]:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(event, dict):
            return []
        if event.get("type") == "error":  # (an exception in the stream, as the framing reports it)
            return [event]
        for name, payload in event.items():
            if isinstance(payload, dict):
                return getattr(self, "_" + name, self._other)(payload)
        return []

    def _other(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def _messageStart(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "message_start", "message": {
            "id": "msg_bdrk_converse", "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}]

    def _start(self, index: int, block: dict[str, Any]) -> dict[str, Any]:
        self.open[index] = block["type"]
        return {"type": "content_block_start", "index": index, "content_block": block}

    def _contentBlockStart(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        use = (payload.get("start") or {}).get("toolUse")
        if not isinstance(use, dict):
            return []
        index = int(payload.get("contentBlockIndex", 0))
        return [self._start(index, {"type": "tool_use", "id": use.get("toolUseId"), "name": use.get("name"),
                                    "input": {}})]

    def _contentBlockDelta(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        index, delta = int(payload.get("contentBlockIndex", 0)), payload.get("delta") or {}
        out: list[dict[str, Any]] = []
        if "text" in delta:
            if index not in self.open:
                out.append(self._start(index, {"type": "text", "text": ""}))
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": delta["text"]}})
        elif "toolUse" in delta:
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": delta["toolUse"].get("input", "")}})
        elif "reasoningContent" in delta:
            rc = delta["reasoningContent"]
            if "redactedContent" in rc:
                out.append(self._start(index, {"type": "redacted_thinking", "data": _redacted(rc["redactedContent"])}))
                return out
            if index not in self.open:
                out.append(self._start(index, {"type": "thinking", "thinking": "", "signature": ""}))
            if "text" in rc:
                out.append({"type": "content_block_delta", "index": index,
                            "delta": {"type": "thinking_delta", "thinking": rc["text"]}})
            if "signature" in rc:
                out.append({"type": "content_block_delta", "index": index,
                            "delta": {"type": "signature_delta", "signature": rc["signature"]}})
        return out

    def _contentBlockStop(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "content_block_stop", "index": int(payload.get("contentBlockIndex", 0))}]

    def _messageStop(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        self.stop = payload.get("stopReason")
        return []

    def _metadata(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return self._close(_usage(payload.get("usage")))

    def _close(self, usage: dict[str, Any]) -> list[dict[str, Any]]:
        if self.closed or self.stop is None:
            return []
        self.closed = True
        return [{"type": "message_delta", "delta": {"stop_reason": self.stop, "stop_sequence": None}, "usage": usage},
                {"type": "message_stop"}]

    def end(self) -> list[dict[str, Any]]:
        return self._close({"output_tokens": 0})

"""Augment chat-stream responses: canonical (Anthropic-shaped) stream events -> NDJSON chunks.

One JSON object per line, in Augment-BYOK's chunk envelope (``makeBackChatChunk``)::

    {"text": "<delta>", "unknown_blob_names": [], "checkpoint_not_found": false,
     "workspace_file_chunks": [], "nodes": [...], "stop_reason": 3}

``nodes`` is present only when the chunk has nodes, ``stop_reason`` only on the last chunk. Node
ids start at 1 and increase by one per node within a response. What is emitted, and when:

==========================  ===================================================================
upstream event              chunk
==========================  ===================================================================
``text_delta``              ``text`` = the delta, plus a RAW_RESPONSE (0) node with the same text
reasoning block stop        THINKING (8) node ``{"thinking": {"summary": <full text>,
                            "signature": <sig>}}`` (one node per block, once it is complete and
                            signed; never in ``text``). Reasoning blocks are Anthropic ``thinking``
                            and another family's ``thought`` (Gemini thought summaries,
                            OpenAI-compatible reasoning text); ``signature`` is Anthropic's, or the
                            Gemini ``thoughtSignature`` a thought part carries, and is left out
                            when the carrier has none. Blocks with no text (``display: omitted``,
                            ``redacted_thinking``) get no node: there is nothing to show, and
                            thinkgate's records restore them on the next request.
tool_use block start        TOOL_USE_START (7) node, ``input_json: ""`` (the name is known), unless
                            the client sent ``feature_detection_flags.support_tool_use_start:
                            false``
tool_use block stop         TOOL_USE (5) node with the complete ``input_json`` string
``message_stop``            a TOKEN_USAGE (10) chunk, then the last chunk: MAIN_TEXT_FINISHED (2)
                            with the full text (when there was text) and ``stop_reason``
error                       the error line (below); nothing follows it
==========================  ===================================================================

Error line (an upstream ``error`` event, or the relay's own: timeout, connection lost, stream cut
before ``message_stop``): the envelope with a human-readable ``text`` the extension displays,
``stop_reason`` 1 (END_TURN, as Augment-BYOK ends its error chunk) and a machine-readable
``error``::

    {"text": "[thinkgate] upstream error (overloaded_error): Overloaded", ..., "stop_reason": 1,
     "error": {"type": "overloaded_error", "message": "Overloaded"}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.dialects.augment.codec import (
    MAIN_TEXT_FINISHED,
    RAW_RESPONSE,
    STOP_END_TURN,
    STOP_TOOL_USE_REQUESTED,
    THINKING,
    TOKEN_USAGE,
    TOOL_USE,
    TOOL_USE_START,
    ToolMeta,
    stop_reason_of,
)
from gateway.dialects.canonical import PROVIDER, BlockProvider
from gateway.sse import SSEEvent

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
MEDIA_TYPE = "application/x-ndjson"
# Canonical blocks that carry reasoning text: Anthropic ``thinking`` and another family's ``thought``
# (Gemini ``thought: true`` parts, OpenAI-compatible reasoning text), both with ``thinking_delta``s.
REASONING_BLOCKS = frozenset({"thinking", "thought"})


def chunk(text: str = "", nodes: list[dict[str, Any]] | None = None, stop_reason: int | None = None,
          **extra: Any) -> bytes:
    out: dict[str, Any] = {"text": text, "unknown_blob_names": [], "checkpoint_not_found": False,
                           "workspace_file_chunks": []}
    if nodes:
        out["nodes"] = nodes
    if stop_reason is not None:
        out["stop_reason"] = stop_reason
    out.update(extra)
    return orjson.dumps(out) + b"\n"


def error_line(error_type: str, message: str, *, after_text: bool = False) -> bytes:
    text = ("\n\n" if after_text else "") + f"[thinkgate] upstream error ({error_type}): {message}"
    return chunk(text, stop_reason=STOP_END_TURN, error={"type": error_type, "message": message})


def _signature(block: dict[str, Any]) -> str:
    """A reasoning block's signature: Anthropic's ``signature`` (completed by ``signature_delta``), or
    the opaque per-part value a ``thought`` block's ``BlockProvider`` carries (a Gemini
    ``thoughtSignature``); "" when the carrier has none (OpenAI-compatible reasoning text)."""
    sig = block.get("signature")
    if isinstance(sig, str) and sig:
        return sig
    provider = block.get(PROVIDER)
    value = provider.sig.value if isinstance(provider, BlockProvider) and provider.sig is not None else None
    return value if isinstance(value, str) else ""


@dataclass(slots=True)
class _Open:
    """A content block between its start and stop."""

    type: str
    parts: list[str] = field(default_factory=list)
    signature: str = ""
    id: str = ""
    name: str = ""
    initial_input: Any = None


class StreamEncoder:
    """The relay's ``StreamEncoder`` for the Augment surface (pure: events in, bytes out)."""

    def __init__(self, tool_meta: dict[str, ToolMeta] | None = None, *, tool_use_start: bool = True) -> None:
        self._meta = tool_meta or {}
        self._tool_use_start = tool_use_start
        self._node_id = 0
        self._open: dict[int, _Open] = {}
        self._text: list[str] = []
        self._usage: dict[str, Any] = {}
        self._stop: int | None = None
        self._saw_tool_use = False
        self._done = False

    # -------------------------------------------------------------- StreamEncoder protocol

    def event(self, data: dict[str, Any], ev: SSEEvent | None) -> bytes:
        if self._done:
            return b""
        etype = data.get("type")
        if etype == "content_block_delta":
            return self._delta(data)
        if etype == "content_block_start":
            return self._start(data)
        if etype == "content_block_stop":
            return self._stop_block(data)
        if etype == "message_start":
            msg = data.get("message")
            self._merge_usage(msg.get("usage") if isinstance(msg, dict) else None)
        elif etype == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self._stop = stop_reason_of(delta["stop_reason"])
            self._merge_usage(data.get("usage"))
        elif etype == "message_stop":
            return self._finish()
        elif etype == "error":
            err = data.get("error")
            err = err if isinstance(err, dict) else {}
            return self.error(str(err.get("type") or "api_error"), str(err.get("message") or ""))
        return b""  # ping and event types this dialect has no node for

    def passthrough(self, ev: SSEEvent) -> bytes:
        return b""

    def error(self, error_type: str, message: str) -> bytes:
        if self._done:
            return b""
        self._done = True
        return error_line(error_type, message, after_text=bool(self._text))

    def end(self) -> bytes:
        return b""

    def ends(self, data: dict[str, Any]) -> bool:
        return data.get("type") in ("message_delta", "message_stop")  # the final node comes at message_stop

    # -------------------------------------------------------------- events

    def _node(self, ntype: int, content: str = "", **fields: Any) -> dict[str, Any]:
        self._node_id += 1
        return {"id": self._node_id, "type": ntype, "content": content, **fields}

    def _text_chunk(self, text: str) -> bytes:
        if not text:
            return b""
        self._text.append(text)
        return chunk(text, [self._node(RAW_RESPONSE, text)])

    def _start(self, data: dict[str, Any]) -> bytes:
        idx, block = data.get("index"), data.get("content_block")
        if not isinstance(idx, int) or not isinstance(block, dict):
            return b""
        btype = str(block.get("type") or "")
        ob = _Open(btype)
        self._open[idx] = ob
        if btype == "text":
            return self._text_chunk(block.get("text") or "")
        if btype in REASONING_BLOCKS:
            if isinstance(block.get("thinking"), str) and block["thinking"]:
                ob.parts.append(block["thinking"])
            ob.signature = _signature(block)
        elif btype == "tool_use":
            ob.id, ob.name = str(block.get("id") or ""), str(block.get("name") or "")
            ob.initial_input = block.get("input")
            self._saw_tool_use = True
            if self._tool_use_start:
                return chunk(nodes=[self._node(TOOL_USE_START, tool_use=self._tool_use(ob, ""))])
        return b""

    def _delta(self, data: dict[str, Any]) -> bytes:
        idx, delta = data.get("index"), data.get("delta")
        if not isinstance(delta, dict):
            return b""
        dtype = delta.get("type")
        if dtype == "text_delta":
            return self._text_chunk(delta.get("text") or "")
        ob = self._open.get(idx) if isinstance(idx, int) else None
        if ob is None:
            return b""
        if dtype == "thinking_delta":
            ob.parts.append(delta.get("thinking") or "")
        elif dtype == "signature_delta":
            ob.signature = delta.get("signature") or ""
        elif dtype == "input_json_delta":
            ob.parts.append(delta.get("partial_json") or "")
        return b""

    def _stop_block(self, data: dict[str, Any]) -> bytes:
        idx = data.get("index")
        ob = self._open.pop(idx, None) if isinstance(idx, int) else None
        if ob is None:
            return b""
        if ob.type in REASONING_BLOCKS:
            summary = "".join(ob.parts)
            if not summary:
                return b""
            thinking: dict[str, str] = {"summary": summary}
            if ob.signature:
                thinking["signature"] = ob.signature
            return chunk(nodes=[self._node(THINKING, thinking=thinking)])
        if ob.type == "tool_use":
            raw = "".join(ob.parts)
            if not raw.strip():
                raw = orjson.dumps(ob.initial_input).decode() if ob.initial_input else "{}"
            return chunk(nodes=[self._node(TOOL_USE, tool_use=self._tool_use(ob, raw))])
        return b""

    def _tool_use(self, ob: _Open, input_json: str) -> dict[str, str]:
        out = {"tool_use_id": ob.id, "tool_name": ob.name, "input_json": input_json}
        meta = self._meta.get(ob.name)
        if meta is not None:
            if meta.mcp_server_name:
                out["mcp_server_name"] = meta.mcp_server_name
            if meta.mcp_tool_name:
                out["mcp_tool_name"] = meta.mcp_tool_name
        return out

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            for k in USAGE_KEYS:
                v = usage.get(k)
                if isinstance(v, int | float) and not isinstance(v, bool):
                    self._usage[k] = v

    def _finish(self) -> bytes:
        self._done = True
        out = b""
        if self._usage:
            usage = {k: self._usage[k] for k in USAGE_KEYS if k in self._usage}
            out += chunk(nodes=[self._node(TOKEN_USAGE, token_usage=usage)])
        nodes = [self._node(MAIN_TEXT_FINISHED, "".join(self._text))] if self._text else []
        stop = self._stop if self._stop is not None else \
            STOP_TOOL_USE_REQUESTED if self._saw_tool_use else STOP_END_TURN
        return out + chunk(nodes=nodes, stop_reason=stop)

"""Pure accumulator: canonical (Anthropic-shaped) stream events -> the finished turn.

Stream events are the Anthropic Messages event dicts; other upstream dialects
translate their chunks into these before accumulation. Rules (as the official
SDKs apply them): thinking text appends, the signature replaces, text appends,
``input_json_delta`` fragments concatenate and are parsed at ``content_block_stop``,
``message_delta`` overwrites stop_reason and merges the cumulative usage; a ``compaction_delta`` sets the
compaction block's ``content`` (and ``encrypted_content``); a translated stream's ``provider_delta``
signs its block (``canonical.BlockProvider``). Unknown event and delta types are ignored here (the relay still
forwards them).

The finished turn has a translated stream's provider data in its typed fields (``lift``): a block's
``BlockProvider`` becomes its ``sig`` (a ``thought`` block a ``ThoughtBlock``), the message's ``ProviderFields``
``Turn.provider``. Only those typed values are lifted, never a ``_provider`` key that came as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    PROVIDER,
    Block,
    BlockProvider,
    OpaqueBlock,
    ProviderFields,
    ProviderSig,
    TextBlock,
    ThoughtBlock,
    ToolUseBlock,
    Turn,
)
from gateway.errors import ClientError


class UpstreamProtocolError(ValueError):
    """The upstream's events cannot be accumulated (e.g. tool input that is not JSON)."""


@dataclass(slots=True)
class Snapshot:
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    partial_json: dict[int, list[str]] = field(default_factory=dict)
    stopped: bool = False          # message_stop seen
    error: dict[str, Any] | None = None  # an in-stream error event

    @property
    def complete(self) -> bool:
        """A turn may be recorded only when the stream finished cleanly."""
        return self.stopped and self.error is None and self.message is not None


def accumulate(event: dict[str, Any], snap: Snapshot) -> Snapshot:
    """Fold one event into ``snap`` (updated in place and returned)."""
    etype = event.get("type")
    if etype == "message_start":
        msg = event.get("message")
        if isinstance(msg, dict):
            snap.message = dict(msg)
            for i, block in enumerate(msg.get("content") or []):
                if isinstance(block, dict):
                    snap.blocks[i] = dict(block)
    elif etype == "content_block_start":
        idx, block = event.get("index"), event.get("content_block")
        if isinstance(idx, int) and isinstance(block, dict):
            snap.blocks[idx] = dict(block)
    elif etype == "content_block_delta":
        _apply_delta(snap, event.get("index"), event.get("delta"))
    elif etype == "content_block_stop":
        idx = event.get("index")
        if isinstance(idx, int) and idx in snap.partial_json:
            text = "".join(snap.partial_json.pop(idx))
            block = snap.blocks.get(idx)
            if block is not None:
                try:
                    block["input"] = orjson.loads(text) if text.strip() else {}
                except orjson.JSONDecodeError:
                    raise UpstreamProtocolError(f"tool input of block {idx} is not valid JSON") from None
    elif etype == "message_delta" and snap.message is not None:
        delta = event.get("delta")
        if isinstance(delta, dict):
            for k, v in delta.items():
                snap.message[k] = v
        if isinstance(event.get("context_management"), dict):  # the applied context-management edits
            snap.message["context_management"] = event["context_management"]
        usage = event.get("usage")
        if isinstance(usage, dict):
            merged = dict(snap.message.get("usage") or {})
            merged.update({k: v for k, v in usage.items() if v is not None})
            snap.message["usage"] = merged
    elif etype == "message_stop":
        snap.stopped = True
    elif etype == "error":
        err = event.get("error")
        snap.error = err if isinstance(err, dict) else {"type": "api_error", "message": str(err)}
    return snap


def _apply_delta(snap: Snapshot, idx: Any, delta: Any) -> None:
    if not isinstance(idx, int) or not isinstance(delta, dict):
        return
    block = snap.blocks.get(idx)
    if block is None:
        return
    dtype = delta.get("type")
    if dtype == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif dtype == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif dtype == "signature_delta":
        block["signature"] = delta.get("signature", "")
    elif dtype == "input_json_delta":
        snap.partial_json.setdefault(idx, []).append(delta.get("partial_json", ""))
    elif dtype == "compaction_delta":  # the summary arrives whole; the SDKs replace the block's fields with it
        for key in ("content", "encrypted_content"):
            if key in delta:
                block[key] = delta[key]
    elif dtype == "provider_delta":  # a translated stream: provider data known only once its block is complete
        if isinstance(prov := block.get(PROVIDER), BlockProvider) and isinstance(sig := delta.get("sig"), ProviderSig):
            block[PROVIDER] = BlockProvider(prov.origin, sig)
    elif dtype == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


def message_dict(snap: Snapshot) -> dict[str, Any]:
    """The accumulated message in non-stream wire shape."""
    msg = dict(snap.message or {})
    msg["content"] = [snap.blocks[i] for i in sorted(snap.blocks)]
    return msg


def finished_turn(snap: Snapshot) -> Turn | None:
    """The canonical turn, or None if the stream did not finish cleanly."""
    if not snap.complete:
        return None
    try:
        turn = anthropic.decode_turn(message_dict(snap))
    except ClientError as e:  # a block the upstream sent malformed is the upstream's fault, not the client's
        raise UpstreamProtocolError(e.message) from None
    turn.content = [lift(b) for b in turn.content]
    if isinstance(fields := turn.extra.get(PROVIDER), ProviderFields):
        del turn.extra[PROVIDER]
        turn.provider = fields
    return turn


def lift(b: Block) -> Block:
    """A block of a translated stream with its provider data in its typed fields (see the module doc)."""
    if isinstance(b, OpaqueBlock) and b.type == "thought" and isinstance(p := b.raw.get(PROVIDER), BlockProvider):
        text = b.raw.get("thinking")
        extra = {k: v for k, v in b.raw.items() if k not in ("type", "thinking", PROVIDER)}
        return ThoughtBlock(text if isinstance(text, str) else "", p.origin, p.sig, extra)
    if isinstance(b, TextBlock | ToolUseBlock) and isinstance(p := b.extra.get(PROVIDER), BlockProvider):
        b.extra = {k: v for k, v in b.extra.items() if k != PROVIDER}
        b.sig = p.sig
    return b


def block_of(d: dict[str, Any]) -> Block:
    """An accumulated block (``Snapshot.blocks``) as a canonical block, its provider data lifted."""
    try:
        return lift(anthropic.decode_block(d, "content"))
    except ClientError as e:
        raise UpstreamProtocolError(e.message) from None

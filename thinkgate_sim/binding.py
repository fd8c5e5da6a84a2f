"""Thinking-block binding on the newer Claude models (docs/upstream-rules.md, "thinking-block binding", rule 15): pure.

On a bound model every thinking / redacted_thinking block the simulator mints commits (see
``signing.Binding``) to its prefix: the top-level ``system``, the set of ``tools`` and every
message before it (earlier thinking blocks excluded), and to a chain link naming the thinking block
before it. On replay:

* a block the requested model cannot read (another model's, ``READS``) is dropped before the model
  sees it: silently, or reported as ``model_binding_mismatch`` with the beta header;
* a block whose signature is not authentic is the plain rule-6 400 (tampered, never droppable);
* the first authentic block whose prefix or chain differs fails the prefix check: the 400
  ``... The block is bound to a different conversation. ...`` (the account default), or with
  ``thinking.block_binding.prefix_mismatch_behavior: "drop_block"`` (beta
  ``thinking-binding-controls-2026-08-01``) that block and every later thinking block are dropped
  and reported as ``prefix_binding_mismatch``; on an account that does not enforce the check
  (``enforced=False``) and a request that does not set the behaviour, the blocks are shown all the same
  (``thinking_mismatch_allowed`` with the beta).

What is not a difference (the digests normalise it away): ``cache_control`` markers, a string vs one
text block, whitespace around text blocks, tool order, ``defer_loading`` tools no message references.
The chain allows blocks to be dropped from the front of the history (the first remaining block has no
predecessor), not from the middle (its predecessor would be another block).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from thinkgate_sim.context import compaction_positions, cut_at_compaction
from thinkgate_sim.convo import THINKING_TYPES
from thinkgate_sim.deep_json import dumps
from thinkgate_sim.rules import BINDING_BETA
from thinkgate_sim.signing import BINDING_DIGEST, Binding, Minter, MintInfo, model_family
from thinkgate_sim.system_messages import added_tools

# Where the reference names them (1.8, 1.9; the preserved-thinking pages list these model ids).
DEFAULT_BOUND_MODELS: tuple[str, ...] = (
    "claude-fable-5-2", "claude-mythos-5-2", "claude-fable-5-1", "claude-mythos-5-1",
    "claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")
# Which other producers' blocks a bound model reads (1.9: "Opus 5.5 reads blocks of ... Sonnet/Haiku
# 5.5 [on the Claude API and Vertex], not Fable or Mythos"; 1.8: "Fable 5.1 reads blocks from Opus 5
# and, on the Claude API, from Opus 5.5"). Every model reads its own family's blocks.
READS: dict[str, frozenset[str]] = {
    "claude-opus-5-5": frozenset({"claude-sonnet-5-5", "claude-haiku-5-5"}),
    "claude-fable-5-1": frozenset({"claude-opus-5", "claude-opus-5-5"}),
}

# Bound models that read the blocks of earlier (unbound) Opus/Sonnet/Haiku models (1.9: Opus 5.5). Such a
# block carries no prefix record, so it fails the prefix check (the SDK: "or it carries no record of one on
# a model that requires it"); on the other bound models it is unreadable and dropped (INFERRED).
READS_EARLIER = frozenset({"claude-opus-5-5"})
# Older families whose (unbound) blocks a bound model may be sent after a model switch: verified under
# these so that a genuine one is told from a forged one.
OTHER_MODELS: tuple[str, ...] = (
    "claude-opus-4-7", "claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-5", "claude-sonnet-4-5",
    "claude-haiku-4-5", "claude-opus-4-1", "claude-opus-4", "claude-sonnet-4", "claude-3-7-sonnet")

RULE_BINDING = 15
RULE_SIGNATURE = 6
MSG_TAMPERED = "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
MSG_BOUND = ("messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a different "
             "conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "
             "\"drop_block\".")
MSG_NEEDS_BETA = (" That setting requires the `thinking-binding-controls-2026-08-01` value in the `anthropic-beta` "
                  "header.")
MSG_SYSTEM_CHANGED = " The `system` prompt differs from the one this block was created with."

_NO_CHAIN = bytes(BINDING_DIGEST)


def is_bound(model: str, bound_models: tuple[str, ...]) -> bool:
    return model_family(model) in {model_family(m) for m in bound_models}


def can_read(reader: str, producer: str) -> bool:
    reader, producer = model_family(reader), model_family(producer)
    return reader == producer or producer in READS.get(reader, frozenset())


# ------------------------------------------------------------------ digests

def _digest(value: object) -> bytes:
    return hashlib.sha256(dumps(value, sort_keys=True)).digest()[:BINDING_DIGEST]


def block_id(block: dict[str, Any]) -> bytes:
    """The chain link naming a thinking block: a digest of its signature (or redacted data)."""
    token = block.get("signature") if block.get("type") == "thinking" else block.get("data")
    return hashlib.sha256(str(token).encode()).digest()[:BINDING_DIGEST]


def _norm_content(content: Any, nested: bool = False) -> Any:
    """String or block list -> the normalised block list (thinking blocks left out); a ``tool_result``'s
    own content is normalised too (one level: it holds text and images, not more results)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content.strip()}]
    if not isinstance(content, list):
        return content
    out = []
    for b in content:
        if not isinstance(b, dict):
            out.append(b)
            continue
        if b.get("type") in THINKING_TYPES:
            continue
        nb = {k: v for k, v in b.items() if k != "cache_control"}
        if nb.get("type") == "text" and isinstance(nb.get("text"), str):
            nb["text"] = nb["text"].strip()
        if nb.get("type") == "tool_result" and "content" in nb and not nested:
            nb["content"] = _norm_content(nb["content"], nested=True)
        out.append(nb)
    return out


def _norm_message(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    return {**{k: v for k, v in m.items() if k != "content"}, "content": _norm_content(m.get("content"))}


def _referenced_tools(messages: list[Any]) -> set[str]:
    names: set[str] = added_tools(messages)  # a deferred tool a mid-conversation tool_addition added
    for m in messages:
        for b in (m.get("content") if isinstance(m, dict) else None) or ():
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("name"), str):
                names.add(b["name"])
            elif isinstance(b, dict) and b.get("type") == "tool_reference" and isinstance(b.get("tool_name"), str):
                names.add(b["tool_name"])
    return names


def system_digest(system: Any) -> bytes:
    return _digest([] if system in (None, "") else _norm_content(system))


def tools_digest(tools: Any, prefix_messages: list[Any]) -> bytes:
    if not isinstance(tools, list):
        return _digest(tools)
    used = _referenced_tools(prefix_messages)
    kept = []
    for t in tools:
        if isinstance(t, dict):
            if t.get("defer_loading") is True and t.get("name") not in used:
                continue
            t = {k: v for k, v in t.items() if k != "cache_control"}
        kept.append(dumps(t, sort_keys=True))
    return _digest([k.decode("utf-8", "surrogatepass") for k in sorted(kept)])


def prefix_of(body: dict[str, Any], i: int, j: int) -> tuple[list[Any], Binding]:
    """The messages before block ``j`` of message ``i`` (that message cut at ``j``) and the
    prefix digests of that position (chain left empty)."""
    messages = body.get("messages") or []
    before = list(messages[:i])
    if i < len(messages):
        head = messages[i]
        content = head.get("content") if isinstance(head, dict) else None
        if isinstance(content, list) and j > 0:
            before.append({**head, "content": content[:j]})
    before = cut_at_compaction(before)  # after server-side compaction: from the latest compaction block (1.9)
    msgs = _digest([_norm_message(m) for m in before])
    return before, Binding(system_digest(body.get("system")), tools_digest(body.get("tools"), before), msgs,
                           _NO_CHAIN)


def reply_binding(body: dict[str, Any], content: list[dict[str, Any]], index: int,
                  chain: bytes | None) -> Binding:
    """The prefix record for block ``index`` of a reply to ``body`` (``content`` so far)."""
    messages = list(body.get("messages") or [])
    reply = {"role": "assistant", "content": content[:index]}
    _, b = prefix_of({**body, "messages": [*messages, reply]}, len(messages), index)
    return Binding(b.system, b.tools, b.messages, chain or _NO_CHAIN)


# ------------------------------------------------------------------ the check

@dataclass(frozen=True, slots=True)
class Rejection:
    rule: int
    message: str


@dataclass
class Outcome:
    """A bound request that passed: what was dropped, and the last block the model saw (the chain
    of the next block it mints)."""

    transformations: list[dict[str, str]] = field(default_factory=list)
    dropped: set[tuple[int, int]] = field(default_factory=set)
    last_kept: bytes | None = None


def mismatch_behavior(body: dict[str, Any]) -> str | None:
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
    value = binding.get("prefix_mismatch_behavior") if isinstance(binding, dict) else None
    return value if isinstance(value, str) else None


def _authentic(block: dict[str, Any], model: str, minter: Minter,
               others: tuple[str, ...]) -> tuple[MintInfo | None, bool]:
    """(mint info, readable by ``model``) of an authentic block, (None, False) for a forged one."""
    def verify(family: str) -> MintInfo | None:
        if block.get("type") == "thinking":
            return minter.verify_thinking(family, block["thinking"], block["signature"])
        return minter.verify_redacted(family, block["data"])

    own = verify(model)
    if own is not None:
        return own, True
    if block.get("type") == "thinking":
        other = minter.inspect_thinking(block["thinking"], block["signature"])
    else:
        other = minter.inspect_redacted(block["data"])
    if other is not None and other.producer is not None:
        return other, can_read(model, other.producer)
    for family in others:  # an unbound (older) model's block: genuine, but not readable here
        legacy = verify(family)
        if legacy is not None:
            return legacy, model_family(model) in READS_EARLIER
    return None, False


def check_binding(body: dict[str, Any], *, minter: Minter, betas: frozenset[str], enforced: bool = True,
                  others: tuple[str, ...] = OTHER_MODELS) -> Rejection | Outcome:
    """The signature phase for a bound model (replaces rules 6 and 7 there); see the module doc.

    ``enforced=False`` is an account the prefix check is not enforced on (created before 2026-08-31,
    1.9): a prefix mismatch is acted on only when the request sets ``prefix_mismatch_behavior`` (any
    value); otherwise the blocks are shown to the model and, with the beta, reported as
    ``thinking_mismatch_allowed``."""
    model: str = body["model"]
    beta = BINDING_BETA in betas
    behavior = mismatch_behavior(body)
    out = Outcome()
    blocks: list[tuple[int, int, dict[str, Any], MintInfo]] = []
    for i, m in enumerate(body["messages"]):
        if not isinstance(m, dict) or m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        for j, b in enumerate(m["content"]):
            if isinstance(b, dict) and b.get("type") in THINKING_TYPES:
                info, readable = _authentic(b, model, minter, others)
                if info is None:
                    return Rejection(RULE_SIGNATURE, MSG_TAMPERED.format(i=i, j=j))
                if not readable:
                    out.dropped.add((i, j))
                    if beta:
                        out.transformations.append(_entry("model_binding_mismatch", i, j))
                    continue
                blocks.append((i, j, b, info))
    failed = allowed = False
    previous: bytes | None = None
    compactions = compaction_positions(body["messages"])
    epoch = 0  # compaction blocks before the current thinking block: each starts a new chain (1.9)
    for i, j, b, info in blocks:
        now_epoch = sum(1 for c in compactions if c < (i, j))
        if now_epoch != epoch:
            epoch, previous, failed, allowed = now_epoch, None, False, False
        if not failed:
            _, now = prefix_of(body, i, j)
            rec = info.binding
            # no block before it: the ones it chained to were dropped from the front (allowed)
            chain_ok = rec is not None and (previous is None or rec.chain == previous)
            if rec is None or not chain_ok or (rec.system, rec.tools, rec.messages) != (
                    now.system, now.tools, now.messages):
                allowed = not enforced and behavior is None
                if behavior != "drop_block" and not allowed:
                    message = MSG_BOUND.format(i=i, j=j) + ("" if beta else MSG_NEEDS_BETA)
                    if rec is not None and rec.system != now.system:
                        message += MSG_SYSTEM_CHANGED
                    return Rejection(RULE_BINDING, message)
                failed = True
        if failed and allowed:
            if beta:
                out.transformations.append({"type": "thinking_mismatch_allowed", "reason": "prefix_binding_mismatch",
                                            "path": f"messages.{i}.content.{j}"})
            out.last_kept = block_id(b)
        elif failed:
            out.dropped.add((i, j))
            out.transformations.append(_entry("prefix_binding_mismatch", i, j))
        else:
            out.last_kept = block_id(b)
        previous = block_id(b)
    if compactions and epoch != len(compactions):
        out.last_kept = None  # a compaction block after every thinking block: the next block starts a chain
    out.transformations.sort(key=lambda e: _position(e["path"]))
    return out


def _entry(reason: str, i: int, j: int) -> dict[str, str]:
    return {"type": "thinking_dropped", "reason": reason, "path": f"messages.{i}.content.{j}"}


def _position(path: str) -> tuple[int, int]:
    parts = path.split(".")
    return int(parts[1]), int(parts[3])

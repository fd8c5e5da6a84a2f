"""The rules that follow repair (pure): what the upstream's own context edits clear, and thinking recorded under
another model.

**Context edits** (``apply_context_edits``): Anthropic context management and server-side compaction, as repair must
honour them.

* ``clear_thinking_20251015`` (``context_management.edits``) clears the thinking of all but the last ``keep``
  assistant turns server-side (default 1; ``"all"`` keeps all). A client that sends such a request may omit
  that thinking itself; repair must not put it back (the upstream would clear it anyway: restoring it only
  costs bytes and, on models that bind thinking to a chain, is pointless). Only a front run of the cleared
  turns is left without it: never the opener of the trailing tool loop, whose thinking the API checks in the
  request as sent (rule 9), nor anything after it (a bound model's chain allows blocks to go from the front of
  the history only). Each such turn: ``thinking_cleared``.
* A ``compaction`` block the upstream returned is recorded with its turn and replayed byte-exact; a restored
  turn whose compaction block the client dropped or re-encoded counts ``compaction_restored``.

**Model switches** (``apply_model_switch``): thinking recorded under one model in a conversation that moved to
another. A recorded turn knows the model it was produced by (``RecordedTurn.model``). When the request goes to an
Anthropic upstream whose model cannot read that model's thinking blocks (``routing.reads_thinking``):

* a model that binds thinking to its model (``ModelCaps.drops_unreadable_thinking``: the API drops a block the
  model cannot read before the model sees it, without an error; docs/upstream-rules.md, "thinking-block binding") gets
  the blocks back unchanged, as the migration guide asks ("keep passing blocks back unchanged when switching models;
  do not strip them"), and each such message is counted as ``model_binding_mismatch``;
* any other model answers another model's block with a 400 (an invalid signature), so the blocks are not
  restored: the message goes without its thinking (``dropped``, detail ``model_switch``), and sanitize then
  keeps the thinking configuration consistent with that (the tool-loop rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.actions import Action, ActionKind
from gateway.dialects import registry
from gateway.dialects.canonical import COMPACTION, JSON, THINKING_TYPES, Message, OpaqueBlock
from gateway.dialects.routing import ModelCaps, reads_thinking
from gateway.pipeline.repair.core import RepairResult
from gateway.pipeline.repair.records import RecordedTurn
from gateway.pipeline.sanitize.core import trailing_loop_start

CLEAR_THINKING = "clear_thinking_20251015"


def kept_turns(params: dict[str, Any]) -> int | None:
    """How many recent assistant turns keep their thinking under the request's ``clear_thinking_20251015`` edit;
    None when there is no such edit or it keeps all."""
    cm = params.get("context_management")
    edits = cm.get("edits") if isinstance(cm, dict) else None
    for e in edits if isinstance(edits, list) else ():
        if isinstance(e, dict) and e.get("type") == CLEAR_THINKING:
            keep = e.get("keep", {"type": "thinking_turns", "value": 1})
            if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
                return None
            value = keep.get("value") if isinstance(keep, dict) else None
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1
    return None


def cleared(msgs: list[Message], keep: int) -> list[int]:
    """The assistant messages whose thinking may stay omitted: the front run of those the edit clears."""
    turns = [i for i, m in enumerate(msgs) if m.role == "assistant" and m.has_thinking()]
    out = turns[:max(0, len(turns) - keep)]
    opener = trailing_loop_start(msgs)
    return [i for i in out if opener is None or i < opener]


def apply_context_edits(params: dict[str, Any], msgs: list[Message], client: list[Message],
                        res: RepairResult) -> list[Action]:
    """After repair: leave out the thinking repair restored into turns clear_thinking clears where the client
    omitted it (messages replaced, never changed in place), and count restored compaction blocks. ``client``:
    the request's messages before repair."""
    actions: list[Action] = []
    restored = [a.message_index for a in res.actions if a.kind == ActionKind.RESTORED and a.message_index is not None]
    if not restored:
        return actions
    keep = kept_turns(params)
    if keep is not None and len(client) == len(msgs):
        for i in cleared(msgs, keep):
            if i in restored and not client[i].has_thinking():
                m = msgs[i]
                msgs[i] = Message(m.role, [b for b in m.peek_content() if b.type not in THINKING_TYPES],
                                  extra=dict(m.extra), provider=m.provider)
                res.changed = True
                actions.append(Action(ActionKind.THINKING_CLEARED, i))
    for i in restored:
        if i < len(client) and len(client) == len(msgs):
            recorded = _compactions(msgs[i])
            if recorded and recorded != _compactions(client[i]):
                actions.append(Action(ActionKind.COMPACTION_RESTORED, i))
    return actions


def _compactions(m: Message) -> list[JSON]:
    raw = m.raw_blocks
    if raw is not None:
        return [b for b in raw if type(b) is dict and b.get("type") == COMPACTION]
    return [b.raw for b in m.content if isinstance(b, OpaqueBlock) and b.type == COMPACTION]


def apply_model_switch(msgs: list[Message], matched: Mapping[int, RecordedTurn], model: str,
                       caps: ModelCaps) -> list[Action]:
    """Apply the rule to each matched assistant message of ``msgs`` (replaced, never changed in place)."""
    actions: list[Action] = []
    if not registry.of(caps).thinking_blocks:
        return actions  # Anthropic thinking going to another kind of upstream: sanitize's foreign-reasoning rule
    readable: dict[str, bool] = {}  # producer -> whether ``model`` reads its blocks (asked once per request)
    for i, turn in matched.items():
        producer = turn.model
        if not producer or producer == model or i >= len(msgs) or not msgs[i].has_thinking():
            continue
        if producer not in readable:
            readable[producer] = reads_thinking(model, producer)
        if readable[producer]:
            continue
        if caps.drops_unreadable_thinking:
            actions.append(Action(ActionKind.MODEL_BINDING_MISMATCH, i))
            continue
        m = msgs[i]
        msgs[i] = Message(m.role, [b for b in m.peek_content() if b.type not in THINKING_TYPES], extra=dict(m.extra),
                          provider=m.provider)
        actions.append(Action(ActionKind.DROPPED, i, "model_switch"))
    return actions

"""Model switches: thinking recorded under one model in a conversation that moved to another (pure).

A recorded turn knows the model it was produced by (``RecordedTurn.model``). When the request goes to an Anthropic
upstream whose model cannot read that model's thinking blocks (``routing.reads_thinking``):

* a model that binds thinking to its model (``ModelCaps.drops_unreadable_thinking``: the API drops a block the
  model cannot read before the model sees it, without an error; docs/upstream-rules.md, "thinking-block binding") gets
  the blocks back
  unchanged, as the migration guide asks ("keep passing blocks back unchanged when switching models; do not
  strip them"), and each such message is counted as ``model_binding_mismatch``;
* any other model answers another model's block with a 400 (an invalid signature), so the blocks are not
  restored: the message goes without its thinking (``dropped``, detail ``model_switch``), and sanitize then
  keeps the thinking configuration consistent with that (the tool-loop rules).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.actions import Action, ActionKind
from gateway.dialects import registry
from gateway.dialects.canonical import THINKING_TYPES, Message
from gateway.dialects.routing import ModelCaps, reads_thinking
from gateway.pipeline.repair.recorded import RecordedTurn


def apply(msgs: list[Message], matched: Mapping[int, RecordedTurn], model: str, caps: ModelCaps) -> list[Action]:
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

"""Typed decisions of the repair/sanitize pipeline (for metrics, logs and tests).

Every rule that changes a request returns an ``Action``; the set of kinds is a
closed enum so it can be a metrics label.
"""

from __future__ import annotations

import operator
from enum import StrEnum
from typing import NamedTuple


class ActionKind(StrEnum):
    KEPT_VERIFIED = "kept_verified"              # thinking block verified and kept as is
    RESTORED = "restored"                        # block/turn restored from a record
    TURN_REINSTATED = "turn_reinstated"          # a recorded turn the client dropped, put back before its results
    TURNS_SEPARATED = "turns_separated"          # recorded turns the client merged into one message, one each again
    TURN_JOINED = "turn_joined"                  # a recorded turn the client split into messages, one again
    SIGNATURE_RESTORED = "signature_restored"    # signature re-attached from the exact-text index
    DOWNGRADED_TEXT = "downgraded_text"          # unverifiable thinking sent as text
    DROPPED = "dropped"                          # unverifiable thinking removed
    THINKING_DISABLED = "thinking_disabled"      # thinking config turned off for consistency
    TOOL_LOOP_TEXTUALIZED = "tool_loop_textualized"  # model cannot disable thinking: loop -> text
    TOOL_RESULT_SYNTHESIZED = "tool_result_synthesized"
    TOOL_RESULT_TEXTUALIZED = "tool_result_textualized"
    TOOL_RESULTS_REORDERED = "tool_results_reordered"
    TOOL_ID_MAPPED = "tool_id_mapped"
    EMPTY_TEXT_REMOVED = "empty_text_removed"
    BLOCKS_REORDERED = "blocks_reordered"
    PARAMS_FIXED = "params_fixed"
    HISTORY_REBUILT = "history_rebuilt"
    SIGNATURE_BYPASS = "signature_bypass"        # Gemini: no record vouches for a required signature
    # thinking recorded under another model passed back unchanged to a model that cannot read it (the API drops it)
    MODEL_BINDING_MISMATCH = "model_binding_mismatch"
    COMPACTION_RESTORED = "compaction_restored"  # a recorded compaction block the client dropped or re-encoded
    THINKING_CLEARED = "thinking_cleared"        # a turn restored without the thinking clear_thinking clears
    # binding models (``gateway.pipeline.repair.prefix``, docs/upstream-rules.md, "thinking-block binding"): the
    # recorded system sent, the client's new
    # one as a
    # mid-conversation system message; tool changes as tool_addition / tool_removal; recorded insertions put back
    PREFIX_SYSTEM_KEPT = "prefix_system_kept"
    PREFIX_TOOLS_KEPT = "prefix_tools_kept"
    PREFIX_REINSERTED = "prefix_reinserted"
    BINDING_DROP_BLOCK = "binding_drop_block"    # the prefix changed: the request opted into ``drop_block``
    BINDING_STRIPPED = "binding_stripped"        # after a binding 400: the stale thinking blocks removed, retried


class Action(NamedTuple):
    """Immutable; a tuple because a long replay makes one per verified turn on every request."""

    kind: ActionKind
    message_index: int | None = None   # index in the *outgoing* messages list
    detail: str = ""                   # closed vocabulary: never model text, keys or ids


# kinds that record a decision and change nothing of the request (it may still go upstream byte for byte)
UNCHANGED = frozenset({ActionKind.KEPT_VERIFIED, ActionKind.MODEL_BINDING_MISMATCH})

# an action's kind, as a C-level getter: ``set(map(action_kind, actions))`` reads a long replay's actions fast
action_kind = operator.itemgetter(0)

"""The strict Anthropic validator: a pure function over the raw request JSON.

Rule numbers and message texts are those of the reference's "Rules a strict upstream simulator must enforce"
(Anthropic 1-13, each with the public source of its text; the simulator's additions: docs/upstream-rules.md), byte
for byte (including the
API's own "preceeding"). Basic-shape errors (missing ``model`` ...) are reported
pydantic-style with rule number ``SHAPE`` (0).

Order when several rules apply (the first one found is reported). The real API
runs schema validation before any semantic check and verifies signatures last,
so the phases are:

1. request schema: ``model``, ``max_tokens``, ``messages``, ``thinking`` (rule 1);
2. message schema, messages in order, blocks in order (rule 5 lives here, the real API's empty /
   whitespace-only text block errors, ``RULE_EMPTY_TEXT``, and ``content: []`` anywhere but a final assistant
   message, ``RULE_EMPTY_CONTENT``; a ``role: "system"`` message is held to the same content rules); then
   the top-level ``system`` (``system_prompt``, rule 109); then, for count_tokens, its fields
   (``count_tokens``, rule 111);
3. request parameters: rules 2, 3, 4;
4. tool ids: every ``tool_use`` id in the request is unique (``RULE_DUPLICATE_TOOL_ID``,
   reported at the second occurrence; its place before pairing is INFERRED); then tool
   pairing, messages in order: rule 12 on an assistant message, rule 13 on a user message
   (so a mismatched pair reports 12 on the earlier message);
5. thinking placement: rule 8 (messages in order), then 9, then 10, then 11;
6. signatures, messages in order: rule 6, and rule 7 in the latest assistant message.

With thinking off (absent or ``disabled``) thinking blocks before the final
position are stripped like the real API does (INFERRED in the reference), so rules
6, 7, 8 and 9 do not apply; rule 10 covers a final assistant message.

Rule 6 scope: ``strict_older_turns=True`` checks every assistant message;
``False`` checks the assistant messages of the current turn (the trailing tool
loop, see ``convo``) plus the latest assistant message. Rule 7 only looks at the
latest assistant message: per run of consecutive thinking blocks, no genuine block
-> rule 6; some genuine and some not (edited), or genuine blocks out of order,
from different responses, or fewer than were minted (dropped) -> rule 7.
A final assistant message (prefill) ending in ``tool_use`` is not checked by rule 12.

Bound models (``bound=True``, ``thinkgate_sim.binding``): phase 1 adds the ``block_binding`` input rule
(``RULE_BLOCK_BINDING_INPUT``) and then the adaptive-only rule (``RULE_ADAPTIVE_ONLY``); absent thinking
is adaptive; phase 6 keeps only rule 7 on a latest message of the model's own blocks, and the app runs
``binding.check_binding`` after this function (rule 6 for tampered blocks, rule 15, drops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from thinkgate_sim import count_tokens as count_tokens_rules
from thinkgate_sim import system_messages, system_prompt
from thinkgate_sim.convo import THINKING_TYPES, Msg, turn_start, view
from thinkgate_sim.signing import Minter, MintInfo

INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
SHAPE = 0
# Not in the reference's numbered list; texts from anthropics/claude-code#59812 and #23440.
RULE_EMPTY_TEXT = 100
# Not in the reference's numbered list either (101 is gemini_rules.RULE_RESPONSES); text from
# anthropics/claude-code#21317 and #20901, BerriAI/litellm#23510 (see docs/upstream-rules.md).
RULE_DUPLICATE_TOOL_ID = 102
# Bound (Claude 5.x) models only, see docs/upstream-rules.md: they take only adaptive thinking (text from
# Sylinko/Everywhere#410), and ``thinking.block_binding`` needs its beta (docs/upstream-rules.md, "thinking-block
# binding").
RULE_ADAPTIVE_ONLY = 103
# Two entries of ``tools`` with one name (docs/upstream-rules.md; 105-107 are taken by context management,
# compaction and mid-conversation system messages)
RULE_DUPLICATE_TOOL_NAME = 108
RULE_BLOCK_BINDING_INPUT = 104
# A message (any role) with ``content: []`` other than a final assistant message or a directive-only system message
# (docs/upstream-rules.md)
RULE_EMPTY_CONTENT = 110
BINDING_BETA = "thinking-binding-controls-2026-08-01"

_DICT = "Input should be a valid dictionary or object to extract fields from"
_STR = "Input should be a valid string"
_INT = "Input should be a valid integer"
_REQ = "Field required"
_TAG = "Unable to extract tag using discriminator 'type'"

_MSG_2 = ("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
          "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size")
_MSG_3 = "Thinking may not be enabled when tool_choice forces tool use."
_MSG_4 = ("`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at "
          "https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking"
          "#important-considerations-when-using-extended-thinking")
_MSG_4_ADAPTIVE = "temperature may only be set to 1 when thinking is enabled or in adaptive mode"
MSG_ADAPTIVE_ONLY = ("\"thinking.type.{type}\" is not supported for this model. Use \"thinking.type.adaptive\" and "
                     "\"output_config.effort\" to control thinking behavior.")
_EXTRA = "Extra inputs are not permitted"
_MSG_6 = "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
_MSG_7 = ("messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the latest assistant message "
          "cannot be modified. These blocks must remain as they were in the original response.")
_MSG_8 = ("messages.{i}.content.0: If an assistant message contains any thinking blocks, the first block "
          "must be thinking or redacted_thinking. Found {type}.")
_MSG_9 = ("messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{type}`. "
          "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
          "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
          "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult "
          "our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking")
_MSG_10 = ("messages.{i}.content.{j}: When thinking is disabled, an `assistant` message in the final position "
           "cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request.")
_MSG_11 = "messages.{i}: The final block in an assistant message cannot be `thinking`."
_MSG_12 = ("messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. "
           "Each `tool_use` block must have a corresponding `tool_result` block in the next message.")
MSG_DUPLICATE_TOOL_ID = "messages.{i}.content.{j}: `tool_use` ids must be unique"
MSG_DUPLICATE_TOOL_NAME = "tools: Tool names must be unique."
MSG_EMPTY_CONTENT = ("messages.{i}: all messages must have non-empty content except for the optional final "
                     "assistant message")
_MSG_13 = ("messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. "
           "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.")


@dataclass(frozen=True, slots=True)
class Violation:
    status: int
    rule: int
    message: str
    error_type: str = "invalid_request_error"


def _v(rule: int, message: str) -> Violation:
    return Violation(400, rule, message)


def thinking_mode(body: dict[str, Any], bound: bool = False) -> str | None:
    """``"enabled"`` or ``"adaptive"`` when the request thinks, else None. A bound model thinks
    adaptively when ``thinking`` is absent (the fix-bound-to-a-different-conversation page: "models
    with preserved thinking think adaptively by default")."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return str(thinking["type"])
    return "adaptive" if bound and thinking is None else None


def check_messages_request(body: Any, *, betas: frozenset[str], minter: Minter,
                           strict_older_turns: bool = True, bound: bool = False,
                           count_tokens: bool = False) -> Violation | None:
    """The first violation (see the module doc for the order), or None if the request is valid.

    ``bound``: the model binds its thinking blocks (``thinkgate_sim.binding``): it takes only adaptive
    thinking, and of phase 6 only rule 7 runs here (on a latest message whose blocks are all this
    model's own); ``binding.check_binding`` does the rest. ``count_tokens``: the body of
    ``/v1/messages/count_tokens`` (no ``max_tokens``, only its own fields: ``thinkgate_sim.count_tokens``)."""
    if not isinstance(body, dict):
        return _v(SHAPE, _DICT)
    bad = (_check_request_shape(body, count_tokens) or _check_block_binding(body, betas, bound)
           or _check_messages_shape(body["messages"]))
    if bad:
        return bad
    top = system_prompt.check(body)  # the top-level system (rule 109)
    if top:
        return _v(system_prompt.RULE_SYSTEM, top)
    extra = count_tokens_rules.check_fields(body) if count_tokens else None
    if extra:
        return _v(count_tokens_rules.RULE_COUNT_TOKENS_INPUT, extra)
    system_bad = system_messages.check(body, betas)  # mid-conversation system messages, tool changes (1.9)
    if system_bad:
        return _v(*system_bad)
    if bound and isinstance(body.get("thinking"), dict) and body["thinking"]["type"] != "adaptive":
        return _v(RULE_ADAPTIVE_ONLY, MSG_ADAPTIVE_ONLY.format(type=body["thinking"]["type"]))
    mode = thinking_mode(body, bound)
    msgs = view(body["messages"])
    return (_check_params(body, mode, betas)
            or _check_unique_tool_names(body)
            or _check_unique_tool_ids(msgs)
            or _check_tool_pairing(msgs)
            or _check_placement(msgs, mode)
            or (_check_signatures(msgs, body["model"], minter, strict_older_turns, bound) if mode else None))


def _check_unique_tool_names(body: dict[str, Any]) -> Violation | None:
    """Rule 108: every entry of ``tools`` has its own name (client and server tools alike)."""
    names = [t["name"] for t in body.get("tools") or () if isinstance(t, dict) and isinstance(t.get("name"), str)]
    return _v(RULE_DUPLICATE_TOOL_NAME, MSG_DUPLICATE_TOOL_NAME) if len(set(names)) < len(names) else None


def _check_block_binding(body: dict[str, Any], betas: frozenset[str], bound: bool) -> Violation | None:
    """``thinking.block_binding``: an extra input without the beta, beside ``disabled`` thinking, and
    (bound models) beside ``enabled`` thinking; its one field takes ``"error"`` or ``"drop_block"``."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or "block_binding" not in thinking:
        return None
    ttype = thinking["type"]
    path = f"thinking.{ttype}.block_binding"
    if BINDING_BETA not in betas or ttype == "disabled" or (bound and ttype == "enabled"):
        return _v(RULE_BLOCK_BINDING_INPUT, f"{path}: {_EXTRA}")
    binding = thinking["block_binding"]
    if binding is None:
        return None
    if not isinstance(binding, dict):
        return _v(RULE_BLOCK_BINDING_INPUT, f"{path}: {_DICT}")
    for key, value in binding.items():
        if key != "prefix_mismatch_behavior":
            return _v(RULE_BLOCK_BINDING_INPUT, f"{path}.{key}: {_EXTRA}")
        if value is not None and value not in ("error", "drop_block"):
            return _v(RULE_BLOCK_BINDING_INPUT, f"{path}.{key}: Input should be 'error' or 'drop_block'")
    return None


# ------------------------------------------------------------------ phase 1-2: shape

def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_request_shape(body: dict[str, Any], count_tokens: bool = False) -> Violation | None:
    if "model" not in body:
        return _v(SHAPE, f"model: {_REQ}")
    if not isinstance(body["model"], str):
        return _v(SHAPE, f"model: {_STR}")
    return (_check_max_tokens(body) if not count_tokens else None) or _check_messages_and_thinking(body)


def _check_max_tokens(body: dict[str, Any]) -> Violation | None:
    if "max_tokens" not in body:
        return _v(SHAPE, f"max_tokens: {_REQ}")
    if not _is_int(body["max_tokens"]):
        return _v(SHAPE, f"max_tokens: {_INT}")
    if body["max_tokens"] < 1:
        return _v(SHAPE, "max_tokens: Input should be greater than or equal to 1")
    return None


def _check_messages_and_thinking(body: dict[str, Any]) -> Violation | None:
    if "messages" not in body:
        return _v(SHAPE, f"messages: {_REQ}")
    if not isinstance(body["messages"], list):
        return _v(SHAPE, "messages: Input should be a valid list")
    if not body["messages"]:
        return _v(SHAPE, "messages: at least one message is required")
    thinking = body.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, dict):
        return _v(SHAPE, f"thinking: {_DICT}")
    ttype = thinking.get("type")
    if not isinstance(ttype, str):
        return _v(SHAPE, f"thinking: {_TAG}")
    if ttype not in ("enabled", "disabled", "adaptive"):
        return _v(SHAPE, f"thinking: Input tag '{ttype}' found using 'type' does not match any of the "
                         "expected tags: 'enabled', 'disabled', 'adaptive'")
    if ttype == "enabled":
        if "budget_tokens" not in thinking:
            return _v(SHAPE, f"thinking.enabled.budget_tokens: {_REQ}")
        if not _is_int(thinking["budget_tokens"]):
            return _v(SHAPE, f"thinking.enabled.budget_tokens: {_INT}")
        if thinking["budget_tokens"] < 1024:  # rule 1
            return _v(1, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    return None


def _check_messages_shape(messages: list[Any]) -> Violation | None:
    """Roles, content and block schemas, messages in order. A ``role: "system"`` message (a mid-conversation
    system message, ``system_messages``) is held to the same content rules; its block types are checked later."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return _v(SHAPE, f"messages.{i}: {_DICT}")
        if "role" not in m:
            return _v(SHAPE, f"messages.{i}.role: {_REQ}")
        if m["role"] not in ("user", "assistant", "system"):
            return _v(SHAPE, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if "content" not in m:
            return _v(SHAPE, f"messages.{i}.content: {_REQ}")
        content = m["content"]
        if isinstance(content, str):
            bad = _check_text(content)
            if bad:
                return bad
            continue
        if not isinstance(content, list):
            return _v(SHAPE, f"messages.{i}.content: Input should be a valid list")
        if not content and not (m["role"] == "assistant" and i == len(messages) - 1) \
                and not system_messages.directive_only(m):
            return _v(RULE_EMPTY_CONTENT, MSG_EMPTY_CONTENT.format(i=i))
        for j, block in enumerate(content):
            bad = _check_block_shape(block, f"messages.{i}.content.{j}")
            if bad:
                return bad
    return None


# required fields per known block type: (field, is-a-string)
_BLOCK_FIELDS: dict[str, tuple[tuple[str, bool], ...]] = {
    "text": (("text", True),),
    "thinking": (("thinking", True), ("signature", True)),
    "redacted_thinking": (("data", True),),
    "tool_use": (("id", True), ("name", True), ("input", False)),
    "tool_result": (("tool_use_id", True),),
}


def _check_block_shape(block: Any, path: str) -> Violation | None:
    if not isinstance(block, dict):
        return _v(SHAPE, f"{path}: {_DICT}")
    btype = block.get("type")
    if not isinstance(btype, str):
        return _v(SHAPE, f"{path}: {_TAG}")
    for name, is_str in _BLOCK_FIELDS.get(btype, ()):
        if name not in block:
            return _v(5 if (btype, name) == ("thinking", "signature") else SHAPE,
                      f"{path}.{btype}.{name}: {_REQ}")
        value = block[name]
        if is_str and not isinstance(value, str):
            return _v(SHAPE, f"{path}.{btype}.{name}: {_STR}")
        if not is_str and not isinstance(value, dict):
            return _v(SHAPE, f"{path}.{btype}.{name}: {_DICT}")
    if btype != "text":
        return None
    if block["text"] == "" and block.get("cache_control") is not None:
        return _v(RULE_EMPTY_TEXT, f"{path}.text: cache_control cannot be set for empty text blocks")
    return _check_text(block["text"])


def _check_text(text: str) -> Violation | None:
    if not text:
        return _v(RULE_EMPTY_TEXT, "messages: text content blocks must be non-empty")
    if not text.strip():
        return _v(RULE_EMPTY_TEXT, "messages: text content blocks must contain non-whitespace text")
    return None


# ------------------------------------------------------------------ phase 3: parameters

def _check_params(body: dict[str, Any], mode: str | None, betas: frozenset[str]) -> Violation | None:
    if mode == "enabled" and INTERLEAVED_BETA not in betas and "max_tokens" in body:  # (count_tokens has none)
        if body["max_tokens"] <= body["thinking"]["budget_tokens"]:
            return _v(2, _MSG_2)
    if mode:
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
            return _v(3, _MSG_3)
        temperature = body.get("temperature")
        if temperature is not None and temperature != 1:
            return _v(4, _MSG_4 if mode == "enabled" else _MSG_4_ADAPTIVE)
    return None


# ------------------------------------------------------------------ phase 4: tool ids and pairing

def _check_unique_tool_ids(msgs: list[Msg]) -> Violation | None:
    seen: set[str] = set()
    for m in msgs:
        for j, b in enumerate(m.blocks):
            if b.get("type") == "tool_use":
                if b["id"] in seen:
                    return _v(RULE_DUPLICATE_TOOL_ID, MSG_DUPLICATE_TOOL_ID.format(i=m.i, j=j))
                seen.add(b["id"])
    return None


def _check_tool_pairing(msgs: list[Msg]) -> Violation | None:
    for pos, m in enumerate(msgs):
        if m.role == "assistant":
            ids = m.tool_use_ids()
            if not ids or pos + 1 == len(msgs):  # a final (prefill) message is not checked
                continue
            nxt = msgs[pos + 1]
            answered = {tid for _, tid in nxt.tool_results()} if nxt.role == "user" else set()
            missing = [tid for tid in ids if tid not in answered]
            if missing:
                return _v(12, _MSG_12.format(i=m.i, ids=", ".join(missing)))
        else:
            results = m.tool_results()
            if not results:
                continue
            prev = msgs[pos - 1] if pos > 0 else None
            allowed = set(prev.tool_use_ids()) if prev is not None and prev.role == "assistant" else set()
            unexpected = [(j, tid) for j, tid in results if tid not in allowed]
            if unexpected:
                listed = ", ".join(tid for _, tid in unexpected)
                return _v(13, _MSG_13.format(i=m.i, j=unexpected[0][0], ids=listed))
    return None


# ------------------------------------------------------------------ phase 5: placement

def _lead(m: Msg) -> dict[str, Any]:
    """The block rules 8 and 9 read: the first one after any leading ``compaction`` block (the API answers a
    compacting request with the compaction block first, then the model's own blocks: INFERRED that the rules
    read past it, as the simulator's own answers must pass them)."""
    return next((b for b in m.blocks if b.get("type") != "compaction"), m.blocks[0] if m.blocks else {})


def _check_placement(msgs: list[Msg], mode: str | None) -> Violation | None:
    if mode:
        for m in msgs:  # rule 8
            if m.role == "assistant" and m.has_thinking() and _lead(m).get("type") not in THINKING_TYPES:
                return _v(8, _MSG_8.format(i=m.i, type=_lead(m).get("type")))
        users = [m for m in msgs if m.role == "user"]
        if users and users[-1].tool_results():  # rule 9: the request ends in a tool loop
            opener = next((m for m in msgs[turn_start(msgs):] if m.role == "assistant"), None)
            if opener is not None and opener.blocks and _lead(opener).get("type") not in THINKING_TYPES:
                return _v(9, _MSG_9.format(i=opener.i, type=_lead(opener).get("type")))
    last = msgs[-1] if msgs else None
    if last is None or last.role != "assistant":
        return None
    if not mode:  # rule 10
        for j, b in enumerate(last.blocks):
            if b.get("type") in THINKING_TYPES:
                return _v(10, _MSG_10.format(i=last.i, j=j))
    if last.blocks and last.blocks[-1].get("type") in THINKING_TYPES:  # rule 11
        return _v(11, _MSG_11.format(i=last.i))
    return None


# ------------------------------------------------------------------ phase 6: signatures

def _verify(block: dict[str, Any], model: str, minter: Minter) -> MintInfo | None:
    if block.get("type") == "thinking":
        return minter.verify_thinking(model, block["thinking"], block["signature"])
    return minter.verify_redacted(model, block["data"])


def _check_signatures(msgs: list[Msg], model: str, minter: Minter, strict: bool,
                      bound: bool = False) -> Violation | None:
    assistants = [pos for pos, m in enumerate(msgs) if m.role == "assistant"]
    if not assistants:
        return None
    latest = assistants[-1]
    if bound:  # rule 7 only, and only where every block is this model's own (else: binding decides)
        m = msgs[latest]
        own = all(_verify(b, model, minter) is not None for b in m.blocks if b.get("type") in THINKING_TYPES)
        return _check_latest(m, model, minter) if own else None
    start = turn_start(msgs)
    for pos in assistants:
        if not strict and pos < start and pos != latest:
            continue
        m = msgs[pos]
        bad = _check_latest(m, model, minter) if pos == latest else _check_older(m, model, minter)
        if bad:
            return bad
    return None


def _check_older(m: Msg, model: str, minter: Minter) -> Violation | None:
    for j, b in enumerate(m.blocks):
        if b.get("type") in THINKING_TYPES and _verify(b, model, minter) is None:
            return _v(6, _MSG_6.format(i=m.i, j=j))
    return None


def _runs(m: Msg) -> list[list[int]]:
    """Positions of consecutive thinking/redacted_thinking blocks, grouped into runs."""
    runs: list[list[int]] = []
    prev = -2
    for j, b in enumerate(m.blocks):
        if b.get("type") in THINKING_TYPES:
            if j == prev + 1:
                runs[-1].append(j)
            else:
                runs.append([j])
            prev = j
    return runs


def _check_latest(m: Msg, model: str, minter: Minter) -> Violation | None:
    """Rule 6 for a run with no genuine block, rule 7 for a run that was edited,
    reordered or shortened while some of its blocks are still genuine."""
    for run in _runs(m):
        infos = [_verify(m.blocks[j], model, minter) for j in run]
        if all(info is None for info in infos):
            return _v(6, _MSG_6.format(i=m.i, j=run[0]))
        for j, info in zip(run, infos, strict=True):
            if info is None:
                return _v(7, _MSG_7.format(i=m.i, j=j))
        first = infos[0]
        assert first is not None
        for t, (j, info) in enumerate(zip(run, infos, strict=True)):
            assert info is not None
            if (info.response_id != first.response_id or info.run_pos != t or info.run_len != first.run_len
                    or info.index != first.index + t):
                return _v(7, _MSG_7.format(i=m.i, j=j))
        if len(run) != first.run_len:  # a block of the original run was dropped
            return _v(7, _MSG_7.format(i=m.i, j=run[-1]))
    return None

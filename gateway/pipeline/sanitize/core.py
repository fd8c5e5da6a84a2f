"""The egress sanitizer: enforce the thinking invariants before anything goes upstream.

One stage, ``run`` (``sanitize``: without a prior), runs after repair on every request (also when the state
machine is off or the store is down). It mutates the canonical request in place
and returns every decision as a typed ``Action``. Invariants (seed section 4 and
the reference's Anthropic rules):

1. An unverifiable thinking block is never sent as ``thinking``: dropped (default)
   or turned into a text block. A message's thinking run is verified all or
   nothing, so a partial run never reaches the upstream (rule 7).
2. An assistant message that contains thinking starts with it (rule 8); a final
   assistant message does not end with thinking (rule 11); empty text blocks go.
3. Tool chains are whole (``toolchain.repair_tool_chain``; rules 12 and 13).
4. Thinking configuration and payload agree: thinking stays on only if the first
   assistant message of the trailing tool loop starts with verified thinking
   (rule 9); otherwise it is disabled and no thinking block remains anywhere
   (rule 10) — or, for models that cannot disable thinking, that loop is closed
   by turning its tool calls and results into text.
5. Parameters that thinking forbids are repaired when allowed (rules 1-4).
   Rules 2, 4 and 5 are Anthropic's: they apply when the target upstream is Anthropic.
6. Provider reasoning never crosses model families: a per-part signature, a thought
   block or message-level reasoning fields whose origin is not the target's
   (``routing.origin_of``) is removed (thought text follows the unverifiable policy),
   and so is Anthropic thinking going to another kind of upstream. Message-level
   fields a client sent without a record (origin ``CLIENT``) are kept only for an
   OpenAI-compatible target (there is no other way to replay them); per-part
   signatures without a record never are.
7. Gemini: the first ``functionCall`` of every step of the current turn carries a
   signature; where no record supplied one, the configured bypass value does
   (reference 2.4), never another model's signature. With the bypass off, such a step
   degrades as a tool loop does for a model that cannot disable thinking (Gemini 3
   cannot): its calls and their responses travel as text, so no signature is due. The same rule gives Gemini's
   OpenAI-compatibility layer (the ``generic`` flavor, a Gemini model) its per-call signatures.
8. OpenAI Responses: a reasoning item goes back only as recorded, with its encrypted content, right before the
   item it preceded (``responses_upstream.sendable``); one the client's changes parted from that item is dropped
   (``reasoning_unpaired``), never sent for the upstream to refuse ("... without its required following item").
9. OpenAI-compatible upstreams: each flavor's message-level reasoning fields, whole or degraded the way its
   upstream accepts, and the reasoning parameter consistent with what remains (``gateway.dialects.openai_compat``).

Which rules apply is the route's dialect entry's to say (``gateway.dialects.registry``): no kind is compared here.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from gateway.actions import Action, ActionKind, action_kind
from gateway.dialects import registry
from gateway.dialects.canonical import (
    CLIENT,
    COMPACTION,
    THINKING_TYPES,
    Block,
    Message,
    ProviderFields,
    ProviderSig,
    Request,
    TextBlock,
    ThinkingBlock,
    ThoughtBlock,
    ToolUseBlock,
    is_blank_text,
)
from gateway.dialects.entry import FieldsContext
from gateway.dialects.gemini.parts import BYPASS_SIGNATURE
from gateway.dialects.openai_compat import NO_SEALS, Seals
from gateway.dialects.responses.upstream import sendable
from gateway.dialects.routing import ModelCaps, origin_of
from gateway.dialects.toolchain import (
    ChainFold,
    chain_fold,
    current_turn_start,
    fold_intact,
    repair_tool_chain,
    textualize,
)

INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
MIN_BUDGET = 1024

Verified = Callable[[Block], bool]


@dataclass(frozen=True, slots=True)
class Policy:
    unverifiable: Literal["drop", "text"] = "drop"
    fix_params: bool = True
    gemini_bypass: str | None = BYPASS_SIGNATURE  # None: textualize unsigned steps instead
    # the tenant's seals (``openai_compat.Seals``): a client's opaque reasoning fields without a record are kept
    # only when they open; None: judged by their shape alone
    seals: Seals | None = None


# The trailing-loop rule's state after some messages: (the first assistant message after the last user
# message that opens a turn, or after the start when none did; whether a user message with tool_results
# came after that opener)
LoopFold = tuple[int | None, bool]
NO_LOOP: LoopFold = (None, False)
# what a request whose outcome the next one may continue from did: kept its verified thinking, fixed parameters
_CONTINUABLE = frozenset({ActionKind.KEPT_VERIFIED, ActionKind.PARAMS_FIXED})


@dataclass(frozen=True, slots=True)
class Sanitized:
    """What ``sanitize`` found of a request's messages, for the conversation's next request, which starts with
    the same messages (``replay_memo``). It is a seed only when they are the same objects (``run`` checks that;
    the caller vouches that they are unchanged, as the memo gave them back), repair left them as it did this
    time (every assistant message among them verbatim) and the rules read the same model, target and policy.
    The per-message rules then run over the new messages only; the tool-chain check and the trailing-loop rule
    continue from where they ended here. Continued once (``chain_fold``)."""

    count: int                       # the messages it covers, ``messages[:count]``
    assistants: int                  # of them assistant messages, each replayed verbatim
    key: tuple[ModelCaps, str, Policy]  # what the per-message rules read besides the messages
    actions: tuple[Action, ...]      # the per-message rules' actions (``kept_verified`` only)
    chain: ChainFold
    loop: LoopFold
    thinking: bool                   # thinking was on after sanitize (off: no thinking left in them)
    messages: list[Message]          # the messages it looked at, as objects (a restored turn's: the record's)


class SanitizeResult(NamedTuple):
    """``run``'s outcome."""

    actions: list[Action]
    sanitized: Sanitized | None  # what the next request may continue from (None: not this outcome)
    continued: int               # the messages it continued from the seed's look at them (0: it looked at all)


def sanitize(req: Request, verified: Verified, caps: ModelCaps, policy: Policy,
             betas: frozenset[str] = frozenset(), verbatim: Sequence[int] = ()) -> list[Action]:
    return run(req, verified, verbatim, caps, policy, betas, None)[0].actions


def strip_bound(req: Request, i: int, j: int, caps: ModelCaps, policy: Policy,
                betas: frozenset[str] = frozenset()) -> list[Action]:
    """After a binding 400 naming ``messages.{i}.content.{j}`` (docs/upstream-rules.md, "thinking-block binding", the
    recovery the guide recommends):
    that block and every later thinking block go (text and tool calls stay), then the request is made consistent
    again as any other (``sanitize``: e.g. a tool loop whose first message lost its thinking, on a model that cannot
    disable thinking, travels as text). Empty when (i, j) names no thinking block."""
    msgs = req.messages
    if not (0 <= i < len(msgs)) or msgs[i].role != "assistant" or not (0 <= j < len(msgs[i].content)) \
            or msgs[i].content[j].type not in THINKING_TYPES:
        return []
    actions: list[Action] = []
    for k in range(i, len(msgs)):
        m = msgs[k]
        if m.role != "assistant" or not m.has_thinking():
            continue
        keep = [b for n, b in enumerate(m.content) if b.type not in THINKING_TYPES or (k == i and n < j)]
        actions += [Action(ActionKind.BINDING_STRIPPED, k, b.type) for b in m.content
                    if b.type in THINKING_TYPES and b not in keep]
        m.content = keep
    return actions + sanitize(req, lambda b: True, caps, policy, betas)


def distrust(req: Request, caps: ModelCaps, policy: Policy, betas: frozenset[str] = frozenset()) -> list[Action]:
    """The last resort after an upstream's thinking 400 that no named block explains (``pipeline.distrust``): every
    piece of replayed reasoning is taken as unverifiable, whatever vouched for it (a record, a seal, the bypass), so
    that one retry cannot meet the same 400. Thinking blocks and thoughts go per ``GATEWAY_UNVERIFIABLE_THINKING``,
    per-part signatures go (an unsigned Gemini step travels as text), message-level reasoning fields are the
    client's again and none of their seals opens; then the request is made consistent as any other (thinking off,
    or the loop as text, where its first message lost its thinking)."""
    for m in req.messages:
        if m.role != "assistant":
            continue
        if m.provider is not None and m.provider.origin != CLIENT:
            m.provider = ProviderFields(CLIENT, m.provider.fields)
        if any(getattr(b, "sig", None) is not None for b in m.content):
            m.content = [replace(b, sig=None) if isinstance(b, TextBlock | ToolUseBlock | ThoughtBlock) else b
                         for b in m.content]
    strict = replace(policy, gemini_bypass=None, seals=NO_SEALS)
    return sanitize(req, lambda b: False, caps, strict, betas)


def strip_front(msgs: list[Message], upto: int, detail: str) -> list[Action] | None:
    """Thinking blocks bound to a prefix that is gone, at the front of the history (docs/upstream-rules.md,
    "thinking-block binding": blocks may be
    removed from the front, not from the middle): every thinking block of the assistant messages up to ``upto``
    removed (text and tool calls stay). None (nothing changed) when that would take the thinking of the trailing
    tool loop's first message (rule 9): the caller degrades another way."""
    first = trailing_loop_start(msgs)
    if first is not None and first <= upto:
        return None
    actions: list[Action] = []
    for k in range(upto + 1):
        m = msgs[k]
        if m.role == "assistant" and m.has_thinking():
            actions += [Action(ActionKind.BINDING_STRIPPED, k, detail) for b in m.content if b.type in THINKING_TYPES]
            m.content = [b for b in m.content if b.type not in THINKING_TYPES]
    return actions


def run(req: Request, verified: Verified, verbatim: Sequence[int], caps: ModelCaps, policy: Policy,
        betas: frozenset[str], prior: Sanitized | None) -> tuple[SanitizeResult, Sanitized | None]:
    """Sanitize ``req`` in place; ``verified`` and ``verbatim`` are repair's findings: the thinking blocks proven
    authentic, and the indexes (in order) of the assistant messages that are a recorded turn as relayed (all of
    their thinking is). Continues from the previous request's ``prior`` where it holds (``Sanitized``); returns
    the outcome and what the next request may continue from."""
    msgs = req.messages
    target = origin_of(caps, req.model)
    key = (caps, target, policy)
    seed = prior if prior is not None and _seeds(prior, msgs, key, verbatim) else None
    result = _sanitize(req, verified, verbatim, caps, target, policy, betas, seed)
    return result, result.sanitized


def _seeds(prior: Sanitized, msgs: list[Message], key: tuple[ModelCaps, str, Policy], verbatim: Sequence[int]) -> bool:
    """Whether ``prior`` holds for ``msgs``: made with what this request's rules read, of the very messages that
    start ``msgs`` (a restored turn's in its place again), and repair found each assistant message among them a
    recorded turn as relayed again, as it did then."""
    n = prior.count
    return prior.key == key and len(msgs) >= n and len(prior.messages) >= n and \
        all(map(operator.is_, msgs[:n], prior.messages[:n])) and bisect.bisect_left(verbatim, n) == prior.assistants


def _sanitize(req: Request, verified: Verified, verbatim_at: Sequence[int], caps: ModelCaps, target: str,
              policy: Policy, betas: frozenset[str], seed: Sanitized | None) -> SanitizeResult:
    actions: list[Action] = []
    rules = registry.of(caps)
    msgs = req.messages
    start = seed.count if seed is not None else 0
    count = len(msgs)
    if seed is not None:
        actions += seed.actions
    assistants, verbatim = _per_message(msgs, start, seed, verbatim_at, verified, caps, target, policy, actions)
    per_message = len(actions)
    _drop_empty_assistants(msgs, start)
    chain = chain_fold(msgs, start, seed.chain if seed is not None else None)
    # the trailing-loop rule continues from the seed while the messages are as they were (a chain repair may
    # move blocks anywhere)
    loop_from = (start, seed.loop) if seed is not None else (0, NO_LOOP)
    if not fold_intact(chain):
        actions += repair_tool_chain(msgs)
        loop_from = (0, NO_LOOP)
    if rules.signs_calls(caps):
        _gemini_signatures(msgs, target, policy.gemini_bypass, actions)
    rules.sanitize_fields(req, FieldsContext(caps, target, policy.unverifiable, trailing_loop_start, policy.seals),
                          actions)
    if not rules.thinking_blocks:
        _no_trailing_thinking(msgs, actions)
        return SanitizeResult(actions, None, start)
    loop = _thinking_rules(req, caps, policy, betas, loop_from, start if seed is not None and not seed.thinking else 0,
                           actions)
    fresh = actions[len(seed.actions) if seed is not None else 0:]  # the seed's are all ``kept_verified``
    if not fold_intact(chain) or assistants != verbatim or len(msgs) != count or \
            not set(map(action_kind, fresh)) <= _CONTINUABLE:
        return SanitizeResult(actions, None, start)
    if loop is None:
        loop = loop_fold(msgs, *loop_from)
    assert chain is not None
    return SanitizeResult(actions, Sanitized(count, assistants, (caps, target, policy), tuple(actions[:per_message]),
                                             chain, loop, req.thinking_enabled(), list(msgs)), start)


def _per_message(msgs: list[Message], start: int, seed: Sanitized | None, verbatim_at: Sequence[int],
                 verified: Verified, caps: ModelCaps, target: str, policy: Policy,
                 actions: list[Action]) -> tuple[int, int]:
    """The per-message rules from ``start`` on; (assistant messages, of them the recorded turns as relayed),
    counted from the seed's."""
    rules = registry.of(caps)
    assistants = verbatim = seed.assistants if seed is not None else 0
    marks = set(verbatim_at[bisect.bisect_left(verbatim_at, start):]) if verbatim_at else set()
    for i in range(start, len(msgs)):
        m = msgs[i]
        if m.role == "assistant":
            assistants += 1
            exact = i in marks
            verbatim += exact
            _foreign_reasoning(m, i, caps, target, policy, actions)
            if rules.paired_reasoning:
                _unpaired_reasoning(m, i, actions)
            _clean_assistant(m, i, exact, verified, policy, actions)
        elif m.role == "user":
            _drop_empty_text(m, i, actions)
    return assistants, verbatim


def _thinking_rules(req: Request, caps: ModelCaps, policy: Policy, betas: frozenset[str],
                    loop_from: tuple[int, LoopFold], strip_from: int, actions: list[Action]) -> LoopFold | None:
    """Anthropic's thinking rules over the whole request: the trailing tool loop starts with thinking, or thinking
    is disabled (or the loop goes as text, on a model that cannot disable it); with thinking off no thinking block
    goes (from ``strip_from``); no trailing thinking; the parameters thinking forbids. The loop's fold, when it was
    taken."""
    msgs = req.messages
    loop: LoopFold | None = None
    if req.thinking_enabled():
        loop = loop_fold(msgs, *loop_from)
        loop_first = loop_start(loop)
        if loop_first is not None and not _starts_with_thinking(msgs[loop_first]):
            if caps.can_disable_thinking:
                req.thinking = None
                actions.append(Action(ActionKind.THINKING_DISABLED, loop_first, "loop_start_unverified"))
            else:
                _textualize_loop(msgs, loop_first, actions)
    if not req.thinking_enabled():
        _strip_all_thinking(msgs, actions, strip_from)
        _drop_empty_assistants(msgs)
    _no_trailing_thinking(msgs, actions)
    if req.thinking_enabled() and policy.fix_params:
        _fix_params(req, betas, actions)
    return loop


# ------------------------------------------------------------------ per message

def _clean_assistant(m: Message, i: int, verbatim: bool, verified: Verified, policy: Policy,
                     actions: list[Action]) -> None:
    if verbatim and _kept_verbatim(m, i, actions):
        return
    _drop_empty_text(m, i, actions)
    thinking = [b for b in m.content if b.type in THINKING_TYPES]
    if not thinking:
        return
    if verbatim or all(verified(b) for b in thinking):
        actions.append(Action(ActionKind.KEPT_VERIFIED, i))
        lead = list(itertools.takewhile(_leads, m.content))  # compaction blocks stay first
        if any(b.type not in THINKING_TYPES for b in m.content[len(lead): len(lead) + len(thinking)]):
            m.content = lead + thinking + [b for b in m.content[len(lead):] if b.type not in THINKING_TYPES]
            actions.append(Action(ActionKind.BLOCKS_REORDERED, i))
        return
    out: list[Block] = []
    for b in m.content:
        if b.type not in THINKING_TYPES:
            out.append(b)
        elif policy.unverifiable == "text" and isinstance(b, ThinkingBlock) and (b.thinking or "").strip():
            out.append(TextBlock(b.thinking or ""))
            actions.append(Action(ActionKind.DOWNGRADED_TEXT, i))
        else:
            actions.append(Action(ActionKind.DROPPED, i, b.type))
    m.content = out
    m.content_was_string = False


def _kept_verbatim(m: Message, i: int, actions: list[Action]) -> bool:
    """A recorded turn replayed verbatim and not decoded: when its JSON already has the form the rules
    want (no blank text block, thinking first), it is kept as it is, undecoded. False: decode and clean.
    The JSON's shape is read once per message (a replayed history's are the same objects every request)."""
    shape = m.raw_derived(_verbatim_shape)
    if shape is None or not shape[1]:
        return False
    if shape[0]:
        actions.append(Action(ActionKind.KEPT_VERIFIED, i))
    return True


def _verbatim_shape(m: Message) -> tuple[bool, bool]:
    """Of an undecoded message's JSON: (any thinking block, already in the form the rules want: thinking
    blocks first, no blank text block the upstream would reject)."""
    seen_other = thinking = False
    tidy = True
    for b in m.raw_blocks or ():
        t = b.get("type")
        if t == COMPACTION and not seen_other and not thinking:
            continue  # a leading compaction block: the API answers a compacting request with it first
        if t in THINKING_TYPES:
            thinking = True
            tidy = tidy and not seen_other  # thinking after other blocks: reorder the decoded blocks
            continue
        seen_other = True
        if t == "text" and not str(b.get("text", "")).strip():
            tidy = False
    return thinking, tidy


def _foreign_reasoning(m: Message, i: int, caps: ModelCaps, target: str, policy: Policy,
                       actions: list[Action]) -> None:
    """Rule 6: only the target family's own provider reasoning stays."""
    if m.raw_blocks is not None and m.provider is None:
        return  # undecoded client JSON from the Anthropic decoder: no provider data to judge
    p = m.provider
    rules = registry.of(caps)
    if p is not None and not (p.origin == target or (p.origin == CLIENT and rules.judges_client_fields)):
        m.provider = None
        actions.append(Action(ActionKind.DROPPED, i, "foreign_reasoning"))
    out: list[Block] = []
    changed = False
    for b in m.content:
        if isinstance(b, ThoughtBlock) and b.origin != target:
            changed = True
            if policy.unverifiable == "text" and b.text.strip():
                out.append(TextBlock(b.text))
                actions.append(Action(ActionKind.DOWNGRADED_TEXT, i))
            else:
                actions.append(Action(ActionKind.DROPPED, i, "foreign_reasoning"))
        elif isinstance(b, TextBlock | ToolUseBlock) and b.sig is not None and b.sig.origin != target:
            changed = True
            out.append(replace(b, sig=None))
            if b.sig.origin != CLIENT:
                actions.append(Action(ActionKind.DROPPED, i, "foreign_signature"))
        elif not rules.thinking_blocks and b.type in THINKING_TYPES:
            changed = True
            if policy.unverifiable == "text" and isinstance(b, ThinkingBlock) and (b.thinking or "").strip():
                out.append(TextBlock(b.thinking or ""))
                actions.append(Action(ActionKind.DOWNGRADED_TEXT, i))
            else:
                actions.append(Action(ActionKind.DROPPED, i, "foreign_reasoning"))
        else:
            out.append(b)
    if changed:
        m.content = out
        m.content_was_string = False


def _unpaired_reasoning(m: Message, i: int, actions: list[Action]) -> None:
    """Rule 8: a thought block that cannot go back as its recorded reasoning item, in its place, is dropped. A
    recorded turn restored as its own JSON (undecoded) is as recorded: nothing to judge."""
    if m.raw_blocks is not None:
        return
    content = m.content
    keep = [k for k, b in enumerate(content)
            if not isinstance(b, ThoughtBlock) or sendable(b, content[k + 1] if k + 1 < len(content) else None)]
    if len(keep) < len(content):
        actions += [Action(ActionKind.DROPPED, i, "reasoning_unpaired")] * (len(content) - len(keep))
        m.content = [content[k] for k in keep]


def _gemini_signatures(msgs: list[Message], target: str, bypass: str | None, actions: list[Action]) -> None:
    """Rule 7: the current turn starts after the last user message with content other than tool
    results; in it, every assistant message's first tool call is signed, by a record or the bypass.
    Without a bypass an unsigned step and its results become text, which (a user message with text)
    moves the current turn past them; the steps after it are still checked."""
    for i in range(current_turn_start(msgs), len(msgs)):
        m = msgs[i]
        if m.role != "assistant":
            continue
        k = next((k for k, b in enumerate(m.content) if isinstance(b, ToolUseBlock)), None)
        if k is None:
            continue
        first = m.content[k]
        assert isinstance(first, ToolUseBlock)
        if first.sig is not None and first.sig.origin == target:
            continue
        if bypass is None:
            for j in (i, i + 1):
                if j < len(msgs) and (j == i or msgs[j].role == "user"):
                    textualize(msgs[j])
            actions.append(Action(ActionKind.TOOL_LOOP_TEXTUALIZED, i, "gemini_unsigned_step"))
        else:
            m.content = [*m.content[:k], replace(first, sig=ProviderSig(target, bypass)), *m.content[k + 1:]]
            actions.append(Action(ActionKind.SIGNATURE_BYPASS, i))


def _drop_empty_text(m: Message, i: int, actions: list[Action]) -> None:
    if m.content_was_string or not m.result_shape().blank_text:
        return  # the common case: nothing to drop, no list built
    content = m.content
    keep = [b for b in content if not is_blank_text(b)]
    if len(keep) != len(content) and (keep or m.role == "assistant"):
        actions.append(Action(ActionKind.EMPTY_TEXT_REMOVED, i))
        m.content = keep


def _drop_empty_assistants(msgs: list[Message], start: int = 0) -> None:
    """Empty assistant messages go (``start``: none before it)."""
    if any(m.role == "assistant" and m.is_empty() for m in itertools.islice(msgs, start, None)):
        msgs[:] = [m for m in msgs if not (m.role == "assistant" and m.is_empty())]


def _leads(b: Block) -> bool:
    return b.type == COMPACTION


def _starts_with_thinking(m: Message) -> bool:
    """Rule 9 reads the first block after any leading compaction block."""
    first = m.first_type()
    if first == COMPACTION:
        first = next((b.type for b in m.content if not _leads(b)), None)
    return first in THINKING_TYPES


def trailing_loop_start(msgs: list[Message]) -> int | None:
    """Index of the first assistant message of the trailing tool loop, if the request ends in one.

    A user message without any tool_result opens a turn; the request ends in a tool
    loop when its last user message carries tool_results. The loop's first assistant
    message is the first one after the last turn-opening user message.
    """
    return loop_start(loop_fold(msgs))


def loop_fold(msgs: list[Message], start: int = 0, fold: LoopFold = NO_LOOP) -> LoopFold:
    """The trailing-loop rule's look at ``msgs[start:]``, continuing ``fold`` (its state after ``msgs[:start]``)."""
    first, results = fold
    for i in range(start, len(msgs)):
        m = msgs[i]
        if m.role == "assistant":
            if first is None:
                first = i
        elif m.role == "user":
            if m.result_shape().result_ids:
                results = True
            else:  # opens a turn
                first, results = None, False
    return first, results


def loop_start(fold: LoopFold) -> int | None:
    """``trailing_loop_start`` from the fold over all the messages: the last user message carries
    tool_results (one came after the last opener), and the loop starts at the first assistant after it."""
    first, results = fold
    return first if results else None


def _strip_all_thinking(msgs: list[Message], actions: list[Action], start: int = 0) -> None:
    """Rule 10 (``start``: the messages before it hold no thinking)."""
    for i in range(start, len(msgs)):
        m = msgs[i]
        if m.role == "assistant" and m.has_thinking():
            m.content = [b for b in m.content if b.type not in THINKING_TYPES]
            m.content_was_string = False
            actions.append(Action(ActionKind.DROPPED, i, "thinking_disabled"))


def _no_trailing_thinking(msgs: list[Message], actions: list[Action]) -> None:
    if msgs and msgs[-1].role == "assistant":
        m = msgs[-1]
        while m.content and m.content[-1].type in THINKING_TYPES:
            m.content.pop()
            actions.append(Action(ActionKind.DROPPED, len(msgs) - 1, "final_block_thinking"))
        if not m.content:
            msgs.pop()


def _textualize_loop(msgs: list[Message], start: int, actions: list[Action]) -> None:
    """For models that cannot disable thinking: close the open loop as plain text."""
    for i in range(start, len(msgs)):
        textualize(msgs[i])
    actions.append(Action(ActionKind.TOOL_LOOP_TEXTUALIZED, start))




# ------------------------------------------------------------------ parameters

def _fix_params(req: Request, betas: frozenset[str], actions: list[Action]) -> None:
    p = req.params
    tc = p.get("tool_choice")
    if isinstance(tc, dict) and tc.get("type") in ("any", "tool"):
        p["tool_choice"] = {"type": "auto", **{k: v for k, v in tc.items()
                                               if k == "disable_parallel_tool_use"}}
        actions.append(Action(ActionKind.PARAMS_FIXED, None, "tool_choice"))
    temp = p.get("temperature")
    if temp is not None and temp != 1:
        del p["temperature"]
        actions.append(Action(ActionKind.PARAMS_FIXED, None, "temperature"))
    if "top_k" in p:
        del p["top_k"]
        actions.append(Action(ActionKind.PARAMS_FIXED, None, "top_k"))
    t = req.thinking
    if not isinstance(t, dict) or t.get("type") != "enabled":
        return
    budget = t.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool):
        return
    if budget < MIN_BUDGET:
        budget = MIN_BUDGET
        actions.append(Action(ActionKind.PARAMS_FIXED, None, "budget_tokens_min"))
    max_tokens = p.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens <= budget \
            and INTERLEAVED_BETA not in betas:
        if max_tokens > MIN_BUDGET:
            budget = max_tokens - 1
        else:
            p["max_tokens"] = budget + 1
        actions.append(Action(ActionKind.PARAMS_FIXED, None, "budget_tokens_max"))
    if budget != t.get("budget_tokens"):
        req.thinking = {**t, "budget_tokens": budget}

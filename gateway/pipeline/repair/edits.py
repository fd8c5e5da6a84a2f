"""The edits around repair (pure): the recorded turns given back the message boundaries a client changed
(``reshape``, before repair restores them), then what the upstream's own context edits clear, and thinking recorded
under another model.

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

**Reshape**: recorded turns given back the message boundaries a client changed (the recorded turn's shape, whatever the
client did to it): a turn dropped while its tool results were kept, consecutive turns merged into one message, a turn
split into several. Part of repair (``gateway.pipeline.repair.core.run`` calls ``reshape`` first and restores each turn
it pins as recorded); pure, and only on the evidence repair trusts: tool ids, each naming one turn of the identified
conversation (``ConversationView.find_tool``), never text alone, never another conversation's turn. """

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.actions import Action, ActionKind
from gateway.dialects import registry
from gateway.dialects.canonical import (
    COMPACTION,
    JSON,
    THINKING_TYPES,
    Block,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.routing import ModelCaps, reads_thinking
from gateway.dialects.toolchain import not_answering
from gateway.pipeline.repair.records import ConversationView, RecordedTurn, tool_ids
from gateway.pipeline.sanitize.core import trailing_loop_start

if TYPE_CHECKING:
    from gateway.pipeline.repair.core import RepairResult

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


def reshape(msgs: list[Message], conv: ConversationView, start: int) -> dict[int, tuple[RecordedTurn, ActionKind]]:
    """Give recorded turns back the message boundaries the client changed, in place, from ``msgs[start]`` on, where
    the tool ids single them out in the identified conversation (each id names one turn there: ``find_tool``):

    - a turn the client dropped but whose tool results it kept (a history trimmer that cuts whole messages): a
      user message right after a user message whose tool_results all name one turn goes after that turn
      (``turn_reinstated``), unless the request carries that turn's calls elsewhere (a turn merged or moved,
      not dropped); when those results open the request (the trimmer cut the question too), the turn goes back
      after the user message it answered, from its record, so the history still opens with the user's words
      (``_opening``);
    - turns the client merged into one assistant message (consecutive turns whose calls, all of them and in
      order, are the message's, the client's call names and inputs agreeing): each turn in a message of its own
      (``turns_separated``), an empty user message between them, where sanitize's tool chain moves each one's
      results (indexes stay as repair leaves them: the pipeline records by them).

    - a turn the client split into several assistant messages (its thinking and text apart from its calls: the
      messages right before and right after the one with its calls hold nothing else of it, ``_split_around``):
      one message again (``turn_joined``).

    Each new assistant message is empty, its index pinned to its turn: ``run`` restores it as recorded. Returns
    the pinned indexes (after the insertions), in order, with the action each gets."""
    if not conv:
        return {}
    shaper = _Reshaper(msgs, conv, start)
    i = shaper.start
    while i < len(msgs):
        i = shaper.at(i)
    return shaper.out


class _Reshaper:
    """``reshape``'s pass: the pinned indexes so far (``out``), the recorded turns already placed (``taken``)."""

    def __init__(self, msgs: list[Message], conv: ConversationView, start: int) -> None:
        self.msgs, self.conv = msgs, conv
        self.out: dict[int, tuple[RecordedTurn, ActionKind]] = {}
        self.calls: Counter[str] | None = None  # the request's tool_use ids, counted on the first candidate
        self.taken: set[int] = set()
        self.start = max(start, 1)
        opening = _opening(msgs, conv) if start == 0 else None
        if opening is not None:  # the request opens with a dropped turn's results: its prompt and the turn go first
            prompt, turn = opening
            msgs[0:0] = [*prompt, Message("assistant", [])]
            self.out[len(prompt)] = (turn, ActionKind.TURN_REINSTATED)
            self.taken.add(turn.position)
            self.start = len(prompt) + 2
        # the assistant messages that are a recorded turn replayed as it is (the common case), in one pass: none
        # of them is reshaped (by object: indexes move as messages go in)
        replayed = [m for m in msgs[self.start:] if m.role == "assistant" and m.replay_digest]
        self.as_is = {id(m) for m, held in zip(replayed, conv.held([m.replay_digest or b"" for m in replayed]),
                                               strict=True) if held is not None}

    def at(self, i: int) -> int:
        """Reshape at message ``i``; the index to go on from."""
        msgs, conv = self.msgs, self.conv
        m = msgs[i]
        if m.role == "assistant":
            if id(m) in self.as_is or not m.tool_use_ids():
                return i + 1
            joined = self._joined(i)
            if joined is not None:
                return joined
            turns = _merged(m, conv) if len(m.tool_use_ids()) > 1 else None
            return self._place(i, turns, ActionKind.TURNS_SEPARATED) if turns else i + 1
        if m.role == "user" and msgs[i - 1].role == "assistant" and (split_at := _results_of_another(msgs, i, conv)):
            # the results of the turn before it, then a dropped turn's, in one message (an OpenAI chat client's
            # consecutive ``tool`` messages decode to one): two messages, so the dropped turn goes between them
            msgs[i:i + 1] = split_at
            return i + 1
        if m.role == "user" and msgs[i - 1].role == "user":
            ids = m.result_shape().result_ids
            named = _named_by(ids, conv) if ids else None
            if named is not None:
                return self._place(i, [named], ActionKind.TURN_REINSTATED)
        return i + 1

    def _joined(self, i: int) -> int | None:
        """A turn the client split into several messages, one again (``turn_joined``); the index to go on from.
        None: message ``i`` is not such a split."""
        msgs, conv = self.msgs, self.conv
        calls_split = _split_calls(msgs, i, conv)
        if calls_split is not None and calls_split[1].position not in self.taken:
            k, whole, results = calls_split
            msgs[i:k + 1] = [Message("assistant", []), results]
            self.out[i] = (whole, ActionKind.TURN_JOINED)
            self.taken.add(whole.position)
            return i + 2
        split = _split_around(msgs, i, conv) if msgs[i - 1].role == "assistant" or (
            i + 1 < len(msgs) and msgs[i + 1].role == "assistant") else None
        if split is not None and split[2].position not in self.taken:  # (its calls are this message's)
            j, k, whole = split
            msgs[j:k + 1] = [Message("assistant", [])]
            self.out[j] = (whole, ActionKind.TURN_JOINED)
            self.taken.add(whole.position)
            return j + 1
        return None

    def _place(self, i: int, turns: list[RecordedTurn], kind: ActionKind) -> int:
        """``turns`` reinstated before message ``i`` or separated out of it, when none is placed already and the
        request carries none of their calls elsewhere; the index to go on from."""
        msgs = self.msgs
        if self.calls is None:
            self.calls = Counter(t for x in msgs if x.role == "assistant" for t in x.tool_use_ids())
        calls = self.calls
        own = Counter(msgs[i].tool_use_ids()) if kind is ActionKind.TURNS_SEPARATED else Counter()
        if not all(t.position not in self.taken and all(calls[c] == own[c] for c in tool_ids(t.content))
                   for t in turns):
            return i + 1
        if kind is ActionKind.TURN_REINSTATED:
            msgs.insert(i, Message("assistant", []))
            new = [i]
        else:  # between the turns, a message for each one's results (the tool chain moves them there)
            msgs[i:i + 1] = [Message("assistant" if k % 2 == 0 else "user", []) for k in range(2 * len(turns) - 1)]
            new = list(range(i, i + 2 * len(turns) - 1, 2))
        for j, t in zip(new, turns, strict=True):
            self.out[j] = (t, kind)
            self.taken.add(t.position)
            calls.update(tool_ids(t.content))
        return new[-1] + 1


def _results_of_another(msgs: list[Message], i: int, conv: ConversationView) -> list[Message] | None:
    """``msgs[i]``, a user message right after an assistant message, holds that message's tool results and then
    the results of another turn of ``conv`` (all of them naming that one turn, none of its calls in the request):
    the two user messages it is split into, the first with the results of ``msgs[i - 1]``'s calls; None
    otherwise."""
    m = msgs[i]
    ids = m.result_shape().result_ids
    own = set(msgs[i - 1].tool_use_ids())
    others = not_answering(msgs, i)
    if not own or not others or len(others) == len(ids):
        return None
    turn = _named_by(others, conv)
    if turn is None:
        return None
    recorded = set(tool_ids(turn.content))
    if any(t in recorded for x in msgs if x.role == "assistant" for t in x.tool_use_ids()):
        return None  # the turn's calls are in the request: merged or moved, not dropped
    blocks = m.content
    first: list[Block] = [b for b in blocks if isinstance(b, ToolResultBlock) and b.tool_use_id in own]
    rest: list[Block] = [b for b in blocks if not (isinstance(b, ToolResultBlock) and b.tool_use_id in own)]
    if len(first) + len(rest) != len(blocks) or not any(isinstance(b, ToolResultBlock) for b in rest):
        return None
    return [Message("user", first, extra=dict(m.extra)), Message("user", rest)]


def _opening(msgs: list[Message], conv: ConversationView) -> tuple[list[Message], RecordedTurn] | None:
    """A request that opens with the results of a turn the client dropped, together with the question before it:
    ``msgs[0]`` is a user message whose tool_result ids all name one turn of ``conv``, the request carries none of
    that turn's calls, and its record keeps the user message(s) it answered (its prompt), none of them a tool
    result (the turn opened its tool loop). (Those messages, the turn); None otherwise: a turn further into a loop
    would open the history itself, which not every upstream accepts, and on a model that binds thinking to its
    prefix (rule 15) its thinking holds only after everything the trimmer cut; so its results stay the tool
    chain's."""
    if not msgs or msgs[0].role != "user":
        return None
    ids = msgs[0].result_shape().result_ids
    turn = _named_by(ids, conv) if ids else None
    if turn is None:
        return None
    own = set(tool_ids(turn.content))
    if any(t in own for m in msgs if m.role == "assistant" for t in m.tool_use_ids()):
        return None
    prompt = list(turn.prompt)
    if not prompt or any(p.role != "user" or p.result_shape().result_ids for p in prompt):
        return None
    return prompt, turn


def _split_around(msgs: list[Message], i: int, conv: ConversationView) -> tuple[int, int, RecordedTurn] | None:
    """A turn the client split into messages: ``msgs[i]``'s tool ids name one turn, whose calls are exactly its (in
    order, names agreeing), and the assistant messages right before it and right after it (its trailing fragments:
    a client that put the turn's text or thinking after its calls) carry no call and nothing but blocks of that
    turn (thinking and redacted thinking by their exact text or data, text by its exact text), none of them a
    recorded turn by its replay digest. (The first and the last of those messages' indexes, the turn); None
    otherwise (no such message on either side)."""
    m = msgs[i]
    ids = m.tool_use_ids()
    turn = _named_by(ids, conv)
    if turn is None or tool_ids(turn.content) != ids:
        return None
    recorded = [b for b in turn.content if isinstance(b, ToolUseBlock)]
    if any(c.name != r.name for c, r in zip((b for b in m.peek_content() if isinstance(b, ToolUseBlock)),
                                            recorded, strict=False)):
        return None
    parts = {_part_key(b) for b in turn.content}

    def fragment(x: Message) -> bool:
        return x.role == "assistant" and not x.tool_use_ids() and bool(x.peek_content()) and \
            not (x.replay_digest and conv.find_digest(x.replay_digest)) and \
            all(_part_key(b) in parts for b in x.peek_content())

    j, k = i, i
    while j > 0 and fragment(msgs[j - 1]):
        j -= 1
    while k + 1 < len(msgs) and fragment(msgs[k + 1]):
        k += 1
    return (j, k, turn) if (j, k) != (i, i) else None


def _split_calls(msgs: list[Message], i: int, conv: ConversationView) -> tuple[int, RecordedTurn, Message] | None:
    """A turn with parallel calls the client split into one assistant message per call (each repeating the turn's
    thinking; LiteLLM-style splitting), its results one per user message, after each call or after all of them:
    from ``msgs[i]`` on, assistant messages whose calls together are exactly the turn's, in order, each holding
    nothing else but blocks of that turn, and user messages holding only those calls' results (the last may go on
    with more: the user's words). (The index of the span's last message, the turn, one user message with the results
    in the recorded calls' order and then the rest); None otherwise."""
    ids = msgs[i].tool_use_ids()
    turn = _named_by(ids, conv)
    if turn is None:
        return None
    recorded = tool_ids(turn.content)
    if len(recorded) < 2 or ids == recorded:
        return None
    own = set(recorded)
    parts = {_part_key(b) for b in turn.content}
    seen: list[str] = []
    results: dict[str, Block] = {}
    rest: list[Block] = []
    last = i - 1
    for j in range(i, len(msgs)):
        x = msgs[j]
        if x.role == "assistant":
            xs = x.tool_use_ids()
            if rest or not xs or len(seen) + len(xs) > len(recorded) or \
                    any(not isinstance(b, ToolUseBlock) and _part_key(b) not in parts for b in x.peek_content()):
                break
            seen += xs
        else:
            blocks = x.content
            got = [b for b in blocks if isinstance(b, ToolResultBlock)]
            if not got or any(b.tool_use_id not in own or b.tool_use_id in results for b in got):
                break
            results.update((b.tool_use_id, b) for b in got)
            rest = [b for b in blocks if not isinstance(b, ToolResultBlock)]
        last = j
        if rest:
            break
    if seen != recorded or last <= i or not results:
        return None
    gathered: list[Block] = [results[t] for t in recorded if t in results]
    return last, turn, Message("user", gathered + rest)


def _part_key(b: Block) -> tuple[str, str] | None:
    """What identifies a block as part of a recorded turn when a client split the turn (``_split_around``)."""
    if isinstance(b, ThinkingBlock):
        return ("thinking", b.thinking or "")
    if isinstance(b, RedactedThinkingBlock):
        return ("redacted_thinking", b.data)
    if isinstance(b, TextBlock):
        return ("text", b.text)
    return None


def _merged(m: Message, conv: ConversationView) -> list[RecordedTurn] | None:
    """The consecutive turns of ``conv`` merged into ``m``: its tool ids name two or more, and are all of their
    calls, in order, with the same names and (where the client kept them) inputs. None otherwise."""
    ids = m.tool_use_ids()
    first, last = conv.find_tool(ids[0]), conv.find_tool(ids[-1])
    if first is None or last is None or first.position == last.position:
        return None  # (one turn's parallel calls, the common case: two lookups)
    turns: list[RecordedTurn] = []
    for tid in ids:
        t = conv.find_tool(tid)
        if t is None:
            return None
        if not turns or turns[-1].position != t.position:
            turns.append(t)
    if len(turns) < 2 or [t.position for t in turns] != list(range(turns[0].position, turns[0].position + len(turns))):
        return None
    recorded = [b for t in turns for b in t.content if isinstance(b, ToolUseBlock)]
    client = [b for b in m.peek_content() if isinstance(b, ToolUseBlock)]
    if [b.id for b in recorded] != ids or len(client) != len(recorded):
        return None
    if any(c.name != r.name or (c.input and c.input != r.input) for c, r in zip(client, recorded, strict=True)):
        return None
    return turns


def _named_by(ids: Iterable[str], conv: ConversationView) -> RecordedTurn | None:
    """The one turn of ``conv`` all of these tool ids name (each names one turn: ``find_tool``); None otherwise."""
    turn: RecordedTurn | None = None
    for tid in ids:
        t = conv.find_tool(tid)
        if t is None or (turn is not None and t.position != turn.position):
            return None
        turn = t
    return turn

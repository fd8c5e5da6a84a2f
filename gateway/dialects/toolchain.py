"""Tool-chain rules: every tool_use answered in the next message, no orphan results.

Pure: mutates the given message list in place and returns typed actions.
- A tool_use id used before in the request (the real API rejects duplicates: ``docs/upstream-rules.md``)
  gets a new id, and so do the results in the next message that answer it (a client that numbers its
  calls per message sends ``call_0`` again and again).
- All tool_results for one assistant message travel in the next user message,
  first, in tool_use order (results found in a later message are moved there).
- A tool_use without any result gets a synthetic ``is_error`` tool_result.
- A tool_result whose tool_use is not in the previous assistant message becomes a
  user text block that keeps its content (the seed's textual tool-result summary).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import orjson

from gateway.actions import Action, ActionKind
from gateway.dialects.canonical import (
    Block,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

NO_RESULT = "No result was returned for this tool call."


def repair_tool_chain(msgs: list[Message]) -> list[Action]:
    if chain_intact(msgs):
        return []
    actions = _renamed_repeats(msgs)
    # Every tool_result anywhere, by id (first occurrence wins), with where it sits.
    results: dict[str, ToolResultBlock] = {}
    for m in msgs:
        if m.role == "user":
            for b in m.content:
                if isinstance(b, ToolResultBlock) and b.tool_use_id not in results:
                    results[b.tool_use_id] = b
    claimed: set[int] = set()   # ids (python object ids) of result blocks placed by rule 1
    i = 0
    while i < len(msgs):
        m = msgs[i]
        ids = _unique(m.tool_use_ids()) if m.role == "assistant" else []
        if ids:
            nxt = msgs[i + 1] if i + 1 < len(msgs) and msgs[i + 1].role == "user" else None
            if nxt is None:
                nxt = Message("user", [])
                msgs.insert(i + 1, nxt)
            placed: list[Block] = []
            for tid in ids:
                res = results.get(tid)
                if res is None or id(res) in claimed:
                    res = ToolResultBlock(tid, NO_RESULT, True)
                    actions.append(Action(ActionKind.TOOL_RESULT_SYNTHESIZED, i + 1))
                claimed.add(id(res))
                placed.append(res)
            rest = [b for b in nxt.content if not (isinstance(b, ToolResultBlock) and id(b) in claimed)]
            before = [id(b) for b in nxt.content]
            nxt.content = placed + rest
            nxt.content_was_string = False
            if [id(b) for b in nxt.content][: len(placed)] != before[: len(placed)] and \
                    not any(a.kind is ActionKind.TOOL_RESULT_SYNTHESIZED and a.message_index == i + 1
                            for a in actions):
                actions.append(Action(ActionKind.TOOL_RESULTS_REORDERED, i + 1))
            i += 1
        i += 1
    # Remove moved results from the messages they came from, textualize true orphans.
    for j, m in enumerate(msgs):
        if m.role != "user":
            continue
        prev_ids = set(msgs[j - 1].tool_use_ids()) if j > 0 and msgs[j - 1].role == "assistant" else set()
        new: list[Block] = []
        changed = False
        for b in m.content:
            if isinstance(b, ToolResultBlock) and b.tool_use_id not in prev_ids:
                changed = True
                if id(b) in claimed:
                    continue  # it was moved to where it belongs
                new.append(TextBlock(result_as_text(b)))
                actions.append(Action(ActionKind.TOOL_RESULT_TEXTUALIZED, j))
            else:
                new.append(b)
        if changed:
            m.content = new or [TextBlock("(tool result moved)")]
            m.content_was_string = False
    return actions


# The tool-chain check's state after some messages: (the tool ids called so far, the ids the next message
# must answer). ``chain_fold`` extends it in place: a fold is continued once.
ChainFold = tuple[set[str], tuple[str, ...]]


def chain_intact(msgs: list[Message]) -> bool:
    """True when every rule above already holds, so the repair walk would change nothing: each assistant
    message's tool calls (ids unique across the history) are answered, in order and first, by the next
    message, which is a user message, and no other message carries a tool_result. This is the common
    case (a replayed history the gateway already sent upstream) and costs one look at each message,
    the assistant side answered from the client's undecoded JSON. Anything else takes the walk.
    A rule changed in ``repair_tool_chain`` must be changed here too (the property test
    tests/unit/gateway/test_repair_sanitize_property.py and the mangling matrices hold the two together)."""
    return fold_intact(chain_fold(msgs))


def fold_intact(fold: ChainFold | None) -> bool:
    """Whether the messages a ``chain_fold`` covered are an intact chain on their own (nothing is due)."""
    return fold is not None and not fold[1]


def chain_fold(msgs: list[Message], start: int = 0, fold: ChainFold | None = None) -> ChainFold | None:
    """``chain_intact``'s look at ``msgs[start:]``, continuing ``fold`` (its state after ``msgs[:start]``,
    which it extends in place); None as soon as a rule does not hold."""
    calls, due = fold if fold is not None else (set(), ())
    for i in range(start, len(msgs)):
        m = msgs[i]
        if m.role == "user":
            shape = m.result_shape()  # its tool_results are exactly ``due``, in order, before any other block
            if shape.result_ids != due or not shape.results_lead:
                return None
            due = ()
            continue
        if due:
            return None
        if m.role == "assistant":
            ids = m.tool_use_ids()
            if ids:
                due = tuple(ids)
                n = len(calls)
                calls.update(due)
                if len(calls) != n + len(due):
                    return None
    return calls, due


def _renamed_repeats(msgs: list[Message]) -> list[Action]:
    """Give every tool_use whose id an earlier tool_use of the request has a new id (derived from the old one
    and its place, so a replay of the same request gets the same), and the results for it in the next message
    too: in order, the n-th result with that id answers the n-th call with it there (after the calls that
    keep it). Blocks are replaced, never changed in place (a restored turn's are its record's)."""
    seen: set[str] = set()
    actions: list[Action] = []
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        ids = m.tool_use_ids()
        if seen.isdisjoint(ids) and len(set(ids)) == len(ids):
            seen.update(ids)
            continue
        queues: dict[str, list[str]] = {}  # old id -> the new ids, in call order; "" for the call that keeps it
        blocks: list[Block] = []
        for k, b in enumerate(m.content):
            if isinstance(b, ToolUseBlock):
                if b.id in seen:
                    new = _fresh_id(b.id, i, k)
                    queues.setdefault(b.id, []).append(new)
                    b = dataclasses.replace(b, id=new)
                else:
                    queues.setdefault(b.id, []).append("")
                seen.add(b.id)
            blocks.append(b)
        m.content = blocks
        actions.append(Action(ActionKind.TOOL_ID_MAPPED, i))
        nxt = msgs[i + 1] if i + 1 < len(msgs) and msgs[i + 1].role == "user" else None
        if nxt is None:
            continue
        results: list[Block] = []
        for b in nxt.content:
            queue = queues.get(b.tool_use_id) if isinstance(b, ToolResultBlock) else None
            new = queue.pop(0) if queue else ""
            results.append(dataclasses.replace(b, tool_use_id=new) if new and isinstance(b, ToolResultBlock) else b)
        nxt.content = results
    return actions


def _fresh_id(old: str, i: int, k: int) -> str:
    return "toolu_tg" + hashlib.sha256(f"{old}\0{i}\0{k}".encode("utf-8", "surrogatepass")).hexdigest()[:24]


def textualize(m: Message) -> None:
    """One message's tool calls and results as text (a loop closed for an upstream that would reject it as
    calls); Anthropic thinking removed."""
    out: list[Block] = []
    for b in m.content:
        if isinstance(b, ThinkingBlock | RedactedThinkingBlock):
            continue
        if isinstance(b, ToolUseBlock):
            out.append(TextBlock(f"[called tool {b.name} with {orjson.dumps(b.input).decode()}]"))
        elif isinstance(b, ToolResultBlock):
            out.append(TextBlock(f"[tool result]\n{content_text(b.content)}"))
        else:
            out.append(b)
    m.content = out or [TextBlock("(no content)")]
    m.content_was_string = False


def result_as_text(b: ToolResultBlock) -> str:
    head = f"[tool result for {b.tool_use_id}{' (error)' if b.is_error else ''}]"
    body = content_text(b.content)
    return f"{head}\n{body}" if body else head


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for c in content:
            if isinstance(c, dict):
                if c.get("type") == "text" and isinstance(c.get("text"), str):
                    parts.append(c["text"])
                else:
                    parts.append(f"[{c.get('type', 'content')}]")
            elif isinstance(c, TextBlock):
                parts.append(c.text)
            elif isinstance(c, OpaqueBlock):
                parts.append(f"[{c.type}]")
        return "\n".join(parts)
    return str(content)


def _unique(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    return [t for t in ids if not (t in seen or seen.add(t))]  # type: ignore[func-returns-value]


def opens_turn(m: Message) -> bool:
    """A message with content other than tool results (a user message of it opens a new turn)."""
    return any(not isinstance(b, ToolResultBlock) for b in m.content)


def current_turn_start(msgs: list[Message]) -> int:
    """Where the current turn starts: after the last user message with content other than tool results (Gemini's
    "current turn", reference 2.2)."""
    start = 0
    for i, m in enumerate(msgs):
        if m.role == "user" and opens_turn(m):
            start = i + 1
    return start


def dropped_result_ids(msgs: list[Message]) -> list[str]:
    """The tool_result ids of the messages after the last assistant message that could be a dropped turn's results
    (a user message right after a user message, or the first message: ``gateway.pipeline.repair.edits``), for the
    load query: with no
    assistant message to name the conversation, they may be the only ids that do."""
    out: list[str] = []
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if m.role == "assistant":
            break
        if m.role == "user" and (i == 0 or msgs[i - 1].role == "user"):
            out += m.result_shape().result_ids
        elif m.role == "user" and msgs[i - 1].role == "assistant":  # results of a dropped turn after the last one's
            out += not_answering(msgs, i)
    return out


def not_answering(msgs: list[Message], i: int) -> list[str]:
    """The tool_result ids of user message ``msgs[i]`` that answer none of the calls of the assistant message before
    it: a dropped turn's results, where a client put them with that message's (``_results_of_another``, and the
    load query's ``dropped_result_ids``)."""
    own = set(msgs[i - 1].tool_use_ids())
    return [t for t in msgs[i].result_shape().result_ids if t not in own]

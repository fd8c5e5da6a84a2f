"""Keep a conversation's prefix stable on models that bind thinking to it, else degrade without a 400.

On the newer Claude models a thinking block is bound to its prefix: the top-level ``system``, the set of ``tools``
and every message before it (docs/upstream-rules.md, "thinking-block binding"). IDE clients rewrite their system prompt
on every request
and add tools mid-conversation; forwarded as they come, every later thinking block fails the binding check.

Each turn of such a model is recorded with the prefix it was produced under (``Note``, ``TurnRecord.prefix``): the
digests of the client's own system and tools, and, only where it changed, the top-level system and tools thinkgate
sent, and the ``role: "system"`` messages thinkgate put right before the turn's answer. ``stabilize`` (pure) then:

* **keeps the prefix** (``GATEWAY_KEEP_PREFIX``, on models with the append-only forms, ``routing.ModelCaps``): the
  recorded system and tools are sent; the messages recorded before each replayed turn are put back in place; a
  client's new system prompt becomes a mid-conversation ``role: "system"`` message at the current turn, and tools it
  added or removed become ``tool_addition`` / ``tool_removal`` blocks in it (a new tool joins ``tools`` with
  ``defer_loading: true``, which no earlier block's prefix counts; beta ``mid-conversation-tool-changes-2026-07-01``);
* **otherwise degrades**: the replayed blocks produced under another prefix than the one now sent are removed where
  they are at the front of the history (earlier turns: every thinking block up to the last stale one, which the
  chain rule allows), else (one is the open tool loop's first block, which must stay) the request opts into
  ``drop_block`` (beta ``thinking-binding-controls-2026-08-01``, thinking ``adaptive``): the upstream drops the first
  stale block and every later one instead of a 400.

What is no difference (1.9) is normalised away before comparing: ``cache_control``, a string vs one text block,
whitespace around text, tool order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.actions import Action, ActionKind
from gateway.dialects import registry
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import JSON, Message, Request
from gateway.dialects.routing import ModelCaps
from gateway.pipeline.sanitize import core as sanitize

BINDING_BETA = "thinking-binding-controls-2026-08-01"
TOOL_CHANGES_BETA = "mid-conversation-tool-changes-2026-07-01"
DROP_BLOCK = {"prefix_mismatch_behavior": "drop_block"}
_TEXT_BLOCK_KEYS = frozenset(("type", "text", "cache_control", "citations"))  # the SDK's TextBlockParam

# TurnRecord.prefix keys: the client's system / tools digests; the top-level system / tools sent (only on a turn
# where they changed; ``ABSENT`` when the request had none); the messages inserted right before the answer
CLIENT_SYSTEM, CLIENT_TOOLS, SENT, INSERTED = "cs", "ct", "sent", "ins"


class _Absent:
    """The one ``ABSENT``: no request field (not a value a client can send, as a string would be)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _norm_system(system: Any) -> Any:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [system.strip()]
    if not isinstance(system, list):
        return system
    return [b.get("text", "").strip() if isinstance(b, dict) and b.get("type") == "text" and
            isinstance(b.get("text"), str) else {k: v for k, v in b.items() if k != "cache_control"}
            if isinstance(b, dict) else b for b in system]


def _tool_key(t: Any) -> bytes:
    return orjson.dumps({k: v for k, v in t.items() if k != "cache_control"} if isinstance(t, dict) else t,
                        option=orjson.OPT_SORT_KEYS)


def system_digest(system: Any) -> str:
    return _digest(_norm_system(system))


def tools_digest(tools: Any) -> str:
    if not isinstance(tools, list):
        return _digest(tools)
    return _digest(sorted(_tool_key(t).decode() for t in tools))


def _name(t: Any) -> str | None:
    name = t.get("name") if isinstance(t, dict) else None
    return name if isinstance(name, str) else None


@dataclass(slots=True)
class Recorded:
    """What the records say of a conversation's prefix up to its latest replayed turn."""

    system: Any = ABSENT            # the top-level system sent (``ABSENT``: none)
    tools: Any = ABSENT             # the top-level tools sent (``ABSENT``: none)
    client_system: str | None = None  # the digests of the client's own, at the latest turn
    client_tools: str | None = None
    offered: set[str] = field(default_factory=set)  # tool names the model was last offered
    known: bool = False             # some turn recorded what was sent
    produced_under: dict[int, str] = field(default_factory=dict)  # position -> digest of the system and tools sent


def recorded(turns: Iterable[tuple[int, Mapping[str, Any]]]) -> Recorded:
    """Fold the ``TurnRecord.prefix`` of a conversation's turns (position, note; in position order, up to the latest
    replayed)."""
    out = Recorded()
    digest: str | None = None
    for position, note in turns:
        sent = note.get(SENT)
        if isinstance(sent, dict):
            # only what changed is recorded (None: the request had none)
            if "system" in sent:
                out.system = ABSENT if sent["system"] is None else sent["system"]
            if "tools" in sent:
                out.tools = ABSENT if sent["tools"] is None else sent["tools"]
            out.known = True
            digest = sent_digest(out.system, out.tools)
            if not note.get(INSERTED):  # as sent (a kept prefix's new deferred tools come with their tool_addition)
                out.offered = {n for t in out.tools if (n := _name(t)) and not (isinstance(t, dict) and
                                                                               t.get("defer_loading") is True)} \
                    if isinstance(out.tools, list) else set()
        if digest is not None:
            out.produced_under[position] = digest
        for m in note.get(INSERTED) or ():
            content = m.get("content") if isinstance(m, dict) else None
            for b in content if isinstance(content, list) else ():
                ref = b.get("tool") if isinstance(b, dict) else None
                name = ref.get("name") if isinstance(ref, dict) else None
                if isinstance(name, str) and b.get("type") == "tool_addition":
                    out.offered.add(name)
                elif isinstance(name, str) and b.get("type") == "tool_removal":
                    out.offered.discard(name)
        if isinstance(note.get(CLIENT_SYSTEM), str):
            out.client_system, out.client_tools = note[CLIENT_SYSTEM], note.get(CLIENT_TOOLS)
    return out


@dataclass(slots=True)
class Outcome:
    """What ``stabilize`` did: the actions, the note to record with the answer, the betas the request needs."""

    actions: list[Action] = field(default_factory=list)
    note: dict[str, Any] = field(default_factory=dict)
    betas: list[str] = field(default_factory=list)
    changed: bool = False
    added: list[Message] = field(default_factory=list)  # the messages inserted (not the client's: never recorded)


def sent_digest(system: Any, tools: Any) -> str:
    """The prefix a block is bound to: the system and the tools sent, deferred tools left out (the API leaves them
    out of the binding: a kept prefix's ``tool_addition`` changes nothing a block was produced under)."""
    bound = [t for t in tools if not (isinstance(t, dict) and t.get("defer_loading") is True)] \
        if isinstance(tools, list) else tools
    return system_digest(None if system is ABSENT else system) + tools_digest([] if bound is ABSENT else bound)


def stabilize(req: Request, caps: ModelCaps, history: Recorded | None, inserted: Mapping[int, list[dict[str, Any]]],
              replayed: Mapping[int, int], *, keep: bool) -> Outcome:
    """Keep ``req``'s prefix as recorded (``keep``, where ``caps`` has the forms), or opt it into ``drop_block``
    where a replayed block's prefix changed. ``history``: the records' prefix (None: nothing recorded of this
    conversation); ``inserted``: the messages recorded right before each replayed assistant message, ``replayed``:
    the recorded position of each (both by its index in ``req.messages``). Changes ``req`` in place (its messages
    get a new list)."""
    out = Outcome()
    if not registry.of(caps).keeps_prefix(caps):
        return out
    params = req.params
    system, tools = params.get("system", ABSENT), params.get("tools", ABSENT)
    cs = system_digest(None if system is ABSENT else system)
    ct = tools_digest([] if tools is ABSENT else tools)
    out.note = {CLIENT_SYSTEM: cs, CLIENT_TOOLS: ct}
    if history is None or not history.known:
        out.note[SENT] = _sent(system, tools)
        return out
    same_system = cs == system_digest(None if history.system is ABSENT else history.system)
    same_tools = ct == tools_digest([] if history.tools is ABSENT else history.tools)
    instructions = _instructions(system) if cs != history.client_system else []
    # kept, the recorded prefix is sent: every replayed block must have been produced under it (not so once a tool was
    # redefined, which no kept form can express: the client's tools went as they were, ``_redefined``)
    kept = sent_digest(history.system, history.tools)
    keepable = (same_tools or (caps.tool_changes and not _redefined(tools, history))) and not any(
        history.produced_under.get(pos, kept) != kept for i, pos in replayed.items()
        if req.messages[i].role == "assistant" and req.messages[i].has_thinking())
    if instructions is None or not (keep and caps.system_messages and keepable):
        _send_the_clients(req, history, replayed, same_system, same_tools, out)
    elif not (same_system and same_tools and not inserted):  # (else the client's prefix is the recorded one)
        _keep_the_recorded(req, history, inserted, instructions, same_tools, out)
    return out


def _send_the_clients(req: Request, history: Recorded, replayed: Mapping[int, int], same_system: bool,
                      same_tools: bool, out: Outcome) -> None:
    """The client's prefix goes as it is: replayed blocks produced under another prefix are removed from the
    front, else the request opts into ``drop_block``."""
    system, tools = req.params.get("system", ABSENT), req.params.get("tools", ABSENT)
    if not (same_system and same_tools):
        out.note[SENT] = _sent(system, tools, same_system, same_tools)  # sent as the client has it
    now = sent_digest(system, tools)
    msgs = req.messages
    stale = [i for i, pos in replayed.items() if history.produced_under.get(pos, now) != now
             and msgs[i].role == "assistant" and msgs[i].has_thinking()]
    if stale:  # replayed blocks produced under another prefix: removed from the front, else drop_block
        stripped = sanitize.strip_front(msgs, max(stale), "stale_prefix")
        if stripped is None:
            _opt_into_drop_block(req, out)
        else:
            out.actions += stripped
            out.changed = True


def _keep_the_recorded(req: Request, history: Recorded, inserted: Mapping[int, list[dict[str, Any]]],
                       instructions: list[dict[str, JSON]], same_tools: bool, out: Outcome) -> None:
    """The recorded prefix goes: the recorded top-level system and tools, the recorded insertions back in place,
    the client's new instructions and tool changes as one mid-conversation system message at the end."""
    params = req.params
    tools = params.get("tools", ABSENT)
    for key, value in (("system", history.system), ("tools", history.tools)):
        if value is ABSENT:
            params.pop(key, None)
        else:
            params[key] = value
    msgs = list(req.messages)
    for i in sorted(inserted, reverse=True):
        back = [anthropic.decode_message(m, i) for m in inserted[i]]
        msgs[i:i] = back
        out.added += back
    content: list[dict[str, JSON]] = []
    if instructions:
        content += instructions
        out.actions.append(Action(ActionKind.PREFIX_SYSTEM_KEPT, len(msgs), "system_message"))
    if not same_tools:
        changes, added = _tool_changes(tools, history)
        if added:
            params["tools"] = [*(history.tools if isinstance(history.tools, list) else []), *added]
            out.note[SENT] = _sent(ABSENT, params["tools"], True, False)
        if changes:
            content += changes
            out.actions.append(Action(ActionKind.PREFIX_TOOLS_KEPT, len(msgs), "tool_changes"))
    if content:
        message = {"role": "system", "content": content}
        msgs.append(anthropic.decode_message(message, len(msgs)))
        out.added.append(msgs[-1])
        out.note[INSERTED] = [message]
    if inserted:
        out.actions.append(Action(ActionKind.PREFIX_REINSERTED, None, "recorded_messages"))
    if any(_changes_tools(m) for ms in (*inserted.values(), out.note.get(INSERTED, ())) for m in ms):
        out.betas.append(TOOL_CHANGES_BETA)
    req.messages = msgs
    out.changed = True


def _sent(system: Any, tools: Any, same_system: bool = False, same_tools: bool = False) -> dict[str, Any]:
    """The note of what was sent: the parts that changed (both on a conversation's first record), None for none."""
    return {k: None if v is ABSENT else v for k, v, same in (("system", system, same_system),
                                                               ("tools", tools, same_tools)) if not same}


def _instructions(system: Any) -> list[dict[str, JSON]] | None:
    """The client's new system prompt as the text blocks of a mid-conversation system message (``cache_control``
    removed), or None where the API refuses that ``system`` (not a string or a list of text blocks, a block without
    text or with a key a text block does not have, blank text: docs/upstream-rules.md rule 109): that request goes as
    the client has it, so the client gets the upstream's own 400 rather than a message built from what was refused."""
    if system is ABSENT or system == []:
        return [{"type": "text", "text": "(no system prompt)"}]  # the client removed it: say so, never empty text
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system.strip() else None
    if not isinstance(system, list) or not all(_carried(b) for b in system):
        return None
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in system]


def _carried(block: Any) -> bool:
    return (isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
            and bool(block["text"].strip()) and block.keys() <= _TEXT_BLOCK_KEYS)


def _redefined(tools: Any, history: Recorded) -> bool:
    """Whether a tool the client offers under a recorded name has another definition now. Tool changes can only add
    or remove a name: kept as recorded, the old definition would have the model call the tool with arguments the
    client's no longer takes. ``cache_control`` and ``defer_loading`` do not define a tool."""
    offered = history.tools if isinstance(history.tools, list) else ()
    recorded = {n: _definition(t) for t in offered if (n := _name(t))}
    return any(n in recorded and recorded[n] != _definition(t)
               for t in (tools if isinstance(tools, list) else ()) if (n := _name(t)))


def _definition(t: Any) -> Any:
    return {k: v for k, v in t.items() if k not in ("cache_control", "defer_loading")} if isinstance(t, dict) else t


def _tool_changes(tools: Any, history: Recorded) -> tuple[list[dict[str, JSON]], list[dict[str, JSON]]]:
    """The ``tool_removal`` / ``tool_addition`` blocks that turn the offered tools into the client's, and the tool
    definitions ``tools`` must gain (deferred: no earlier block's prefix counts them)."""
    client = {n: t for t in (tools if isinstance(tools, list) else ()) if (n := _name(t))}
    defined = {n for t in (history.tools if isinstance(history.tools, list) else ()) if (n := _name(t))}
    blocks: list[dict[str, JSON]] = [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": n}}
                                     for n in sorted(history.offered - client.keys())]
    added: list[dict[str, JSON]] = []
    for n in sorted(client.keys() - history.offered):
        if n not in defined:
            added.append({**{k: v for k, v in client[n].items() if k != "cache_control"}, "defer_loading": True})
        blocks.append({"type": "tool_addition", "tool": {"type": "tool_reference", "name": n}})
    return blocks, added


def _changes_tools(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") in ("tool_addition", "tool_removal") for b in content)


def _opt_into_drop_block(req: Request, out: Outcome) -> None:
    """Thinking ``adaptive`` with ``block_binding.prefix_mismatch_behavior: "drop_block"`` (the form the binding
    models accept, 1.9), and its beta."""
    thinking = req.thinking if isinstance(req.thinking, dict) else {}
    kept = {k: v for k, v in thinking.items() if k not in ("type", "budget_tokens", "block_binding")}
    req.thinking = {"type": "adaptive", **kept, "block_binding": dict(DROP_BLOCK)}
    out.betas.append(BINDING_BETA)
    out.actions.append(Action(ActionKind.BINDING_DROP_BLOCK, None, "prefix_changed"))
    out.changed = True


def with_betas(header: str | None, betas: Iterable[str]) -> str:
    """``anthropic-beta`` with ``betas`` added to whatever the client sent (each once)."""
    have = [b.strip() for b in (header or "").split(",") if b.strip()]
    return ",".join([*have, *(b for b in betas if b not in have)])

"""Deterministic scripted replies, chosen by markers in the FIRST user message.

Markers (any combination, anywhere in the first user message's text) are listed in ``MARKERS`` below, the one
list ``thinkgate sim --help`` and README show (e.g. ``[[sim:tools=N]]``: N tool rounds, then a final text answer;
``[[sim:fault=overloaded]]``: HTTP 529). ``SimConfig.tools`` (``thinkgate sim --tools N``) gives conversations
that declare tools N rounds without a marker (``scenario_of``).

The round is the number of assistant messages carrying ``tool_use`` in the current
turn (see ``convo``). With thinking on (``enabled`` or ``adaptive``) every answer that
thinks starts with a thinking block whose text is derived from a hash of the
conversation (system + first user message), the turn number and the round, and is
full of bytes a careless relay would change (CRLF, trailing and leading spaces, blank
lines, non-ASCII). Without interleaving (``enabled`` and no beta) only round 0 thinks.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any

import orjson

from thinkgate_sim.binding import Outcome, block_id, reply_binding
from thinkgate_sim.context import Plan
from thinkgate_sim.convo import first_user_text, tool_round, turn_number, view
from thinkgate_sim.deep_json import estimate_tokens
from thinkgate_sim.oracle import NAME, conversation_line
from thinkgate_sim.rules import BINDING_BETA, INTERLEAVED_BETA, thinking_mode
from thinkgate_sim.signing import Minter
from thinkgate_sim.system_messages import added_tools, removed_tools
from thinkgate_sim.system_messages import offered as offered_tools

MAGIC_REDACTED = ("ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_"
                  "46C9A13E193C177646C7398A98432ECCCE4C1253D5E2D82641AC0E52CC2876CB")
FAULT_KINDS = frozenset({"overloaded", "midstream", "slow", "drop", "ratelimit"})
DEFAULT_TOOL = "get_weather"

# (marker, what it does): ``thinkgate sim --help`` lists these (README "Try it locally" too; a test compares them).
MARKERS: tuple[tuple[str, str], ...] = (
    ("[[sim:tools=N]]", "N tool rounds, then a final text answer (default 0, or sim --tools when the request "
                        "declares tools)"),
    ("[[sim:parallel=K]]", "each tool round calls K tools in one assistant message (default 1)"),
    ("[[sim:redacted]]", "a redacted_thinking block follows the thinking block (so does Anthropic's documented "
                         "magic string)"),
    ("[[sim:hold]]", "a streamed reply pauses after its first content delta until POST /_sim/release (or 10 s)"),
    ("[[sim:fault=KIND]]", "overloaded (529), midstream (an error event after 200), slow:MS (first byte after MS "
                           "ms), drop (connection closed mid-body), ratelimit:S (429 with retry-after: S)"),
    ("[[sim:fault_round=R]]", "inject the fault in tool round R only"),
    ("[[sim:fault_times=N]]", "inject the fault in the first N requests of a conversation and round only (a "
                              "[[sim:conv=NAME]] conversation: on every profile together)"),
    ("[[sim:arg=TEXT]]", "string arguments of the tool calls are TEXT (default sim-<round>-<call>): a command an "
                         "agent's shell tool can run, e.g. [[sim:arg=echo done]]"),
    ("[[sim:tool=NAME]]", "the tool rounds call the tool NAME when the request offers it (default: the first tool "
                          "offered), e.g. an agent's shell tool"),
    ("[[sim:conv=NAME]]", "name the conversation: thinking carries it, and /_sim/stats counts requests that carry "
                          "another conversation's content"),
)

_MARKER = re.compile(r"\[\[sim:([a-z_]+)(?:=([^\]]*))?\]\]")
_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
_WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
          "kelp", "lagoon", "meadow", "nimbus", "orchid", "prairie")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    value: int = 0  # ms for "slow", seconds for "ratelimit"


@dataclass(frozen=True, slots=True)
class Scenario:
    tools: int = 0
    parallel: int = 1
    redacted: bool = False
    hold: bool = False
    fault: Fault | None = None
    fault_round: int | None = None
    fault_times: int | None = None
    conv: str | None = None  # [[sim:conv=NAME]]
    arg: str | None = None  # [[sim:arg=TEXT]]
    tool: str | None = None  # [[sim:tool=NAME]]


@dataclass(frozen=True, slots=True)
class Reply:
    """The planned answer: the full Message object plus what the app must do with it."""

    message: dict[str, Any]
    scenario: Scenario
    round: int
    conversation: str  # hex hash of system + first user message
    fault: Fault | None = None  # the fault to inject for this request (round filter applied)


def new_id(prefix: str) -> str:
    """``toolu_01`` / ``msg_01`` / ``req_01`` + 22 random base62 characters."""
    return prefix + "".join(secrets.choice(_BASE62) for _ in range(22))


def _int(value: str | None, default: int, low: int = 0) -> int:
    try:
        return max(low, int(value or ""))
    except ValueError:
        return default


def parse_scenario(text: str, default_tools: int = 0) -> Scenario:
    """The scenario the markers in ``text`` ask for (unknown markers are ignored); ``default_tools``: the tool
    rounds without a ``[[sim:tools=N]]`` marker (``SimConfig.tools``, for requests that declare tools)."""
    tools, parallel, redacted, hold = default_tools, 1, MAGIC_REDACTED in text, False
    fault: Fault | None = None
    fault_round: int | None = None
    fault_times: int | None = None
    conv: str | None = None
    tool_arg: str | None = None
    tool: str | None = None
    for name, value in _MARKER.findall(text):
        if name == "tools":
            tools = _int(value, 0)
        elif name == "parallel":
            parallel = _int(value, 1, low=1)
        elif name == "redacted":
            redacted = True
        elif name == "hold":
            hold = True
        elif name == "fault":
            kind, _, arg = value.partition(":")
            if kind in FAULT_KINDS:
                fault = Fault(kind, _int(arg, 0))
        elif name == "fault_round":
            fault_round = _int(value, 0)
        elif name == "fault_times":
            fault_times = _int(value, 1)
        elif name == "conv" and conv is None and NAME.fullmatch(value):
            conv = value
        elif name == "arg" and tool_arg is None and value:
            tool_arg = value
        elif name == "tool" and tool is None and value:
            tool = value
    return Scenario(tools, parallel, redacted, hold, fault, fault_round, fault_times, conv, tool_arg, tool)


def pick_tool(tools: list[tuple[str, dict[str, Any]]], wanted: str | None) -> tuple[str, dict[str, Any]] | None:
    """The (name, schema) a tool round calls among the offered ``tools``: the one ``[[sim:tool=NAME]]`` names when
    it is offered, else the first; None when none is."""
    return next((t for t in tools if t[0] == wanted), tools[0] if tools else None)


def scenario_of(body: dict[str, Any], text: str, default_tools: int) -> Scenario:
    """The scenario of a request whose first user message is ``text``: ``default_tools`` rounds apply only when
    the request declares tools (a model calls no tool it was not given)."""
    return parse_scenario(text, default_tools if body.get("tools") else 0)


def conversation_key(body: dict[str, Any]) -> str:
    system = orjson.dumps(body.get("system"))
    first = first_user_text(body.get("messages")).encode("utf-8", "surrogatepass")
    return hashlib.sha256(system + b"\0" + first).hexdigest()


def thinking_text(seed: str, conversation: str | None = None) -> str:
    """Deterministic thinking text full of awkward bytes; different for every seed. With a
    ``conversation`` (``[[sim:conv=NAME]]``) its second line is ``conversation NAME``; without
    one the text is what it always was."""
    h = hashlib.sha256(seed.encode()).hexdigest()
    w1, w2, w3 = (_WORDS[int(h[k], 16)] for k in (20, 21, 22))
    named = f"{conversation_line(conversation)}\r\n" if conversation is not None else ""
    return (f"  Considering request {h[:12]} carefully.  \r\n"
            f"{named}"
            "\r\n"
            f"Step 1: café — 思考 🤔 the {w1} path, then {w2}.   \r\n"
            f"   indented: {h[12:20]}\t\n"
            "\n"
            f"Conclusion ({w3}): proceed with the plan. \n")


def _tool(body: dict[str, Any], wanted: str | None) -> tuple[str, dict[str, Any]]:
    # after mid-conversation tool changes: the tools then offered (``system_messages``); else those in ``tools``
    changed = added_tools(body.get("messages") or []) or removed_tools(body.get("messages") or [])
    offered = [(t["name"], t["input_schema"] if isinstance(t.get("input_schema"), dict) else {})
               for t in (offered_tools(body) if changed else body.get("tools") or ())
               if isinstance(t, dict) and isinstance(t.get("name"), str)]
    return pick_tool(offered, wanted) or (DEFAULT_TOOL, {})


def tool_input(schema: dict[str, Any], round_: int, call: int, arg: str | None = None) -> dict[str, Any]:
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return {"location": ("San Francisco, CA", "Paris, France", "Tokyo, Japan")[call % 3], "round": round_}
    required = [k for k in schema.get("required") or () if k in props] or list(props)[:1]
    samples = {"string": arg or f"sim-{round_}-{call}", "integer": round_, "number": round_ + 0.5,
               "boolean": True, "array": [], "object": {}}
    out: dict[str, Any] = {}
    for name in required:
        spec = props[name] if isinstance(props[name], dict) else {}
        if isinstance(spec.get("enum"), list) and spec["enum"]:
            out[name] = spec["enum"][0]
        else:
            out[name] = samples.get(str(spec.get("type")), f"sim-{round_}-{call}")
    return out


def minted_tokens(message: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, token) for every opaque value in a planned Message (for the oracle)."""
    out: list[tuple[str, str]] = []
    for b in message["content"]:
        if b["type"] == "thinking":
            out += [("thinking", b["thinking"]), ("signature", b["signature"])]
        elif b["type"] == "redacted_thinking":
            out.append(("redacted", b["data"]))
        elif b["type"] == "tool_use":
            out.append(("tool_id", b["id"]))
    return out


def plan_reply(body: dict[str, Any], *, betas: frozenset[str], minter: Minter,
               interleaved: bool | None = None, bound: Outcome | None = None, context: Plan | None = None,
               default_tools: int = 0) -> Reply:
    """Plan the answer to a request that passed validation. ``bound``: the model binds its blocks
    (``binding.check_binding``'s outcome): they are minted with their prefix record. ``context``: what the
    request's ``context_management`` edits do (``sim.context.plan``): a compaction block first (alone when
    paused), the ``applied_edits`` report. ``default_tools``: ``scenario_of``."""
    msgs = view(body["messages"])
    scenario = scenario_of(body, first_user_text(body["messages"]), default_tools)
    round_ = tool_round(msgs)
    key = conversation_key(body)
    mode = thinking_mode(body, bound is not None)
    if interleaved is None:
        interleaved = mode == "adaptive" or INTERLEAVED_BETA in betas
    model: str = body["model"]
    response_id = new_id("msg_01")
    thinking = body.get("thinking")
    display = thinking.get("display") if mode and isinstance(thinking, dict) else None

    content: list[dict[str, Any]] = []
    compaction = context.compaction if context is not None else None
    if compaction is not None:
        content.append(compaction)
    paused = compaction is not None and context is not None and context.pause
    if mode and not paused and (round_ == 0 or interleaved):
        text = "" if display == "omitted" else thinking_text(f"{key}/{turn_number(msgs)}/{round_}",
                                                                 scenario.conv)
        run_len = 2 if scenario.redacted else 1
        chain = bound.last_kept if bound is not None and compaction is None else None
        at = len(content)  # after a compaction block the run starts at index 1
        binding = reply_binding(body, content, at, chain) if bound is not None else None
        block = {"type": "thinking", "thinking": text,
                 "signature": minter.mint_thinking(model, text, response_id, at, run_pos=0, run_len=run_len,
                                                   binding=binding)}
        content.append(block)
        if scenario.redacted:
            binding = reply_binding(body, content, at + 1, block_id(block)) if bound is not None else None
            content.append({"type": "redacted_thinking",
                            "data": minter.mint_redacted(model, response_id, at + 1, run_pos=1, run_len=2,
                                                         binding=binding)})
    if paused:
        stop_reason = "compaction"
    elif round_ < scenario.tools:
        name, schema = _tool(body, scenario.tool)
        calls = scenario.parallel
        content.append({"type": "text", "text": f"Round {round_ + 1} of {scenario.tools}: I'll call "
                                                f"`{name}` {calls} time{'s' if calls > 1 else ''}."})
        for call in range(calls):
            content.append({"type": "tool_use", "id": new_id("toolu_01"), "name": name,
                            "input": tool_input(schema, round_, call, scenario.arg)})
        stop_reason = "tool_use"
    else:
        content.append({"type": "text", "text": (
            f"Final answer after {round_} tool round{'s' if round_ != 1 else ''} "
            f"(conversation {key[:8]}). Everything checked out; here is the summary you asked for.")})
        stop_reason = "end_turn"
    usage = {"input_tokens": estimate_tokens(body), "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": estimate_tokens(content)}
    message: dict[str, Any] = {"id": response_id, "type": "message", "role": "assistant", "model": model,
                               "content": content, "stop_reason": stop_reason, "stop_sequence": None,
                               "usage": usage}
    if context is not None and context.report is not None:
        message["context_management"] = context.report
    if BINDING_BETA in betas:  # 1.9: with the header every answer carries the array, [] when empty
        message["input_transformations"] = list(bound.transformations) if bound is not None else []
    fault = scenario.fault
    if scenario.fault_round is not None and scenario.fault_round != round_:
        fault = None
    return Reply(message, scenario, round_, key, fault)

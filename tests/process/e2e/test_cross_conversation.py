"""Issue 20's two reproductions, end to end: a real simulator, a real gateway (embedded store, then a
real redis-server) and the official anthropic SDK.

- **Another conversation's turn.** One tenant, two conversations with the same visible text (the
  simulator's ``Round 1 of 2: I'll call `get_weather` 1 time.``) and the same tool name, but tools whose
  input schemas differ (``city`` for X, ``location`` for Y), so their tool inputs differ. X plays its tool
  loop through the gateway; Y's first answer comes straight from the upstream; Y's next request goes
  through the gateway replaying that answer (thinking kept, unsigned or dropped; with no SCID header or
  with a fresh one of its own). The upstream must receive nothing of X (thinking, signature, tool id,
  tool input), Y's ``tool_result`` keeps Y's id, the access log shows no restore, Y is not given X's
  SCID, and the simulator's oracle (``[[sim:conv=NAME]]``) counts no foreign content.
- **A repeated tool round within one conversation.** Three user turns of one tool round each: the
  turns' tool-call answers have the same text and the same call (``[[sim:tools=1]]`` restarts the
  round count at every user turn). The client rewrites tool ids (per conversation, or per message:
  every call is ``call_0``) and may drop thinking. Every request is answered 200, the upstream never
  holds two ``tool_use`` blocks with one id nor a synthesised "No result was returned" result, and every
  replayed turn carries nothing recorded for another turn (restored from its own record, or degraded).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from state.keys import new_scid
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.e2e.helpers import THINKING, block_dicts
from tests.support.e2e.logged import last_access, logged_gateway
from tests.support.e2e.rewrites import ANTHROPIC, drop_thinking, strings
from tests.support.reliability.loops import access_lines

MODEL = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
SYNTHESIZED = "No result was returned for this tool call"


def weather_tool(field: str) -> dict[str, Any]:
    return {"name": "get_weather", "description": "Weather for a place",
            "input_schema": {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}}


X_TOOL, Y_TOOL = weather_tool("city"), weather_tool("location")


@pytest.fixture(scope="module", params=["embedded", "redis"])
def cross_gw(request: pytest.FixtureRequest, sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    """A gateway with the JSON access log: the embedded store, or a real redis-server."""
    yield from logged_gateway(request, sim, gateways, "issue-20-cross-0123456789abcdef0")


@dataclass
class SimCounts:
    foreign: int
    details: int  # entries in ``foreign_details`` (the simulator keeps the first few only)
    rejections: dict[str, int]


def sim_counts(sim: Sim) -> SimCounts:
    stats = sim.stats()
    assert "foreign" in stats, "the simulator has no cross-conversation oracle (stats()['foreign'])"
    return SimCounts(int(stats["foreign"]), len(stats["foreign_details"]), dict(stats["rejections"]))


def oracle_problems(sim: Sim, before: SimCounts) -> list[str]:
    stats = sim.stats()
    out = []
    if stats["foreign"] != before.foreign:
        out.append(f"the oracle counted {stats['foreign'] - before.foreign} request(s) carrying another "
                   f"conversation's content: {stats['foreign_details'][before.details:]}")
    if stats["rejections"] != before.rejections:
        out.append(f"the simulator rejected requests: {stats['rejections']} (before {before.rejections})")
    return out


def create(client: anthropic.Anthropic, tool: dict[str, Any], history: list[dict[str, Any]],
           headers: dict[str, str] | None = None) -> tuple[anthropic.types.Message, str | None]:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=4096, tools=[tool], thinking=THINKING,  # type: ignore[list-item,arg-type]
        messages=copy.deepcopy(history), extra_headers=headers or {})  # type: ignore[arg-type]
    return raw.parse(), raw.headers.get(SCID)


def results(answer: anthropic.types.Message, text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": text}
                                        for b in answer.content if b.type == "tool_use"]}


def tokens(blocks: list[dict[str, Any]]) -> set[str]:
    """What the upstream minted in an answer: thinking texts, signatures, redacted data, tool ids."""
    out: set[str] = set()
    for b in blocks:
        if b["type"] == "thinking":
            out |= {b["thinking"], b["signature"]}
        elif b["type"] == "redacted_thinking":
            out.add(b["data"])
        elif b["type"] == "tool_use":
            out.add(b["id"])
    return out


def visible(blocks: list[dict[str, Any]]) -> list[Any]:
    return [b.get("text") if b["type"] == "text" else (b["name"], b["input"]) for b in blocks
            if b["type"] in ("text", "tool_use")]


# ------------------------------------------------------------------ reproduction 1: X's turn in Y


@pytest.mark.parametrize("y_header", [False, True], ids=["no-header", "own-fresh-scid"])
@pytest.mark.parametrize("y_thinking", ["kept", "unsigned", "dropped"])
def test_a_replayed_turn_is_never_restored_from_another_conversation(
        sim: Sim, cross_gw: ServerProcess, y_thinking: str, y_header: bool) -> None:
    uid = uuid.uuid4().hex[:10]
    key = f"sk-issue20-one-tenant-{uid}"
    x_conv, y_conv = f"x-{uid}", f"y-{uid}"
    before = sim_counts(sim)
    with (anthropic.Anthropic(base_url=cross_gw.url, api_key=key, max_retries=0, default_headers=BETA) as via,
          anthropic.Anthropic(base_url=sim.url, api_key=key, max_retries=0, default_headers=BETA) as direct):
        # X: a whole tool loop through thinkgate (recorded)
        x_history: list[dict[str, Any]] = [
            {"role": "user", "content": f"[[sim:tools=2]] [[sim:conv={x_conv}]] What's the weather?"}]
        x_answers: list[list[dict[str, Any]]] = []
        x_scid = None
        for _ in range(4):
            answer, x_scid = create(via, X_TOOL, x_history, {SCID: x_scid} if x_scid else None)
            x_answers.append(block_dicts(answer))
            if answer.stop_reason != "tool_use":
                break
            x_history += [{"role": "assistant", "content": x_answers[-1]}, results(answer, "sunny")]
        assert len(x_answers) == 3, "X played two tool rounds and a final answer"

        # Y: its first turn straight to the upstream (thinkgate never saw it) ...
        y_history: list[dict[str, Any]] = [
            {"role": "user", "content": f"[[sim:tools=2]] [[sim:conv={y_conv}]] What's the weather?"}]
        y_first, _ = create(direct, Y_TOOL, y_history)
        y_blocks = block_dicts(y_first)
        y_call = next(b for b in y_blocks if b["type"] == "tool_use")
        x_call = next(b for b in x_answers[0] if b["type"] == "tool_use")
        assert visible(y_blocks)[0] == visible(x_answers[0])[0], "precondition: Y's turn shows X's text"
        assert y_call["name"] == x_call["name"] and y_call["input"] != x_call["input"], "precondition"
        replayed = {"kept": y_blocks,
                    "unsigned": [{k: v for k, v in b.items() if k != "signature"} for b in y_blocks],
                    "dropped": drop_thinking([{"role": "assistant", "content": y_blocks}])[0]["content"]}[y_thinking]
        y_history += [{"role": "assistant", "content": replayed}, results(y_first, "rainy")]

        # ... and its next request through thinkgate
        seen = len(access_lines(cross_gw.log_lines()))
        y_scid_sent = new_scid() if y_header else None
        _, y_scid = create(via, Y_TOOL, y_history, {SCID: y_scid_sent} if y_scid_sent else None)
        sent = sim.last()["body"]
        line = last_access(cross_gw, seen)

    x_tokens = set().union(*(tokens(a) for a in x_answers))
    problems = oracle_problems(sim, before)
    leaked = x_tokens & strings(sent)
    if leaked:
        kinds = sorted({b["type"] for a in x_answers for b in a if tokens([b]) & leaked})
        problems.append(f"the upstream request carries X's {', '.join(kinds)} blocks: "
                        f"{sorted(t[:48] for t in leaked)}")
    assistant = [m for m in sent["messages"] if m["role"] == "assistant"]
    if len(assistant) != 1:
        problems.append(f"Y's request went upstream with {len(assistant)} assistant messages")
    else:
        calls = [(b["id"], b["name"], b["input"]) for b in assistant[0]["content"] if b["type"] == "tool_use"]
        if calls != [(y_call["id"], y_call["name"], y_call["input"])]:
            problems.append(f"Y's tool call went upstream as {calls}, not as Y made it "
                            f"{[(y_call['id'], y_call['name'], y_call['input'])]}")
        thinking = [b for b in assistant[0]["content"] if b["type"] == "thinking"]
        own = [b for b in y_blocks if b["type"] == "thinking"]
        if thinking and [b["thinking"] for b in thinking] != [b["thinking"] for b in own]:
            problems.append("Y's assistant message went upstream with thinking that is not Y's own")
    answered = [b["tool_use_id"] for m in sent["messages"][2:3] for b in m["content"] if b["type"] == "tool_result"]
    if answered != [y_call["id"]]:
        problems.append(f"Y's tool_result went upstream as {answered}, not Y's id {y_call['id']}")
    if y_scid == x_scid:
        problems.append(f"Y was handed X's conversation id {x_scid}")
    if line.get("actions", {}).get("restored") or line.get("actions", {}).get("tool_id_mapped"):
        problems.append(f"access log: via={line.get('via')} actions={line.get('actions')} (restored from X)")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ reproduction 2: a repeated tool round


TURNS = 3


@pytest.mark.parametrize("client", ["no_thinking_ids_per_message", "no_thinking_ids_per_conversation",
                                    "ids_per_conversation"])
def test_a_repeated_tool_round_is_restored_from_its_own_turn(sim: Sim, cross_gw: ServerProcess, client: str) -> None:
    uid = uuid.uuid4().hex[:10]
    before = sim_counts(sim)
    tool = weather_tool("city")
    mangle = ANTHROPIC[client]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"[[sim:tools=1]] [[sim:conv=r-{uid}]] What's the weather?"}]
    problems: list[str] = []
    requests = 0
    scid = None
    with anthropic.Anthropic(base_url=cross_gw.url, api_key=f"sk-issue20-repeat-{uid}", max_retries=0,
                             default_headers=BETA) as gw:
        for turn in range(TURNS):
            if turn:
                history.append({"role": "user", "content": f"And once more, please ({turn})."})
            for _ in range(3):
                try:
                    answer, scid = create(gw, tool, mangle(history), {SCID: scid} if scid else None)
                except anthropic.APIStatusError as e:
                    problems.append(f"request {requests} (turn {turn}): {e.status_code} {e.message}")
                    if e.status_code == 400:  # the upstream's rejection, relayed: what did it receive?
                        problems += upstream_problems(requests, sim.last()["body"], history)
                    break
                finally:
                    requests += 1
                problems += upstream_problems(requests - 1, sim.last()["body"], history)
                history.append({"role": "assistant", "content": block_dicts(answer)})
                if answer.stop_reason != "tool_use":
                    break
                history.append(results(answer, f"turn {turn}: sunny"))
            if problems:
                break
    calls = [visible(m["content"]) for m in history if m["role"] == "assistant"
             and any(b["type"] == "tool_use" for b in m["content"])]
    assert all(c == calls[0] for c in calls), f"precondition: the turns repeat one tool round: {calls}"
    problems += oracle_problems(sim, before)
    assert not problems, "\n".join(problems)
    assert len(calls) == TURNS


@pytest.mark.parametrize("client", ["no_thinking_ids_per_message", "no_thinking_ids_per_conversation"])
def test_repeated_calls_within_one_turn_keep_their_own_records(sim: Sim, cross_gw: ServerProcess,
                                                               client: str) -> None:
    """A guard beside the reproduction: three rounds of one turn call the tool with the same input (an
    ``enum`` of one value), told apart only by their text (``Round k of 3``) and their place."""
    uid = uuid.uuid4().hex[:10]
    before = sim_counts(sim)
    tool = {"name": "get_weather", "description": "Weather in Paris", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}}, "required": ["city"]}}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"[[sim:tools=3]] [[sim:conv=t-{uid}]] What's the weather?"}]
    problems: list[str] = []
    with anthropic.Anthropic(base_url=cross_gw.url, api_key=f"sk-issue20-rounds-{uid}", max_retries=0,
                             default_headers=BETA) as gw:
        for n in range(5):
            try:
                answer, _ = create(gw, tool, ANTHROPIC[client](history))
            except anthropic.APIStatusError as e:
                problems.append(f"request {n}: {e.status_code} {e.message}")
                problems += upstream_problems(n, sim.last()["body"], history)
                break
            problems += upstream_problems(n, sim.last()["body"], history)
            history.append({"role": "assistant", "content": block_dicts(answer)})
            if answer.stop_reason != "tool_use":
                break
            history.append(results(answer, f"round {n}: sunny"))
    calls = [visible(m["content"])[1:] for m in history if m["role"] == "assistant"
             and any(b["type"] == "tool_use" for b in m["content"])]
    assert all(c == calls[0] for c in calls), f"precondition: every round makes the same call: {calls}"
    problems += oracle_problems(sim, before)
    assert not problems, "\n".join(problems)
    assert len(calls) == 3


def upstream_problems(n: int, sent: dict[str, Any], history: list[dict[str, Any]]) -> list[str]:
    """What is wrong with request ``n``'s upstream body, given the answers the client holds (``history``)."""
    out: list[str] = []
    ids = [b["id"] for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]
           if b["type"] == "tool_use"]
    if len(ids) != len(set(ids)):
        out.append(f"request {n}: duplicate tool_use ids upstream: {ids}")
    synthesized = [b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]
                   if b["type"] == "tool_result" and SYNTHESIZED in str(b.get("content"))]
    if synthesized:
        out.append(f"request {n}: {len(synthesized)} synthesised tool_result(s) beside the client's real ones")
    answers = [tokens(m["content"]) for m in history if m["role"] == "assistant"]
    upstream = [m for m in sent["messages"] if m["role"] == "assistant"]
    if len(upstream) != len(answers):
        out.append(f"request {n}: {len(upstream)} assistant messages upstream for {len(answers)} replayed")
        return out
    for k, m in enumerate(upstream):
        others = set().union(set(), *(a for j, a in enumerate(answers) if j != k))
        wrong = strings(m["content"]) & others
        if wrong:
            src = sorted({j for j, a in enumerate(answers) if a & wrong})
            out.append(f"request {n}: replayed turn {k} carries what turn(s) {src} recorded "
                       f"({len(wrong)} thinking/signature/tool id values)")
    return out

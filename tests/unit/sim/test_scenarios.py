"""Marker parsing and the scripted replies (pure, no HTTP)."""

from __future__ import annotations

import re

from tests.support.sim.helpers import MODEL, request, tool_results
from thinkgate_sim.scenarios import MAGIC_REDACTED, Fault, Scenario, parse_scenario, plan_reply, thinking_text
from thinkgate_sim.signing import Minter

TOOL_ID = re.compile(r"^toolu_01[0-9A-Za-z]{22}$")


def test_parse_markers() -> None:
    assert parse_scenario("plain") == Scenario()
    assert parse_scenario("[[sim:tools=3]] x [[sim:parallel=4]] [[sim:redacted]] [[sim:hold]]") == Scenario(
        tools=3, parallel=4, redacted=True, hold=True)
    assert parse_scenario(MAGIC_REDACTED).redacted
    assert parse_scenario("[[sim:fault=slow:250]]").fault == Fault("slow", 250)
    assert parse_scenario("[[sim:fault=ratelimit:7]]").fault == Fault("ratelimit", 7)
    assert parse_scenario("[[sim:fault=overloaded]] [[sim:fault_round=1]] [[sim:fault_times=2]]") == Scenario(
        fault=Fault("overloaded"), fault_round=1, fault_times=2)
    assert parse_scenario("[[sim:fault=bogus]] [[sim:tools=x]] [[sim:parallel=0]]") == Scenario()
    assert parse_scenario("[[sim:fault=slow:5]] [[sim:arg=echo done]] [[sim:arg=ls]]").arg == "echo done"


def test_the_arg_marker_gives_string_arguments_a_runnable_value() -> None:
    from thinkgate_sim.scenarios import tool_input
    schema = {"type": "object", "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["cmd", "n"]}
    assert tool_input(schema, 0, 0, "echo done") == {"cmd": "echo done", "n": 0}
    assert tool_input(schema, 1, 2) == {"cmd": "sim-1-2", "n": 1}


def test_thinking_text_is_awkward_and_distinct() -> None:
    a, b = thinking_text("conv-a/1/0"), thinking_text("conv-b/1/0")
    assert a != b and thinking_text("conv-a/1/0") == a and thinking_text("conv-a/1/1") != a
    assert "\r\n" in a and "\r\n\r\n" in a  # CRLF and a blank line
    assert a.startswith("  ") and a != a.strip() and a != a.rstrip()
    assert "  \r\n" in a  # trailing spaces before a line break
    assert "café" in a and "思考" in a and "🤔" in a
    assert "\n   " in a  # a line with leading spaces


def test_round_counting_and_interleaving(minter: Minter) -> None:
    body = request("go [[sim:tools=2]] [[sim:parallel=3]]")
    replies = []
    for _ in range(3):
        reply = plan_reply(body, betas=frozenset(), minter=minter)
        replies.append(reply)
        body["messages"].append({"role": "assistant", "content": reply.message["content"]})
        body["messages"].append(tool_results(reply.message))
    assert [r.round for r in replies] == [0, 1, 2]
    assert [r.message["stop_reason"] for r in replies] == ["tool_use", "tool_use", "end_turn"]
    first, second, final = (r.message["content"] for r in replies)
    assert [b["type"] for b in first] == ["thinking", "text", "tool_use", "tool_use", "tool_use"]
    assert [b["type"] for b in second] == ["text", "tool_use", "tool_use", "tool_use"]  # no interleaving
    assert [b["type"] for b in final] == ["text"]
    ids = [b["id"] for c in (first, second) for b in c if b["type"] == "tool_use"]
    assert len(set(ids)) == 6 and all(TOOL_ID.match(i) for i in ids)
    assert all(b["name"] == "get_weather" and b["input"] for b in first if b["type"] == "tool_use")
    assert replies[0].message["id"].startswith("msg_01")
    assert replies[0].message["usage"]["input_tokens"] > 0 and replies[0].message["usage"]["output_tokens"] > 0
    sig = first[0]["signature"]
    assert minter.verify_thinking(MODEL, first[0]["thinking"], sig) is not None


def test_interleaved_forced_by_config_and_tool_from_request(minter: Minter) -> None:
    tools = [{"name": "read_file", "description": "d", "input_schema": {
        "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path", "limit"]}}]
    body = request("go [[sim:tools=2]]", tools=tools)
    first = plan_reply(body, betas=frozenset(), minter=minter).message
    tool_use = first["content"][-1]
    assert tool_use["name"] == "read_file" and set(tool_use["input"]) == {"path", "limit"}
    body["messages"] += [{"role": "assistant", "content": first["content"]}, tool_results(first)]
    assert plan_reply(body, betas=frozenset(), minter=minter).message["content"][0]["type"] == "text"
    forced = plan_reply(body, betas=frozenset(), minter=minter, interleaved=True).message
    assert forced["content"][0]["type"] == "thinking"
    beta = plan_reply(body, betas=frozenset({"interleaved-thinking-2025-05-14"}), minter=minter).message
    assert beta["content"][0]["type"] == "thinking"


def test_thinking_differs_per_conversation_turn_and_round(minter: Minter) -> None:
    def thinking(body: dict[str, object]) -> str:
        reply = plan_reply(body, betas=frozenset(), minter=minter, interleaved=True)
        return str(reply.message["content"][0]["thinking"])

    a, b = request("conversation A"), request("conversation B")
    assert thinking(a) != thinking(b)
    assert thinking(a) == thinking(request("conversation A"))  # deterministic
    a2 = request("conversation A")
    a2["messages"] += [{"role": "assistant", "content": "answer"}, {"role": "user", "content": "again"}]
    assert thinking(a2) != thinking(a)


def test_no_thinking_without_thinking_param(minter: Minter) -> None:
    reply = plan_reply(request("x [[sim:redacted]]", thinking=None), betas=frozenset(), minter=minter)
    assert [b["type"] for b in reply.message["content"]] == ["text"]
    assert reply.message["stop_reason"] == "end_turn"


def test_mixed_tool_result_and_text_message_continues_the_loop(minter: Minter) -> None:
    body = request("go [[sim:tools=2]]")
    first = plan_reply(body, betas=frozenset(), minter=minter).message
    results = tool_results(first)
    results["content"].append({"type": "text", "text": "<system-reminder>keep going</system-reminder>"})
    body["messages"] += [{"role": "assistant", "content": first["content"]}, results]
    reply = plan_reply(body, betas=frozenset(), minter=minter)
    assert reply.round == 1 and reply.message["content"][0]["type"] == "text"

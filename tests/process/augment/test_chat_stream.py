"""``POST /gateway/chat-stream`` through real gateway and simulator processes, read as NDJSON."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.process_fixtures import ServerProcess, Sim
from tests.support.augment.client import (
    BETA,
    MAIN_TEXT_FINISHED,
    MODEL,
    RAW_RESPONSE,
    SCID,
    THINKING_NODE,
    TOKEN_USAGE,
    TOOL_USE,
    TOOL_USE_START,
    Loop,
    Reply,
    assert_tools_stream_per_tool,
    chat,
    run_loop,
)
from tests.support.manglings.augment import MANGLINGS


def rejections(sim: Sim) -> int:
    return sum(sim.stats()["rejections"].values())


def check_reply(reply: Reply, *, last: bool) -> None:
    """The shape every chat-stream answer must have."""
    assert [n["id"] for n in reply.nodes] == list(range(1, len(reply.nodes) + 1))
    assert all(set(line) >= {"text", "unknown_blob_names", "checkpoint_not_found", "workspace_file_chunks"}
               for line in reply.lines)
    assert [("stop_reason" in line) for line in reply.lines] == [False] * (len(reply.lines) - 1) + [True]
    types = [n["type"] for n in reply.nodes]
    # Thinking arrives first (interleaved beta: every answer thinks), as its own node, never as text.
    thinking = reply.of_type(THINKING_NODE)
    assert thinking and types.index(THINKING_NODE) < types.index(RAW_RESPONSE)
    for node in thinking:
        summary, signature = node["thinking"]["summary"], node["thinking"]["signature"]
        assert summary and signature and "Considering request" in summary
        assert summary not in reply.text and "Considering request" not in reply.text
        assert all(summary not in n["content"] for n in reply.of_type(RAW_RESPONSE))
    assert "".join(n["content"] for n in reply.of_type(RAW_RESPONSE)) == reply.text
    # Each tool: TOOL_USE_START (name known, no input yet) strictly before its TOOL_USE, and both
    # before the next tool's TOOL_USE_START (the simulator sends parallel tool_use blocks one by one).
    assert_tools_stream_per_tool(reply.nodes)
    starts = {n["tool_use"]["tool_use_id"]: n for n in reply.of_type(TOOL_USE_START)}
    uses = {n["tool_use"]["tool_use_id"]: n for n in reply.of_type(TOOL_USE)}
    assert starts.keys() == uses.keys()
    for tid, use in uses.items():
        assert starts[tid]["id"] < use["id"]
        assert starts[tid]["tool_use"]["tool_name"] == use["tool_use"]["tool_name"] == "get_weather"
        assert starts[tid]["tool_use"]["input_json"] == "" and use["tool_use"]["input_json"].startswith("{")
    assert reply.of_type(TOKEN_USAGE)[0]["token_usage"]["output_tokens"] > 0
    assert reply.of_type(MAIN_TEXT_FINISHED)[-1]["content"] == reply.text
    assert reply.stop_reason == (1 if last else 3)
    assert bool(uses) is not last


def check_loop(loop: Loop, rounds: int) -> None:
    assert len(loop.replies) == rounds + 1
    for i, reply in enumerate(loop.replies):
        check_reply(reply, last=i == rounds)
    assert f"Final answer after {rounds} tool rounds" in loop.replies[-1].text


def test_server_side_state_tool_loop(sim: Sim, gateway: ServerProcess) -> None:
    """Empty chat_history on every request: the gateway rebuilds the thread from its records."""
    conv = str(uuid.uuid4())
    before = rejections(sim)
    loop = run_loop(gateway.url, "[[sim:tools=3]] what's the weather?", key="sk-aug-state", conversation_id=conv)
    check_loop(loop, 3)
    assert rejections(sim) == before
    assert {r.headers[SCID] for r in loop.replies} == {conv}
    sent = sim.last()["body"]
    assert len(sent["messages"]) == 7  # the whole thread went upstream, thinking and signatures included
    assert sent["thinking"]["type"] == "enabled"
    assert all(m["content"][0]["type"] == "thinking" for m in sent["messages"] if m["role"] == "assistant")


def test_parallel_tools_stream_per_tool(sim: Sim, gateway: ServerProcess) -> None:
    """Three tools per round: each tool's 7 then 5 before the next tool's 7, not all at the end."""
    before = rejections(sim)
    loop = run_loop(gateway.url, "[[sim:tools=2]] [[sim:parallel=3]] three cities", key="sk-aug-parallel",
                    conversation_id=str(uuid.uuid4()))
    check_loop(loop, 2)
    assert [len(assert_tools_stream_per_tool(r.nodes)) for r in loop.replies] == [3, 3, 0]
    assert rejections(sim) == before


def test_nodes_stream_before_upstream_finishes(sim: Sim, gateway: ServerProcess) -> None:
    """The simulator holds the rest of the stream after its first delta: the first NDJSON line
    (that delta's text) is already with the client, and nothing final is."""
    body = {"model": MODEL, "message": "[[sim:hold]] take your time", "chat_history": [], "thinking": None,
            "max_tokens": 4096, "conversation_id": str(uuid.uuid4())}
    with httpx.stream("POST", gateway.url + "/gateway/chat-stream", json=body,
                      headers={"authorization": "Bearer sk-aug-hold"}, timeout=15) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        first = json.loads(next(line for line in lines if line.strip()))
        # The upstream stream is still open (held), so this line cannot have waited for its end.
        assert sim.stats()["streams_open"] >= 1
        assert "stop_reason" not in first and first["text"]
        assert [n["type"] for n in first["nodes"]] == [RAW_RESPONSE] and first["nodes"][0]["content"] == first["text"]
        sim.release()
        rest = [json.loads(line) for line in lines if line.strip()]
    assert rest[-1]["stop_reason"] == 1
    assert first["text"] + "".join(line["text"] for line in rest) == rest[-1]["nodes"][-1]["content"]


def test_follow_up_after_end_turn_with_server_side_state(sim: Sim, gateway: ServerProcess) -> None:
    """A new user message after the final answer, chat_history empty, same conversation id: the
    gateway rebuilds the whole thread, the final answer (its thinking and signature) included."""
    conv = str(uuid.uuid4())
    before = rejections(sim)
    loop = run_loop(gateway.url, "[[sim:tools=2]] weather, then a follow-up", key="sk-aug-followup",
                    conversation_id=conv)
    check_loop(loop, 2)
    final = loop.replies[-1]
    body = {**loop.bodies[-1], "message": "And tomorrow?", "nodes": [], "chat_history": []}
    follow = chat(gateway.url, body, {"authorization": "Bearer sk-aug-followup", **BETA})
    assert follow.status == 200, follow.body
    assert follow.headers[SCID] == conv and follow.lines[-1]["stop_reason"] in (1, 3)
    assert follow.of_type(THINKING_NODE) and rejections(sim) == before
    sent = sim.last()["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant"] * 3 + ["user"]
    answer = sent[5]["content"]
    # The final answer exactly as streamed: its thinking block (text and signature), then its text.
    (thinking,) = final.of_type(THINKING_NODE)
    assert answer[0] == {"type": "thinking", "thinking": thinking["thinking"]["summary"],
                         "signature": thinking["thinking"]["signature"]}
    assert [b["text"] for b in answer if b["type"] == "text"] == [final.text]
    assert not any(b["type"] == "tool_use" for b in answer)
    assert sent[6]["content"] in ("And tomorrow?", [{"type": "text", "text": "And tomorrow?"}])
    assert [[b["type"] for b in m["content"]] for m in sent[2:5:2]] == [["tool_result"]] * 2


def test_conversation_id_header_is_accepted(sim: Sim, gateway: ServerProcess) -> None:
    conv = str(uuid.uuid4())
    before = rejections(sim)
    loop = run_loop(gateway.url, "[[sim:tools=2]] header thread", key="sk-aug-header", conversation_id=None,
                    headers={SCID: conv})
    check_loop(loop, 2)
    assert rejections(sim) == before
    assert {r.headers[SCID] for r in loop.replies} == {conv}


@pytest.mark.parametrize("with_id", [True, False], ids=["conversation_id", "body_only"])
@pytest.mark.parametrize("mangle", sorted(MANGLINGS))
def test_replayed_mangled_history(sim: Sim, gateway: ServerProcess, mangle: str, with_id: bool) -> None:
    """Clients that replay history: the replay is repaired to the recorded form; thinking stays on."""
    before = rejections(sim)
    loop = run_loop(gateway.url, f"[[sim:tools=3]] replay {mangle} {with_id}", key="sk-aug-replay",
                    conversation_id=str(uuid.uuid4()) if with_id else None, replay=MANGLINGS[mangle])
    check_loop(loop, 3)
    assert rejections(sim) == before
    assert len({r.headers[SCID] for r in loop.replies}) == 1
    sent = sim.last()["body"]
    assert len(sent["messages"]) == 7 and sent["thinking"]["type"] == "enabled"
    assert all(m["content"][0]["type"] == "thinking" for m in sent["messages"] if m["role"] == "assistant")


def test_midstream_failure_is_an_error_line(gateway: ServerProcess) -> None:
    body = {"model": MODEL, "message": "[[sim:fault=midstream]] hi", "chat_history": [],
            "thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}
    reply = chat(gateway.url, body, {"authorization": "Bearer sk-aug-fault"})
    assert reply.status == 200
    last = reply.lines[-1]
    assert last["error"]["type"] == "overloaded_error"
    assert last["stop_reason"] == 1 and "upstream error" in last["text"]
    assert all("error" not in line for line in reply.lines[:-1])


def test_errors_before_streaming(gateway: ServerProcess) -> None:
    key = {"authorization": "Bearer sk-aug-errors"}
    r = httpx.post(gateway.url + "/gateway/chat-stream", content=b"{not json", headers=key)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(gateway.url + "/gateway/chat-stream", json={"message": "hi"}, headers=key)
    assert r.status_code == 400 and "model" in r.json()["error"]["message"]
    r = httpx.post(gateway.url + "/gateway/chat-stream", json={"model": "gpt-4o", "message": "hi"},
                   headers=key)  # no GATEWAY_OPENAI_BASE_URL: no OpenAI-compatible upstream
    assert r.status_code == 400 and "no upstream configured for model gpt-4o" in r.json()["error"]["message"]
    # The upstream's own refusal keeps its status and body.
    overloaded = chat(gateway.url, {"model": MODEL, "message": "[[sim:fault=overloaded]] hi"}, key)
    assert overloaded.status == 529 and overloaded.body["error"]["type"] == "overloaded_error"

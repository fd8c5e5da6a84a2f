"""Issue 23, item 3: a client that drops the assistant tool-call message but keeps its tool results (a history
trimmer that cuts at message granularity), end to end: a real simulator, a real gateway on a real redis-server
(and the embedded store) and the official SDKs.

The conversation plays a tool loop through thinkgate, so the gateway holds every turn. The client then replays
its history without an assistant tool-call message, its results kept. The tool_result ids name exactly one
recorded turn of the identified conversation (by the SCID header, or by the tool ids themselves): the upstream
must receive that turn whole, as recorded (thinking, signature, tool_use: the same JSON), right before its
results; thinking stays on, nothing is turned into text, nothing is rejected. Where the ids name no recorded turn
(a conversation that began before the gateway) the results degrade into text as before, never a guess, and a
conversation never receives another conversation's turn.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, block_dicts, tool_results
from tests.support.e2e.logged import logged_gateway, tenant_access
from tests.support.openai.helpers import THINKING as OPENAI_THINKING
from tests.support.openai.helpers import ask, tool_messages

MODEL = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
TEXTUALIZED = "[tool result for "
SECRET = "issue-23-dropped-0123456789abcdef"


@pytest.fixture(scope="module", params=["redis", "embedded"])
def dropped_gw(request: pytest.FixtureRequest, sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    """A gateway with the JSON access log, on a real redis-server (or the embedded store)."""
    yield from logged_gateway(request, sim, gateways, SECRET)


@pytest.fixture()
def no_rejections(sim: Sim) -> Iterator[None]:
    before = dict(sim.stats()["rejections"])
    yield
    assert dict(sim.stats()["rejections"]) == before, "the simulator rejected a request"


def create(client: anthropic.Anthropic, history: list[dict[str, Any]],
           scid: str | None = None) -> tuple[anthropic.types.Message, str | None]:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=4096, tools=[WEATHER_TOOL], thinking=THINKING,  # type: ignore[list-item,arg-type]
        messages=copy.deepcopy(history), extra_headers={SCID: scid} if scid else {})  # type: ignore[arg-type]
    return raw.parse(), raw.headers.get(SCID)


def textualized(sent: dict[str, Any]) -> bool:
    return TEXTUALIZED in json.dumps(sent["messages"])


def play(client: anthropic.Anthropic, prompt: str, rounds: int) -> tuple[list[dict[str, Any]], str]:
    """``rounds`` tool rounds of a loop through the gateway: the faithful history (ending with the last round's
    results) and the conversation's SCID."""
    history: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    scid = None
    for _ in range(rounds):
        answer, scid = create(client, history, scid)
        assert answer.stop_reason == "tool_use" and answer.content[0].type == "thinking"
        history += [{"role": "assistant", "content": block_dicts(answer)},
                    {"role": "user", "content": tool_results(answer)}]
    assert scid is not None
    return history, scid


@pytest.mark.parametrize("evidence", ["header", "tool_ids"])
def test_a_dropped_tool_call_message_is_restored_before_its_results(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None, evidence: str) -> None:
    """[user, assistant(thinking, tool_use), user(tool_result)] replayed as [user, user(tool_result)]: the
    upstream receives the recorded turn, byte for byte, between the two, and thinking stays on."""
    uid = uuid.uuid4().hex[:10]
    key = f"sk-issue23-{uid}"
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=key, max_retries=0,
                             default_headers=BETA) as client:
        history, scid = play(client, f"[[sim:tools=1]] [[sim:conv=d-{uid}]] What's the weather?", 1)
        trimmed = [history[0], history[2]]  # the assistant tool-call message dropped, its results kept
        answer, again = create(client, trimmed, scid if evidence == "header" else None)
        sent = sim.last()["body"]
        line = tenant_access(dropped_gw, SECRET, key, 2)
    assert sent["messages"] == history, "the upstream must receive the recorded turn before its results"
    assert sent["messages"][1]["content"] == history[1]["content"]  # thinking, signature, tool_use as recorded
    assert sent.get("thinking") == THINKING, "thinking stays on"
    assert not textualized(sent)
    assert answer.content[0].type == "thinking" and answer.stop_reason == "end_turn"
    assert again == scid, "the answer is recorded in the same conversation"
    assert line["status"] == 200 and "tool_result_textualized" not in line["actions"], line


def test_a_dropped_turn_in_the_middle_of_a_loop_is_restored(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None) -> None:
    """Two rounds; the client drops the second round's tool-call message (no SCID header: the first round's
    tool ids identify the conversation). The next request and the one after (which replays the same trimmed
    history plus the answer) both go upstream with the turn in its place."""
    uid = uuid.uuid4().hex[:10]
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=f"sk-issue23-{uid}", max_retries=0,
                             default_headers=BETA) as client:
        history, scid = play(client, f"[[sim:tools=2]] [[sim:conv=m-{uid}]] Weather in two cities?", 2)
        trimmed = history[:3] + history[4:]
        answer, again = create(client, trimmed)
        sent = sim.last()["body"]
        assert sent["messages"] == history and sent.get("thinking") == THINKING and not textualized(sent)
        assert answer.stop_reason == "end_turn" and again == scid
        # the client goes on with the trimmed history
        trimmed += [{"role": "assistant", "content": block_dicts(answer)},
                    {"role": "user", "content": "[[sim:tools=1]] And tomorrow?"}]
        _, again = create(client, trimmed)
        sent = sim.last()["body"]
    assert sent["messages"][:5] == history and sent["messages"][5:] == trimmed[4:]
    assert again == scid


@pytest.mark.parametrize("evidence", ["header", "tool_ids"])
def test_results_that_open_the_request_bring_back_their_turn_and_its_question(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None, evidence: str) -> None:
    """A trimmer cut the question and the tool-call message and kept the results as the first message: the upstream
    receives the question (from the turn's record), the recorded turn and its results, thinking on, instead of
    the results turned into text; the loop goes on in the same conversation with the client's trimmed history."""
    uid = uuid.uuid4().hex[:10]
    key = f"sk-issue23-{uid}"
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=key, max_retries=0,
                             default_headers=BETA) as client:
        history, scid = play(client, f"[[sim:tools=2]] [[sim:conv=z-{uid}]] Weather in two cities?", 1)
        trimmed = history[2:]  # the question and the assistant tool-call message cut, the results kept
        answer, again = create(client, trimmed, scid if evidence == "header" else None)
        sent = sim.last()["body"]
        line = tenant_access(dropped_gw, SECRET, key, 2)
        assert sent["messages"] == history, "the question and the recorded turn go back before the results"
        assert sent.get("thinking") == THINKING and not textualized(sent)
        assert answer.content[0].type == "thinking" and answer.stop_reason == "tool_use" and again == scid
        # (with the SCID header and no assistant message the thread is rebuilt from the records, as for a client
        # that replays no history; with the results' tool ids alone the turn is reinstated)
        assert line["actions"].get("history_rebuilt" if evidence == "header" else "turn_reinstated") == 1, line
        # the client goes on from its trimmed history
        trimmed += [{"role": "assistant", "content": block_dicts(answer)},
                    {"role": "user", "content": tool_results(answer)}]
        final, last = create(client, trimmed)
        sent = sim.last()["body"]
    assert sent["messages"] == history + trimmed[1:] and not textualized(sent)
    assert final.content[0].type == "thinking" and final.stop_reason == "end_turn" and last == scid


def test_two_turns_merged_into_one_message_go_upstream_as_recorded(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None) -> None:
    """Two rounds; the client merges both tool-call messages into one, and both results messages into one (no SCID
    header): the upstream receives each turn as recorded, each followed by its results."""
    uid = uuid.uuid4().hex[:10]
    key = f"sk-issue23-{uid}"
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=key, max_retries=0,
                             default_headers=BETA) as client:
        history, scid = play(client, f"[[sim:tools=2]] [[sim:conv=s-{uid}]] Weather in two cities?", 2)
        merged = [history[0], {"role": "assistant", "content": history[1]["content"] + history[3]["content"]},
                  {"role": "user", "content": history[2]["content"] + history[4]["content"]}]
        answer, again = create(client, merged)
        sent = sim.last()["body"]
        line = tenant_access(dropped_gw, SECRET, key, 3)
    assert sent["messages"] == history and sent.get("thinking") == THINKING and not textualized(sent)
    assert answer.stop_reason == "end_turn" and again == scid
    assert line["actions"].get("turns_separated") == 2, line


@pytest.mark.parametrize("calls_first", [False, True], ids=["thinking-first", "call-first"])
def test_a_turn_split_into_two_messages_goes_upstream_as_one(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None, calls_first: bool) -> None:
    """The client replays the turn's thinking and text as one assistant message and its tool call as another, in
    either order (``call-first``: trailing fragments, a client that shows calls first): the upstream receives the
    turn as recorded, in one message, thinking on; the fragments never go upstream as a turn of their own."""
    uid = uuid.uuid4().hex[:10]
    key = f"sk-issue23-{uid}"
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=key, max_retries=0,
                             default_headers=BETA) as client:
        history, scid = play(client, f"[[sim:tools=1]] [[sim:conv=j-{uid}]] What's the weather?", 1)
        blocks = history[1]["content"]
        calls = {"role": "assistant", "content": [b for b in blocks if b["type"] == "tool_use"]}
        rest = {"role": "assistant", "content": [b for b in blocks if b["type"] != "tool_use"]}
        split = [history[0], *((calls, rest) if calls_first else (rest, calls)), history[2]]
        answer, again = create(client, split)
        sent = sim.last()["body"]
        line = tenant_access(dropped_gw, SECRET, key, 2)
    assert sent["messages"] == history and sent.get("thinking") == THINKING
    assert answer.content[0].type == "thinking" and answer.stop_reason == "end_turn" and again == scid
    assert line["actions"].get("turn_joined") == 1, line


def test_results_the_gateway_holds_no_turn_for_still_degrade(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None) -> None:
    """Tool results whose ids name no recorded turn (a conversation that began before the gateway, a made-up
    id) are turned into text as before: nothing is guessed."""
    uid = uuid.uuid4().hex[:10]
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=f"sk-issue23-{uid}", max_retries=0,
                             default_headers=BETA) as client:
        history, scid = play(client, f"[[sim:tools=1]] [[sim:conv=u-{uid}]] What's the weather?", 1)
        unknown = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01NotRecordedHere00000",
                                                "content": "sunny"}]}
        answer, _ = create(client, [history[0], unknown], scid)
        sent = sim.last()["body"]
    assert [m["role"] for m in sent["messages"]] == ["user", "user"]
    assert textualized(sent) and answer.content[0].type == "thinking"


def test_another_conversations_results_never_bring_its_turn(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None) -> None:
    """One tenant, two conversations: Y's request (with Y's SCID) carries results of X's tool call, its
    assistant message dropped. X's turn is not Y's: it is never inserted into Y's history."""
    uid = uuid.uuid4().hex[:10]
    with anthropic.Anthropic(base_url=dropped_gw.url, api_key=f"sk-issue23-{uid}", max_retries=0,
                             default_headers=BETA) as client:
        x_history, _ = play(client, f"[[sim:tools=1]] [[sim:conv=x-{uid}]] What's the weather?", 1)
        y_history, y_scid = play(client, f"[[sim:tools=1]] [[sim:conv=y-{uid}]] What's the weather?", 1)
        create(client, [y_history[0], x_history[2]], y_scid)
        sent = sim.last()["body"]
    assert x_history[1]["content"][0]["signature"] not in json.dumps(sent)
    assert [m["role"] for m in sent["messages"]] == ["user", "user"] and textualized(sent)


def test_an_openai_client_that_drops_the_tool_calls_message_keeps_its_turn(
        sim: Sim, dropped_gw: ServerProcess, no_rejections: None) -> None:
    """The OpenAI chat surface: the assistant message with ``tool_calls`` dropped, its ``tool`` messages kept
    (no SCID header: the tool_call ids identify the conversation). The upstream receives the recorded turn
    (thinking, signature, tool_use: as recorded) before the results."""
    uid = uuid.uuid4().hex[:10]
    with openai.OpenAI(base_url=dropped_gw.url + "/v1", api_key=f"sk-issue23-oa-{uid}", max_retries=0) as client:
        history: list[dict[str, Any]] = [
            {"role": "user", "content": f"[[sim:tools=1]] [[sim:conv=o-{uid}]] What's the weather?"}]
        first = ask(client, history, stream=False, max_tokens=4096, extra_body=OPENAI_THINKING)
        assert first.finish_reason == "tool_calls" and first.signed()
        faithful = [*history, first.message(), *tool_messages(first)]
        final = ask(client, faithful, stream=False, max_tokens=4096, extra_body=OPENAI_THINKING)
        recorded = sim.last()["body"]["messages"]  # the faithful replay as it went upstream
        assert [m["role"] for m in recorded] == ["user", "assistant", "user"]
        trimmed = [*history, *tool_messages(first)]
        again = ask(client, trimmed, stream=False, max_tokens=4096, extra_body=OPENAI_THINKING)
        sent = sim.last()["body"]
    assert sent["messages"] == recorded, "the recorded turn goes upstream before its results"
    assert sent["messages"][1]["content"][0]["type"] == "thinking"
    assert sent.get("thinking") == OPENAI_THINKING["thinking"] and not textualized(sent)
    assert final.finish_reason == again.finish_reason == "stop"

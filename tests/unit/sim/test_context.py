"""Context management and server-side compaction in the simulator (docs/upstream-rules.md, "Context management
and compaction"): the edits' betas and 400s, ``clear_thinking_20251015`` clearing old thinking server-side (the
``applied_edits`` report), ``compact_20260112`` answering with a signed ``compaction`` block (JSON and SSE,
paused or not), verifying it on replay, and on a bound model the prefix starting at the latest compaction block."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.support.sim.helpers import (
    BOUND_400,
    BOUND_MODEL,
    NEEDS_BETA,
    WEATHER_TOOL,
    answer,
    events_of,
    history,
    rejection,
    request,
    tool_results,
)
from thinkgate_sim.context import COMPACT_BETA, CONTEXT_BETA, MSG_CLEAR_NEEDS_THINKING, MSG_EXTRA

CLEAR = {"context_management": {"edits": [{"type": "clear_thinking_20251015",
                                           "keep": {"type": "thinking_turns", "value": 1}}]}}
COMPACT = {"context_management": {"edits": [{"type": "compact_20260112",
                                             "trigger": {"type": "input_tokens", "value": 50_000}}]}}
PAD = "The quick brown fox jumps over the lazy dog. " * 4800  # about 54,000 tokens at 4 bytes a token


def compacting(model: str = "claude-sonnet-4-6", *, pause: bool = False, stream: bool = False) -> dict[str, Any]:
    body = request(f"Refactor this module [[sim:tools=2]]\n{PAD}", thinking="adaptive", stream=stream,
                   model=model, tools=[WEATHER_TOOL], **copy.deepcopy(COMPACT))
    if pause:
        body["context_management"]["edits"][0]["pause_after_compaction"] = True
    return body


def beta(*names: str) -> dict[str, str]:
    return {"anthropic-beta": ",".join(names)}


async def test_context_management_needs_its_beta(client: httpx.AsyncClient) -> None:
    body = request("hi", thinking="adaptive", model="claude-sonnet-4-6", **CLEAR)
    assert await rejection(client, body) == (400, "invalid_request_error", MSG_EXTRA)
    assert await rejection(client, compacting(), beta(CONTEXT_BETA)) == (400, "invalid_request_error", MSG_EXTRA)


async def test_clear_thinking_needs_thinking_on(client: httpx.AsyncClient) -> None:
    body = request("hi", thinking="disabled", model="claude-sonnet-4-6", **CLEAR)
    assert await rejection(client, body, beta(CONTEXT_BETA)) == (400, "invalid_request_error",
                                                                 MSG_CLEAR_NEEDS_THINKING)


async def test_clear_thinking_reports_the_turns_it_cleared(client: httpx.AsyncClient) -> None:
    body = request("Look around [[sim:tools=3]]", thinking="adaptive", model="claude-sonnet-4-6",
                   tools=[WEATHER_TOOL], **CLEAR)
    first = await answer(client, body, beta(CONTEXT_BETA))
    assert first["context_management"] == {"applied_edits": []}
    body = await history(client, body, 3, beta(CONTEXT_BETA))
    reply = await answer(client, body, beta(CONTEXT_BETA))
    [edit] = reply["context_management"]["applied_edits"]
    assert edit["type"] == "clear_thinking_20251015" and edit["cleared_thinking_turns"] == 2
    assert edit["cleared_input_tokens"] > 0
    # a cleared turn's thinking omitted by the client (what the clearing does anyway) is accepted, but not
    # the loop opener's (rule 9 reads the request as sent)
    body["messages"][3]["content"] = [b for b in body["messages"][3]["content"] if b["type"] != "thinking"]
    again = await answer(client, body, beta(CONTEXT_BETA))
    assert again["context_management"]["applied_edits"][0]["cleared_thinking_turns"] == 1


async def test_trigger_below_the_minimum_is_a_400(client: httpx.AsyncClient) -> None:
    body = compacting()
    body["context_management"]["edits"][0]["trigger"]["value"] = 1000
    status, _, message = await rejection(client, body, beta(COMPACT_BETA))
    assert status == 400 and message.endswith("Input should be greater than or equal to 50000")


async def test_applied_edits_come_with_the_final_message_delta_when_streamed(client: httpx.AsyncClient) -> None:
    body = request("Look around [[sim:tools=1]]", thinking="adaptive", model="claude-sonnet-4-6", stream=True,
                   tools=[WEATHER_TOOL], **CLEAR)
    resp = await client.post("/v1/messages", json=body, headers={"x-api-key": "k", "anthropic-beta": CONTEXT_BETA})
    events = events_of(resp.content)
    assert "context_management" not in events[0][1]["message"]
    [delta] = [data for name, data in events if name == "message_delta"]
    assert delta["context_management"] == {"applied_edits": []}


@pytest.mark.parametrize("stream", [False, True])
async def test_compaction_block_comes_first_signed_and_round_trips(client: httpx.AsyncClient, stream: bool) -> None:
    body = compacting(stream=stream)
    reply = await answer(client, body, beta(COMPACT_BETA))
    block = reply["content"][0]
    assert set(block) == {"type", "content", "signature"} and block["type"] == "compaction"
    assert "\r\n" in block["content"] and block["content"].endswith("</summary>\n")
    assert [b["type"] for b in reply["content"][1:]] == ["thinking", "text", "tool_use"]
    body["messages"] += [{"role": "assistant", "content": reply["content"]}, tool_results(reply)]
    nxt = await answer(client, body, beta(COMPACT_BETA))  # replayed verbatim: accepted, not compacted again
    assert [b["type"] for b in nxt["content"]] == ["thinking", "text", "tool_use"]
    tampered = copy.deepcopy(body)
    tampered["messages"][1]["content"][0]["content"] = block["content"].replace("\r\n", "\n")
    assert await rejection(client, tampered, beta(COMPACT_BETA)) == (
        400, "invalid_request_error", "messages.1.content.0: Invalid `signature` in `compaction` block")
    failed = copy.deepcopy(body)  # a failed compaction (content null) is a no-op
    failed["messages"][1]["content"][0] = {"type": "compaction", "content": None}
    await answer(client, failed, beta(COMPACT_BETA))


async def test_pause_after_compaction_answers_the_block_alone(client: httpx.AsyncClient) -> None:
    reply = await answer(client, compacting(pause=True), beta(COMPACT_BETA))
    assert reply["stop_reason"] == "compaction"
    assert [b["type"] for b in reply["content"]] == ["compaction"]


async def test_bound_model_prefix_starts_at_the_compaction_block(client: httpx.AsyncClient) -> None:
    body = compacting(BOUND_MODEL)
    reply = await answer(client, body, beta(COMPACT_BETA))
    body["messages"] += [{"role": "assistant", "content": reply["content"]}, tool_results(reply)]
    await answer(client, body, beta(COMPACT_BETA))
    dropped = copy.deepcopy(body)  # a client that drops the compaction block moves the thinking's prefix
    del dropped["messages"][1]["content"][0]
    assert await rejection(client, dropped, beta(COMPACT_BETA)) == (
        400, "invalid_request_error", BOUND_400.format(i=1, j=0) + NEEDS_BETA)
    # the messages before the compaction block are not part of the prefix: a client may drop them
    trimmed = copy.deepcopy(body)
    trimmed["messages"][0]["content"] = "Refactor this module [[sim:tools=2]]"
    await answer(client, trimmed, beta(COMPACT_BETA))


async def test_clear_tool_uses_reports_the_results_it_cleared(client: httpx.AsyncClient) -> None:
    edits = {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 3},
                        "keep": {"type": "tool_uses", "value": 1}}]}
    body = request("Look around [[sim:tools=3]]", thinking="adaptive", model="claude-sonnet-4-6",
                   tools=[WEATHER_TOOL], context_management=edits)
    body = await history(client, body, 2, beta(CONTEXT_BETA))
    assert (await answer(client, body, beta(CONTEXT_BETA)))["context_management"] == {"applied_edits": []}
    body = await history(client, body, 1, beta(CONTEXT_BETA))
    [edit] = (await answer(client, body, beta(CONTEXT_BETA)))["context_management"]["applied_edits"]
    assert edit["type"] == "clear_tool_uses_20250919" and edit["cleared_tool_uses"] == 2

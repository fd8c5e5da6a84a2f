"""Mid-conversation ``role: "system"`` messages and ``tool_addition`` / ``tool_removal`` blocks on the simulator
(protocols.md 1.9; docs/upstream-rules.md rule 107): they keep every earlier thinking block's prefix, the tools they
add or remove are what the model is offered, and malformed ones get a 400."""

from __future__ import annotations

import copy
from typing import Any

import httpx

from tests.support.sim.helpers import (
    BOUND_400,
    BOUND_MODEL,
    CLOCK_TOOL,
    NEEDS_BETA,
    WEATHER_TOOL,
    answer,
    history,
    rejection,
    tool_results,
)
from thinkgate_sim.system_messages import INLINE_TOOLS_BETA, TOOL_CHANGES_BETA, check, offered

DEFERRED_CLOCK = {**CLOCK_TOOL, "defer_loading": True}
TOOL_BETA = {"anthropic-beta": TOOL_CHANGES_BETA}


def bound(text: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": BOUND_MODEL, "max_tokens": 4096, "thinking": {"type": "adaptive"},
                            "system": "You are a careful assistant.", "tools": [WEATHER_TOOL],
                            "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return body


def addition(name: str, kind: str = "tool_addition") -> dict[str, Any]:
    return {"type": kind, "tool": {"type": "tool_reference", "name": name}}


async def test_a_system_message_keeps_earlier_blocks_valid(client: httpx.AsyncClient) -> None:
    body = await history(client, bound("q [[sim:tools=3]]"), 1)
    changed = copy.deepcopy(body)
    changed["system"] = "You are a careful assistant. It is now 12:01."
    assert (await rejection(client, changed))[0] == 400  # editing the top-level system breaks the binding
    body["messages"].append({"role": "system", "content": "It is now 12:01."})
    reply = await answer(client, body)
    assert reply["content"][0]["type"] == "thinking"
    body["messages"] += [{"role": "assistant", "content": reply["content"]}, tool_results(reply)]
    assert (await answer(client, body))["content"][0]["type"] == "thinking"  # the new block is bound after it


async def test_a_tool_added_mid_conversation_keeps_earlier_blocks_valid(client: httpx.AsyncClient) -> None:
    body = await history(client, bound("q [[sim:tools=3]]", tools=[WEATHER_TOOL, DEFERRED_CLOCK]), 1, TOOL_BETA)
    body["messages"].append({"role": "system", "content": [addition("get_time")]})
    reply = await answer(client, body, TOOL_BETA)
    assert reply["content"][0]["type"] == "thinking"
    body["messages"] += [{"role": "assistant", "content": reply["content"]}, tool_results(reply)]
    assert (await answer(client, body, TOOL_BETA))["content"][0]["type"] == "thinking"
    redefined = copy.deepcopy(body)  # once added, the deferred tool is part of the later blocks' prefix
    redefined["tools"] = [WEATHER_TOOL, {**DEFERRED_CLOCK, "description": "changed"}]
    assert (await rejection(client, redefined, TOOL_BETA))[2] == BOUND_400.format(i=4, j=0) + NEEDS_BETA
    edited = copy.deepcopy(body)  # editing ``tools`` instead still breaks the earlier blocks
    edited["tools"] = [WEATHER_TOOL, CLOCK_TOOL]
    edited["messages"] = [m for m in edited["messages"] if m["role"] != "system"]
    assert (await rejection(client, edited, TOOL_BETA))[0] == 400


async def test_the_model_calls_what_it_is_offered(client: httpx.AsyncClient) -> None:
    body = bound("q [[sim:tools=2]]", tools=[WEATHER_TOOL, DEFERRED_CLOCK],
                 messages=[{"role": "user", "content": "q [[sim:tools=2]]"},
                           {"role": "system", "content": [addition("get_weather", "tool_removal"),
                                                          addition("get_time")]}])
    reply = await answer(client, body, TOOL_BETA)
    assert [b["name"] for b in reply["content"] if b["type"] == "tool_use"] == ["get_time"]


async def test_malformed_tool_changes_are_400s(client: httpx.AsyncClient) -> None:
    base = bound("q", tools=[WEATHER_TOOL, DEFERRED_CLOCK])

    def with_system(content: Any) -> dict[str, Any]:
        return {**base, "messages": [*base["messages"], {"role": "system", "content": content}]}

    no_beta = await rejection(client, with_system([addition("get_time")]))
    assert no_beta == (400, "invalid_request_error", "messages.1.content.0: `tool_addition` blocks require the "
                       "`mid-conversation-tool-changes-2026-07-01` value in the `anthropic-beta` header.")
    unknown = await rejection(client, with_system([addition("get_stock")]), TOOL_BETA)
    assert unknown[2] == "messages.1.content.0.tool.name: Tool `get_stock` is not defined in `tools`."
    image = await rejection(client, with_system([{"type": "image", "source": {}}]), TOOL_BETA)
    assert image[2].startswith("messages.1.content.0: Input tag 'image' found using 'type' does not match")
    inline = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": CLOCK_TOOL}}
    assert (await rejection(client, with_system([inline]), TOOL_BETA))[2].endswith(
        f"require the `{INLINE_TOOLS_BETA}` value in the `anthropic-beta` header.")


def test_check_and_offered_pure() -> None:
    body = bound("q", tools=[WEATHER_TOOL, DEFERRED_CLOCK],
                 messages=[{"role": "user", "content": "q"}, {"role": "system", "content": "plain text is fine"}])
    assert check(body, frozenset()) is None
    assert [t["name"] for t in offered(body)] == ["get_weather"]  # a deferred tool waits for its addition
    body["messages"].append({"role": "system", "content": [addition("get_time"),
                                                           addition("get_weather", "tool_removal")]})
    assert check(body, frozenset({TOOL_CHANGES_BETA})) is None
    assert [t["name"] for t in offered(body)] == ["get_time"]

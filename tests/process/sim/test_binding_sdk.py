"""Clients straight to a ``thinkgate sim`` process on a bound model, through the official ``anthropic`` SDK.

IDE-style clients that rewrite their system prompt on every request, or add a tool mid-conversation,
fail with the binding 400 at their second tool round; with the beta and ``drop_block`` they complete
(``input_transformations`` says what was dropped), JSON and stream; a faithful client completes; a
conversation that switches to a model that cannot read the earlier blocks completes (dropped silently)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from tests.process_fixtures import Sim
from tests.support.sim.helpers import (
    BINDING_BETA,
    BOUND_400,
    BOUND_MODEL,
    CLOCK_TOOL,
    NEEDS_BETA,
    SYSTEM_CHANGED,
    WEATHER_TOOL,
)

BOUND, BETA, WEATHER, CLOCK = BOUND_MODEL, BINDING_BETA, WEATHER_TOOL, CLOCK_TOOL
FIRST_BOUND_400 = BOUND_400.format(i=1, j=0) + NEEDS_BETA


# one request's parameters from its number (0, 1, ...): what the client puts around the history
Shape = Callable[[int], dict[str, Any]]


def faithful(n: int) -> dict[str, Any]:
    return {"system": "You are a coding assistant.", "tools": [WEATHER, CLOCK]}


def rewrites_system(n: int) -> dict[str, Any]:
    return {"system": f"You are a coding assistant. Current time: 12:{n:02d}. Open files: main.py",
            "tools": [WEATHER, CLOCK]}


def adds_a_tool(n: int) -> dict[str, Any]:
    return {"system": "You are a coding assistant.", "tools": [WEATHER] if n == 0 else [WEATHER, CLOCK]}


def run(sim: Sim, shape: Shape, *, drop_block: bool = False, stream: bool = False,
        models: Callable[[int], str] = lambda n: BOUND) -> list[Any]:
    """Drive a 3-round tool loop; the replies in order (raises the SDK's error on a 4xx)."""
    with anthropic.Anthropic(base_url=sim.url, api_key="sk-test", max_retries=0) as client:
        return _run(client, shape, drop_block=drop_block, stream=stream, models=models)


def _run(client: anthropic.Anthropic, shape: Shape, *, drop_block: bool, stream: bool,
         models: Callable[[int], str]) -> list[Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test [[sim:tools=3]]"}]
    thinking: dict[str, Any] = {"type": "adaptive"}
    if drop_block:
        thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
    replies: list[Any] = []
    for n in range(8):
        params: dict[str, Any] = {"model": models(n), "max_tokens": 4096, "thinking": thinking,
                                  "messages": messages, **shape(n)}
        if drop_block and stream:
            with client.beta.messages.stream(betas=[BETA], **params) as s:
                reply: Any = s.get_final_message()
        elif drop_block:
            reply = client.beta.messages.create(betas=[BETA], **params)
        elif stream:
            with client.messages.stream(**params) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**params)
        replies.append(reply)
        assert reply.content[0].type == "thinking"
        if reply.stop_reason != "tool_use":
            return replies
        messages = [*messages, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                 for b in reply.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                                                 for b in reply.content if b.type == "tool_use"]}]
    raise AssertionError("the tool loop did not finish")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("shape", "message"), [(rewrites_system, FIRST_BOUND_400 + SYSTEM_CHANGED),
                                                (adds_a_tool, FIRST_BOUND_400)], ids=["system", "tools"])
def test_editing_clients_fail_at_the_second_tool_round(sim: Sim, shape: Shape, message: str, stream: bool) -> None:
    calls: list[int] = []

    def counted(n: int) -> dict[str, Any]:
        calls.append(n)
        return shape(n)

    with pytest.raises(anthropic.BadRequestError) as err:
        run(sim, counted, stream=stream)
    assert calls == [0, 1]  # the first request passes; the one after the first tool round fails
    assert err.value.status_code == 400
    assert err.value.body["error"] == {"type": "invalid_request_error", "message": message}  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("shape", [rewrites_system, adds_a_tool], ids=["system", "tools"])
def test_editing_clients_complete_with_drop_block(sim: Sim, shape: Shape, stream: bool) -> None:
    replies = run(sim, shape, drop_block=True, stream=stream)
    assert len(replies) == 4 and replies[0].input_transformations == []
    for reply in replies[1:]:
        assert reply.input_transformations, reply
        assert {(t.type, t.reason) for t in reply.input_transformations} == {
            ("thinking_dropped", "prefix_binding_mismatch")}
    # the client keeps sending the stale first block, so it and every later block go, every time
    assert [t.path for t in replies[-1].input_transformations] == [
        "messages.1.content.0", "messages.3.content.0", "messages.5.content.0"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_faithful_client_completes(sim: Sim, stream: bool) -> None:
    assert len(run(sim, faithful, stream=stream)) == 4
    replies = run(sim, faithful, drop_block=True, stream=stream)
    assert [r.input_transformations for r in replies] == [[], [], [], []]


def test_model_switch_drops_unreadable_blocks_silently(sim: Sim) -> None:
    """Fable 5.1 first, then Opus 5.5, which cannot read Fable blocks: they are dropped, no error."""
    replies = run(sim, faithful, models=lambda n: "claude-fable-5-1" if n == 0 else BOUND)
    assert [r.model for r in replies] == ["claude-fable-5-1", BOUND, BOUND, BOUND]
    replies = run(sim, faithful, drop_block=True, models=lambda n: "claude-fable-5-1" if n == 0 else BOUND)
    assert [(t.reason, t.path) for t in replies[-1].input_transformations] == [
        ("model_binding_mismatch", "messages.1.content.0")]

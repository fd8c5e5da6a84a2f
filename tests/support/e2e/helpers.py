"""Shared helpers for end-to-end tests: tool loops driven with the official SDKs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
THINKING = {"type": "enabled", "budget_tokens": 2048}

Mangle = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def block_dicts(message: anthropic.types.Message) -> list[dict[str, Any]]:
    return [b.model_dump(exclude_none=False, exclude_unset=True) for b in message.content]


@dataclass
class LoopResult:
    answers: list[anthropic.types.Message] = field(default_factory=list)
    requests: int = 0


def send(client: anthropic.Anthropic, params: dict[str, Any], *, stream: bool) -> tuple[anthropic.types.Message, Any]:
    """One ``messages`` request, streamed or not: (the answer, the response headers)."""
    if stream:
        with client.messages.stream(**params) as s:
            return s.get_final_message(), s.response.headers
    raw = client.messages.with_raw_response.create(**params)
    return raw.parse(), raw.headers


def tool_results(message: anthropic.types.Message) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": b.id, "content": f"sunny in {b.input}"}
            for b in message.content if b.type == "tool_use"]


def next_round(message: anthropic.types.Message) -> list[dict[str, Any]]:
    """What a tool loop's history gains from an answer that called tools: the answer as received, and its results."""
    return [{"role": "assistant", "content": block_dicts(message)}, {"role": "user", "content": tool_results(message)}]


def run_tool_loop(client: anthropic.Anthropic, prompt: str, *, stream: bool = False, max_rounds: int = 10,
                  mangle: Mangle | None = None, **kwargs: Any) -> LoopResult:
    """Play a tool loop to its final answer, replaying history (optionally mangled)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    result = LoopResult()
    params: dict[str, Any] = {"model": "claude-opus-4-5", "max_tokens": 4096, "tools": [WEATHER_TOOL],
                              "thinking": THINKING}
    params.update(kwargs)
    for _ in range(max_rounds):
        sent = mangle(history) if mangle else history
        if stream:
            with client.messages.stream(messages=sent, **params) as s:
                answer = s.get_final_message()
        else:
            answer = client.messages.create(messages=sent, **params)
        result.requests += 1
        result.answers.append(answer)
        if answer.stop_reason != "tool_use":
            return result
        history.append({"role": "assistant", "content": block_dicts(answer)})
        history.append({"role": "user", "content": tool_results(answer)})
    raise AssertionError("tool loop did not finish")


async def run_tool_loop_async(client: anthropic.AsyncAnthropic, prompt: str, *, stream: bool = False,
                              max_rounds: int = 10, **kwargs: Any) -> LoopResult:
    history: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    result = LoopResult()
    params: dict[str, Any] = {"model": "claude-opus-4-5", "max_tokens": 4096, "tools": [WEATHER_TOOL],
                              "thinking": THINKING}
    params.update(kwargs)
    for _ in range(max_rounds):
        if stream:
            async with client.messages.stream(messages=history, **params) as s:
                answer = await s.get_final_message()
        else:
            answer = await client.messages.create(messages=history, **params)
        result.requests += 1
        result.answers.append(answer)
        if answer.stop_reason != "tool_use":
            return result
        history.append({"role": "assistant", "content": block_dicts(answer)})
        history.append({"role": "user", "content": tool_results(answer)})
    raise AssertionError("tool loop did not finish")

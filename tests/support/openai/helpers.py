"""Helpers for the OpenAI-surface tests: answers from the official openai SDK (non-stream
and assembled from chunks), replayable history, and tool loops."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

MODEL = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
THINKING = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}

History = list[dict[str, Any]]
Mangle = Callable[[History], History]


@dataclass
class Answer:
    """One assistant answer as the client sees it (whatever the transport)."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    reasoning_content: str | None = None
    reasoning_details: list[dict[str, Any]] = field(default_factory=list)
    gateway: dict[str, Any] | None = None
    scid: str | None = None  # the X-AG-Conversation-Id response header

    def message(self) -> dict[str, Any]:
        """The assistant message a faithful client replays."""
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = copy.deepcopy(self.tool_calls)
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        if self.reasoning_details:
            out["reasoning_details"] = copy.deepcopy(self.reasoning_details)
        return out

    def signed(self) -> bool:
        """The answer carries reasoning with a signature (thinking came back)."""
        return any(d.get("type") == "reasoning.text" and d.get("signature") for d in self.reasoning_details)

    def calls(self) -> list[tuple[str, str]]:
        return [(c["function"]["name"], c["function"]["arguments"]) for c in self.tool_calls]


def from_completion(c: ChatCompletion, scid: str | None = None) -> Answer:
    msg = c.choices[0].message
    extra = msg.model_extra or {}
    return Answer(
        content=msg.content,
        tool_calls=[tc.model_dump(exclude_none=True) for tc in msg.tool_calls or []],
        finish_reason=c.choices[0].finish_reason,
        reasoning_content=extra.get("reasoning_content"),
        reasoning_details=list(extra.get("reasoning_details") or []),
        gateway=(c.model_extra or {}).get("_gateway"),
        scid=scid,
    )


def from_chunks(chunks: Iterable[ChatCompletionChunk], scid: str | None = None) -> Answer:
    """Assemble a stream the way OpenAI clients do: content and reasoning concatenate,
    tool calls and reasoning_details entries merge by index."""
    text: list[str] = []
    thoughts: list[str] = []
    details: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    gateway = None
    for chunk in chunks:
        gateway = gateway or (chunk.model_extra or {}).get("_gateway")
        for choice in chunk.choices:
            d = choice.delta
            extra = d.model_extra or {}
            if d.content:
                text.append(d.content)
            if extra.get("reasoning_content"):
                thoughts.append(extra["reasoning_content"])
            for entry in extra.get("reasoning_details") or []:
                got = details.setdefault(entry["index"], {})
                text_part = got.get("text", "") + entry.get("text", "") if "text" in entry else None
                got.update(entry)
                if text_part is not None:
                    got["text"] = text_part
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "type": "function",
                                                   "function": {"name": None, "arguments": ""}})
                if tc.id:
                    call["id"] = tc.id
                if tc.function and tc.function.name:
                    call["function"]["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    call["function"]["arguments"] += tc.function.arguments
            finish = choice.finish_reason or finish
    return Answer(
        content="".join(text) if text else None,
        tool_calls=[calls[k] for k in sorted(calls)],
        finish_reason=finish,
        reasoning_content="".join(thoughts) if thoughts else None,
        reasoning_details=[details[k] for k in sorted(details)],
        gateway=gateway,
        scid=scid,
    )


def ask(client: openai.OpenAI, messages: History, *, stream: bool, headers: dict[str, str] | None = None,
        **params: Any) -> Answer:
    """One request with the official SDK; the SCID response header is kept."""
    kwargs: dict[str, Any] = {"model": MODEL, "messages": copy.deepcopy(messages), "tools": [WEATHER_TOOL],
                              "extra_headers": headers or {}, **params}
    raw = client.chat.completions.with_raw_response.create(stream=stream, **kwargs)
    if stream:
        return from_chunks(list(raw.parse()), raw.headers.get(SCID))
    return from_completion(raw.parse(), raw.headers.get(SCID))


async def ask_async(client: openai.AsyncOpenAI, messages: History, *, stream: bool, **params: Any) -> Answer:
    kwargs: dict[str, Any] = {"model": MODEL, "messages": copy.deepcopy(messages), "tools": [WEATHER_TOOL],
                              **params}
    raw = await client.chat.completions.with_raw_response.create(stream=stream, **kwargs)
    if stream:
        return from_chunks([c async for c in raw.parse()], raw.headers.get(SCID))
    return from_completion(raw.parse(), raw.headers.get(SCID))


def tool_messages(answer: Answer) -> History:
    return [{"role": "tool", "tool_call_id": c["id"], "content": f"sunny in {c['function']['arguments']}"}
            for c in answer.tool_calls]


def run_loop(send: Callable[[History], Answer], prompt: str, *, mangle: Mangle | None = None,
             max_rounds: int = 10) -> list[Answer]:
    """Play a tool loop to its final answer; every request replays the (mangled) history."""
    history: History = [{"role": "user", "content": prompt}]
    answers: list[Answer] = []
    for _ in range(max_rounds):
        answer = send(mangle(history) if mangle else history)
        answers.append(answer)
        if answer.finish_reason != "tool_calls":
            return answers
        history.append(answer.message())
        history += tool_messages(answer)
    raise AssertionError("tool loop did not finish")

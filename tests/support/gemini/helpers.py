"""Shared helpers for the Gemini and OpenAI-compatible upstream tests: the gateway
environment that points every upstream kind at one simulator, OpenAI answers assembled
with every provider field kept, and tool loops."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import orjson

from tests.process_fixtures import Sim

GEMINI = "gemini-3-pro-preview"
OPENROUTER = "google/gemini-3-pro-preview"
OPENROUTER_CLAUDE = "anthropic/claude-sonnet-4.5"  # an Anthropic model behind OpenRouter (Anthropic's rules)
COPILOT = "copilot/gemini-3-pro-preview"
DEEPSEEK = "deepseek-reasoner"
GEMINI_COMPAT = "gemini-3-flash-preview"  # routed to Gemini's OpenAI-compatibility layer
RESPONSES = "gpt-5"  # routed to the simulator's strict OpenAI Responses profile
CLAUDE = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}

History = list[dict[str, Any]]


def gateway_env(sim: Sim, **extra: str) -> dict[str, str]:
    """Every upstream kind at the one simulator process."""
    routes = ",".join((f"google/=openrouter@{sim.url}/openrouter/api/v1",
                       f"anthropic/=openrouter@{sim.url}/openrouter/api/v1", f"copilot/=copilot@{sim.url}/copilot",
                       f"deepseek-=deepseek@{sim.url}/deepseek/v1",
                       f"{GEMINI_COMPAT}=generic@{sim.url}/v1beta/openai",
                       f"{RESPONSES}=responses@{sim.url}/openai/v1"))
    return {"GATEWAY_GEMINI_BASE_URL": sim.url, "GATEWAY_ROUTES": routes, **extra}


@dataclass
class Answer:
    message: dict[str, Any]            # the assistant message as a faithful client replays it
    finish_reason: str | None
    scid: str | None = None
    gateway: dict[str, Any] | None = None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])


def _merge_details(into: dict[int, dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        got = into.setdefault(entry.get("index", len(into)), {})
        for k, v in entry.items():
            got[k] = got[k] + v if k in ("text", "summary") and isinstance(got.get(k), str) else v


def from_stream(chunks: list[Any]) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    text: list[str] = []
    reasoning: list[str] = []
    details: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    gw = None
    for chunk in chunks:
        gw = gw or (chunk.model_extra or {}).get("_gateway")
        for choice in chunk.choices:
            d = choice.delta
            extra = dict(d.model_extra or {})
            if d.content:
                text.append(d.content)
            if extra.get("reasoning_content"):
                reasoning.append(extra.pop("reasoning_content"))
            _merge_details(details, extra.pop("reasoning_details", None) or [])
            for k, v in extra.items():
                if v is not None:
                    msg[k] = v
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "type": "function",
                                                   "function": {"name": None, "arguments": ""}})
                if tc.id:
                    call["id"] = tc.id
                if tc.function and tc.function.name:
                    call["function"]["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    call["function"]["arguments"] += tc.function.arguments
                if (tc.model_extra or {}).get("extra_content"):
                    call["extra_content"] = tc.model_extra["extra_content"]
            finish = choice.finish_reason or finish
    if text:
        msg["content"] = "".join(text)
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    if details:
        msg["reasoning_details"] = [details[k] for k in sorted(details)]
    if calls:
        msg["tool_calls"] = [calls[k] for k in sorted(calls)]
    return msg, finish, gw


def ask(client: openai.OpenAI, model: str, history: History, *, stream: bool,
        headers: dict[str, str] | None = None, **params: Any) -> Answer:
    kwargs: dict[str, Any] = {"model": model, "messages": copy.deepcopy(history), "tools": [WEATHER],
                              "extra_headers": headers or {}, **params}
    raw = client.chat.completions.with_raw_response.create(stream=stream, **kwargs)
    if stream:
        msg, finish, gw = from_stream(list(raw.parse()))
    else:
        c = raw.parse()
        msg = c.choices[0].message.model_dump(exclude_none=True)
        msg.pop("refusal", None)
        finish, gw = c.choices[0].finish_reason, (c.model_extra or {}).get("_gateway")
    return Answer(msg, finish, raw.headers.get(SCID), gw)


def tool_messages(answer: Answer) -> History:
    return [{"role": "tool", "tool_call_id": c["id"], "content": f"sunny in {c['function']['arguments']}"}
            for c in answer.tool_calls]


def run_loop(send: Callable[[History], Answer], prompt: str, *,
             mangle: Callable[[History], History] | None = None, max_rounds: int = 8,
             history: History | None = None) -> tuple[list[Answer], History]:
    history = history if history is not None else []
    history.append({"role": "user", "content": prompt})
    answers: list[Answer] = []
    for _ in range(max_rounds):
        answer = send(mangle(history) if mangle else history)
        answers.append(answer)
        history.append(answer.message)
        if answer.finish_reason != "tool_calls":
            return answers, history
        history += tool_messages(answer)
    raise AssertionError("tool loop did not finish")


def native_answer(resp: httpx.Response, stream: bool) -> dict[str, Any]:
    """The model content of a native Gemini answer, its stream's chunks joined (an error chunk raises)."""
    if not stream:
        return dict(resp.json()["candidates"][0]["content"])
    parts: list[dict[str, Any]] = []
    for line in resp.text.splitlines():
        if line.startswith("data: "):
            chunk = orjson.loads(line[6:])
            if "error" in chunk:
                raise AssertionError(f"error chunk: {chunk}")
            parts += chunk["candidates"][0]["content"].get("parts") or []
    return {"role": "model", "parts": parts}



def native_round(http: httpx.Client, url: str, model: str, *, stream: bool, contents: list[dict[str, Any]],
                 config: dict[str, Any], headers: dict[str, str]) -> tuple[dict[str, Any], str | None]:
    """One request of a native Gemini client (raw JSON, so a mangling can touch every field): the model content
    it got (an error status or error chunk raises) and the conversation id of the answer."""
    action = "streamGenerateContent?alt=sse" if stream else "generateContent"
    resp = http.post(f"{url}/v1beta/models/{model}:{action}", headers=headers, json={"contents": contents, **config})
    if resp.status_code != 200:
        raise AssertionError(f"HTTP {resp.status_code}: {resp.text[:300]}")
    return native_answer(resp, stream), resp.headers.get(SCID)


def function_responses(content: dict[str, Any]) -> dict[str, Any] | None:
    """The user content answering every function call of a model content (None: it calls none)."""
    calls = [p["functionCall"] for p in content["parts"] if "functionCall" in p]
    return {"role": "user", "parts": [
        {"functionResponse": {"name": c["name"], "response": {"weather": "sunny", "args": c["args"]}}}
        for c in calls]} if calls else None


@dataclass
class Rejections:
    sim: Sim
    before: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> Rejections:
        self.before = dict(self.sim.stats()["rejections"])
        return self

    def __exit__(self, *exc: object) -> None:
        after = self.sim.stats()["rejections"]
        assert after == self.before, f"the simulator rejected requests: {after} (before {self.before})"

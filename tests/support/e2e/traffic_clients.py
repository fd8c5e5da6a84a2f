"""The five client surfaces of the traffic matrix (``tests/support/e2e/traffic.py``), one tool-loop conversation each:
Anthropic Messages (the anthropic SDK, with the Anthropic matrix's flows), OpenAI chat completions and OpenAI
Responses (the openai SDK; the Responses loop and its replay styles are ``tests/support/responses/helpers.py``'s),
native
Gemini and Augment chat-stream (raw JSON, so a mangling can touch every field). Each plays its ``Conv`` to its
final answer or its first failure (which raises: the run keeps it), every request on the other replica than the one
before, the client's history mangled by its case on every request."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import httpx
import openai

from tests.support.augment.client import TOOL_DEFINITIONS, chat, exchange, tool_result_nodes
from tests.support.cloud.helpers import BEDROCK_CLAUDE, CONVERSE_CLAUDE, VERTEX_CLAUDE
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, next_round, send
from tests.support.gemini.helpers import CLAUDE, Answer, ask, function_responses, native_round, run_loop
from tests.support.manglings import augment as augment_manglings
from tests.support.manglings import gemini as gemini_manglings
from tests.support.manglings import openai as openai_manglings
from tests.support.manglings.anthropic import CASE_THINKING, PARALLEL, REDACTED, as_sent
from tests.support.responses import helpers as responses_helpers

Surface = Literal["anthropic", "openai", "responses", "gemini", "augment"]
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
ROUNDS = 2
MAX_REQUESTS = ROUNDS + 3
REQUEST_TIMEOUT_S = 60
GEMINI_CONFIG = {"tools": [{"functionDeclarations": [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}


@dataclass(frozen=True)
class Cell:
    """One client surface in front of one upstream, and the manglings its client plays."""

    surface: Surface
    upstream: str  # anthropic | gemini | openrouter (Gemini) | openrouter-claude | copilot | deepseek | generic
    model: str
    cases: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.surface}->{self.upstream}"


@dataclass
class Conv:
    """One conversation: where it is played, how its client mangles, and what happened to it."""

    index: int
    name: str  # the ``[[sim:conv=NAME]]`` marker
    cell: Cell
    case: str
    stream: bool
    header: bool  # sends the conversation id back (Augment: a ``conversation_id`` in the body)
    key: str      # the tenant's API key
    requests: int = 0
    scids: list[str | None] = field(default_factory=list)
    completed: bool = False
    refused: str | None = None  # the gateway's refusal of a replay that needs records there are none of (``REFUSALS``)
    errors: list[str] = field(default_factory=list)

    @property
    def prompt(self) -> str:
        parallel = " [[sim:parallel=3]]" if self.case in PARALLEL else \
            "" if self.cell.surface == "anthropic" else " [[sim:parallel=2]]"
        redacted = " [[sim:redacted]]" if self.cell.surface == "anthropic" and self.case in REDACTED else ""
        return (f"[[sim:tools={ROUNDS}]]{parallel}{redacted} [[sim:conv={self.name}]] weather? "
                f"{self.cell.id} case {self.case}")

    def url(self, urls: Sequence[str]) -> str:
        """The replica of the next request: the other one than the last."""
        return urls[(self.index + self.requests) % len(urls)]

    def header_scid(self) -> dict[str, str]:
        last = self.scids[-1] if self.scids else None
        return {SCID: last} if self.header and last else {}


def play_anthropic(conv: Conv, urls: Sequence[str]) -> None:
    clients = {u: anthropic.Anthropic(base_url=u, api_key=conv.key, max_retries=0, timeout=REQUEST_TIMEOUT_S,
                                      default_headers=BETA) for u in urls}
    case = conv.case
    base = CASE_THINKING.get(case, THINKING)
    history: list[dict[str, Any]] = [{"role": "user", "content": conv.prompt}]

    def ask_(thinking: dict[str, Any] | None) -> anthropic.types.Message:
        params: dict[str, Any] = {"model": conv.cell.model, "max_tokens": 4096, "tools": [WEATHER_TOOL],
                                  "messages": as_sent(case, history), "extra_headers": conv.header_scid()}
        if thinking is not None:
            params["thinking"] = thinking
        client = clients[conv.url(urls)]
        conv.requests += 1
        answer, headers = send(client, params, stream=conv.stream)
        conv.scids.append(headers.get(SCID))
        return answer

    try:
        for step in range(MAX_REQUESTS):  # the flows as the acceptance matrix plays them (``FLOWS``)
            thinking: dict[str, Any] | None = base
            if (case == "thinking_off_mid_loop" and step >= 1) or (case == "thinking_on_mid_loop" and step == 0):
                thinking = None
            answer = ask_(thinking)
            if case == "retry_twice":
                answer = ask_(thinking)
            if case == "rewind" and step == ROUNDS - 1:
                history = history[:-2]  # drop the last assistant turn and its results, ask again
                answer = ask_(thinking)
            if answer.stop_reason != "tool_use":
                conv.completed = True
                return
            history += next_round(answer)
    finally:
        for c in clients.values():
            c.close()


# the Claude models a chat client asks for thinking as Anthropic's parameter (an OpenRouter Claude: reasoning_effort)
ANTHROPIC_WIRE = frozenset({CLAUDE, BEDROCK_CLAUDE, CONVERSE_CLAUDE, VERTEX_CLAUDE})


def play_openai(conv: Conv, urls: Sequence[str]) -> None:
    clients = {u: openai.OpenAI(base_url=u + "/v1", api_key=conv.key, max_retries=0, timeout=REQUEST_TIMEOUT_S,
                                default_headers=BETA) for u in urls}
    params: dict[str, Any] = {"extra_body": {"thinking": THINKING}} if conv.cell.model in ANTHROPIC_WIRE \
        else {"reasoning_effort": "low"}

    def send(history: list[dict[str, Any]]) -> Answer:
        client, headers = clients[conv.url(urls)], conv.header_scid()
        conv.requests += 1
        answer = ask(client, conv.cell.model, history, stream=conv.stream, headers=headers, **params)
        conv.scids.append(answer.scid)
        return answer

    try:
        run_loop(send, conv.prompt, mangle=openai_manglings.MANGLINGS[conv.case], max_rounds=MAX_REQUESTS)
        conv.completed = True
    finally:
        for c in clients.values():
            c.close()


# The Responses replay styles that name items or responses only the gateway's records hold (``store: false`` bare
# references; ``previous_response_id`` alone): without records (the state machine off, the store down) the gateway
# cannot serve them and refuses them before any upstream request, in the OpenAI envelope: (status, message start).
_NOT_PERSISTED = "Items are not persisted when `store` is set to false."
REFUSALS: dict[str, tuple[tuple[int, str], ...]] = {
    "references": ((404, "Item with id 'rs_"), (503, "the conversation store is unavailable")),
    "previous": ((400, "Previous response with id 'resp_"), (503, "the conversation store is unavailable"))}


def _refusal(case: str, e: openai.APIStatusError) -> str | None:
    message = str((e.body or {}).get("message", "")) if isinstance(e.body, dict) else ""
    for status, start in REFUSALS.get(case, ()):
        if e.status_code == status and message.startswith(start) and (status != 404 or _NOT_PERSISTED in message):
            return f"{status} {message}"
    return None


def play_responses(conv: Conv, urls: Sequence[str]) -> None:
    """``client.responses.create`` loops (``responses_helpers.run_loop``): the case is how the client replays
    (``MANGLES``: the output items as received, without reasoning items, without ``encrypted_content``, as bare item
    references, ``store: false``; or ``previous``: ``previous_response_id`` alone, ``store: true``). The clients are
    ordered so that the loop's alternation starts on ``conv.url``'s replica."""
    start = conv.url(urls)
    ordered = [*urls[urls.index(start):], *urls[:urls.index(start)]]
    clients = [openai.OpenAI(base_url=u + "/v1", api_key=conv.key, max_retries=0, timeout=REQUEST_TIMEOUT_S,
                             default_headers=BETA) for u in ordered]

    def count() -> None:
        conv.requests += 1

    try:
        turns = responses_helpers.run_loop(clients, conv.cell.model, conv.prompt, stream=conv.stream,
                                           mangle=conv.case, rounds=MAX_REQUESTS, header=conv.header, before=count)
    except openai.APIStatusError as e:
        if (refused := _refusal(conv.case, e)) is None:
            raise
        conv.refused = refused
        return
    finally:
        for c in clients:
            c.close()
    conv.scids += [t.scid for t in turns]
    last = turns[-1].response
    conv.completed = not turns[-1].calls and last.get("status") == "completed"
    if not conv.completed:
        raise RuntimeError(f"unfinished after {len(turns)} requests: status {last.get('status')}")


def play_gemini(conv: Conv, urls: Sequence[str]) -> None:
    mangle = gemini_manglings.MANGLINGS[conv.case]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": conv.prompt}]}]
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
        for _ in range(MAX_REQUESTS):
            url = conv.url(urls)
            conv.requests += 1
            content, scid = native_round(http, url, conv.cell.model, stream=conv.stream, config=GEMINI_CONFIG,
                                         contents=mangle(contents), headers={"x-goog-api-key": conv.key,
                                                                             **conv.header_scid()})
            conv.scids.append(scid)
            if not (responses := function_responses(content)):
                conv.completed = True
                return
            contents += [content, responses]


def play_augment(conv: Conv, urls: Sequence[str]) -> None:
    server_side = conv.case == augment_manglings.SERVER_SIDE_STATE
    replay = None if server_side else augment_manglings.MANGLINGS[conv.case]
    # A client that replays nothing names its thread; one that replays may or may not.
    conversation_id = str(uuid.uuid4()) if server_side or conv.header else None
    headers = {"authorization": f"Bearer {conv.key}", **BETA}
    history: list[dict[str, Any]] = []
    message, nodes = conv.prompt, list[dict[str, Any]]()
    for _ in range(MAX_REQUESTS):
        body: dict[str, Any] = {"model": conv.cell.model, "message": message, "nodes": nodes,
                                "chat_history": replay(history) if replay else [],
                                "tool_definitions": TOOL_DEFINITIONS, "thinking": THINKING, "max_tokens": 4096,
                                "feature_detection_flags": {"support_tool_use_start": True}}
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        conv.requests += 1
        reply = chat(conv.url(urls), body, headers)
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status}: {str(reply.body)[:300]}")
        if reply.lines and "error" in reply.lines[-1]:
            raise RuntimeError(f"error line: {str(reply.lines[-1]['error'])[:300]}")
        conv.scids.append(reply.headers.get(SCID))
        history.append(exchange(message, nodes, reply))
        if reply.stop_reason != 3:
            conv.completed = True
            return
        message, nodes = "", tool_result_nodes(reply)


PLAY: dict[Surface, Callable[[Conv, Sequence[str]], None]] = {
    "anthropic": play_anthropic, "openai": play_openai, "responses": play_responses, "gemini": play_gemini,
    "augment": play_augment}

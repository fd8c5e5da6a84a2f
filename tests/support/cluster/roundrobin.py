"""A round-robin client over gateway replicas, and tool-loop conversations driven through it.

Every request of every conversation goes to the next replica (one shared cursor), so consecutive
turns of one conversation are served by different processes and only the shared Redis connects
them. A request that fails in transport (refused connection, a stream cut before ``message_stop``)
or with a gateway 500 is sent again, unchanged, to the next replica (and counted in ``failures``):
what a retrying client behind a load balancer does.

The client drops every thinking block from the history it replays (a Cursor-like client), so a
turn can only start with thinking again if the serving replica restored the turns another replica
recorded; with the interleaved-thinking beta the simulator starts every answer with thinking when
the request had thinking on.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import importlib.util
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anthropic

from tests.process_fixtures import ServerProcess
from tests.support.e2e.helpers import WEATHER_TOOL, block_dicts, tool_results
from tests.support.manglings.anthropic import mangle_assistants

MODEL = "claude-opus-4-5"
KEY = "sk-ant-cluster-test"
SECRET = "cluster-test-secret-0123456789ab"
THINKING = {"type": "enabled", "budget_tokens": 2048}
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
SCID = "x-ag-conversation-id"
MANGLING = "drop_thinking"
# A stream cut mid-body surfaces as the HTTP library's own error (httpx, or httpx2 in recent SDKs).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    anthropic.APIConnectionError, anthropic.APITimeoutError,
    *(importlib.import_module(m).TransportError for m in ("httpx", "httpx2") if importlib.util.find_spec(m)),
)


class CutStream(Exception):
    """The stream ended without ``message_stop`` (the SDK would return a partial message)."""


class RoundRobin:
    def __init__(self, replicas: list[ServerProcess], *, timeout: float = 20.0) -> None:
        self.replicas = replicas
        self.clients = [anthropic.AsyncAnthropic(base_url=r.url, api_key=KEY, max_retries=0, timeout=timeout,
                                                 default_headers=BETA) for r in replicas]
        self.cursor = 0
        self.served: Counter[int] = Counter()    # replica index -> answers
        self.failed: Counter[int] = Counter()    # replica index -> transport failures
        self.failures: list[str] = []

    def next(self) -> tuple[int, anthropic.AsyncAnthropic]:
        i = self.cursor % len(self.clients)
        self.cursor += 1
        return i, self.clients[i]

    def after(self, i: int) -> tuple[int, anthropic.AsyncAnthropic]:
        """The replica after ``i``: where a retry goes, so a dead replica is never tried twice in a row
        (with the shared cursor, concurrent retries could land one conversation on it every time)."""
        j = (i + 1) % len(self.clients)
        return j, self.clients[j]

    async def close(self) -> None:
        for c in self.clients:
            await c.close()


@dataclass
class Conversation:
    index: int
    stream: bool
    prompt_extra: str = ""
    rounds: int = 3
    history: list[dict[str, Any]] = field(default_factory=list)
    answers: list[anthropic.types.Message] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)  # who served each answer
    scids: list[str] = field(default_factory=list)
    retries: int = 0

    def __post_init__(self) -> None:
        prompt = f"[[sim:tools={self.rounds}]] {self.prompt_extra}weather in three cities? conversation {self.index}"
        self.history = [{"role": "user", "content": prompt.strip()}]

    @property
    def scid(self) -> str | None:
        return self.scids[-1] if self.scids else None

    @property
    def finished(self) -> bool:
        return bool(self.answers) and self.answers[-1].stop_reason == "end_turn"

    def thinking_starts(self) -> list[str | None]:
        return [a.content[0].type if a.content else None for a in self.answers]


async def _send(client: anthropic.AsyncAnthropic, conv: Conversation) -> tuple[anthropic.types.Message, str]:
    params: dict[str, Any] = {
        "model": MODEL, "max_tokens": 4096, "tools": [WEATHER_TOOL], "thinking": THINKING,
        "messages": mangle_assistants(copy.deepcopy(conv.history), MANGLING),
        "extra_headers": {SCID: conv.scid} if conv.scid else {},
    }
    if conv.stream:
        async with client.messages.stream(**params) as s:
            events = [e.type async for e in s]
            if not events or events[-1] != "message_stop":
                raise CutStream(f"stream ended after {events[-1:]} without message_stop")
            answer = await s.get_final_message()
            headers = s.response.headers
    else:
        raw = await client.messages.with_raw_response.create(**params)
        answer, headers = await raw.parse(), raw.headers
    return answer, headers[SCID]


async def step(rr: RoundRobin, conv: Conversation, *, attempts: int = 8) -> anthropic.types.Message:
    """One turn: send (to the next replica; on a transport failure, again to the one after)."""
    i, client = rr.next()
    for _ in range(attempts):
        try:
            answer, scid = await _send(client, conv)
        except (*TRANSPORT_ERRORS, CutStream, anthropic.InternalServerError) as e:  # 500: the gateway's own
            rr.failed[i] += 1
            rr.failures.append(f"conversation {conv.index} on replica {i}: {type(e).__name__}")
            conv.retries += 1
            i, client = rr.after(i)
            continue
        rr.served[i] += 1
        conv.answers.append(answer)
        conv.replicas.append(i)
        conv.scids.append(scid)
        if answer.stop_reason == "tool_use":
            conv.history.append({"role": "assistant", "content": block_dicts(answer)})
            conv.history.append({"role": "user", "content": tool_results(answer)})
        return answer
    raise AssertionError(f"conversation {conv.index}: no replica answered in {attempts} attempts: {rr.failures}")


async def play(rr: RoundRobin, conv: Conversation, max_turns: int = 10) -> Conversation:
    while not conv.finished:
        assert len(conv.answers) < max_turns, f"conversation {conv.index} did not finish"
        await step(rr, conv)
    return conv


async def play_all(rr: RoundRobin, convs: list[Conversation]) -> list[Conversation]:
    return list(await asyncio.gather(*(play(rr, c) for c in convs)))

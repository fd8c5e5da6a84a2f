"""The state machine's acceptance matrix, with the official anthropic SDK.

Every request of a conversation alternates between two real gateway processes that
share one real redis-server, in front of the strict simulator. Each mangling is
applied to every replayed turn; stream and non-stream; with and without the SCID
header. The simulator must reject nothing, and with records present thinking must
stay on for every turn (the interleaved beta makes every simulator answer start
with thinking whenever thinking was enabled for that request).
Then the same matrix with the records gone (store flushed before every request) and
with Redis stopped: still zero rejections.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from tests.e2e.helpers import WEATHER_TOOL, block_dicts, tool_results
from tests.manglings import HISTORY_MANGLINGS, MESSAGE_MANGLINGS, mangle_assistants
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port
from tests.redis_fixtures import RedisServer

MODEL = "claude-opus-4-5"
THINKING = {"type": "enabled", "budget_tokens": 2048}
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
SCID = "x-ag-conversation-id"

# Flows that are not a per-turn mangling of history.
FLOWS = ["thinking_off_mid_loop", "thinking_on_mid_loop", "retry_twice", "rewind", "edit_earlier_user"]
CASES = sorted(MESSAGE_MANGLINGS) + sorted(HISTORY_MANGLINGS) + FLOWS
# Flows where thinking legitimately cannot be on for every turn.
NO_KEEP_CHECK = {"thinking_off_mid_loop", "thinking_on_mid_loop"}


@dataclass
class Pair:
    a: ServerProcess
    b: ServerProcess
    redis: RedisServer | None


@pytest.fixture(scope="module")
def pair(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Pair:
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "matrix-secret",
           "GATEWAY_STORE_TIMEOUT_MS": "500"}
    return Pair(gateways.start(sim.url, env), gateways.start(sim.url, env), redis_server)


@pytest.fixture(scope="module")
def pair_without_redis(sim: Sim, gateways: GatewayFactory) -> Pair:
    env = {"GATEWAY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "GATEWAY_SECRET": "matrix-secret"}
    return Pair(gateways.start(sim.url, env), gateways.start(sim.url, env), None)


class Loop:
    """A conversation whose consecutive requests alternate between two gateways."""

    def __init__(self, pair: Pair, *, stream: bool, header: bool, flush_each: bool = False) -> None:
        self.clients = [anthropic.Anthropic(base_url=g.url, api_key="sk-matrix", max_retries=0,
                                            default_headers=BETA) for g in (pair.a, pair.b)]
        self.pair, self.stream, self.header, self.flush_each = pair, stream, header, flush_each
        self.n = 0
        self.scid: str | None = None
        self.answers: list[anthropic.types.Message] = []

    def send(self, messages: list[dict[str, Any]], thinking: dict[str, Any] | None = THINKING
             ) -> anthropic.types.Message:
        client = self.clients[self.n % 2]
        self.n += 1
        if self.flush_each and self.pair.redis is not None:
            self.pair.redis.flush()
        extra = {SCID: self.scid} if (self.header and self.scid) else {}
        params: dict[str, Any] = {"model": MODEL, "max_tokens": 4096, "tools": [WEATHER_TOOL],
                                  "messages": copy.deepcopy(messages), "extra_headers": extra}
        if thinking is not None:
            params["thinking"] = thinking
        if self.stream:
            with client.messages.stream(**params) as s:
                answer = s.get_final_message()
                headers = s.response.headers
        else:
            raw = client.messages.with_raw_response.create(**params)
            answer, headers = raw.parse(), raw.headers
        assert headers.get(SCID), "every response carries the conversation id"
        self.scid = headers[SCID]
        self.answers.append(answer)
        return answer

    def close(self) -> None:
        for c in self.clients:
            c.close()


def play(loop: Loop, case: str, rounds: int = 3) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools={rounds}]] weather? case {case}"}]

    def mangled(h: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if case in MESSAGE_MANGLINGS:
            return mangle_assistants(h, case)
        if case in HISTORY_MANGLINGS:
            return HISTORY_MANGLINGS[case](h)
        if case == "edit_earlier_user" and len(h) > 3:
            h = copy.deepcopy(h)
            h[0]["content"] = h[0]["content"] + " (edited: and in Madrid)"
        return h

    step = 0
    while True:
        thinking: dict[str, Any] | None = THINKING
        if case == "thinking_off_mid_loop" and step >= 1:
            thinking = None
        if case == "thinking_on_mid_loop":
            thinking = None if step == 0 else THINKING
        answer = loop.send(mangled(history), thinking)
        if case == "retry_twice":
            answer = loop.send(mangled(history), thinking)
        if case == "rewind" and step == 2:
            history = history[:-2]  # drop the last assistant turn and its results, ask again
            answer = loop.send(mangled(history), thinking)
        step += 1
        if answer.stop_reason != "tool_use":
            return
        assert step < 10, "tool loop did not finish"
        history.append({"role": "assistant", "content": block_dicts(answer)})
        history.append({"role": "user", "content": tool_results(answer)})


@pytest.fixture()
def rejections(sim: Sim) -> Iterator[None]:
    before = sum(sim.stats()["rejections"].values())
    yield
    assert sum(sim.stats()["rejections"].values()) == before, "the simulator rejected a request"


@pytest.mark.parametrize("header", [True, False], ids=["scid", "no-scid"])
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("case", CASES)
def test_matrix_with_records(pair: Pair, rejections: None, case: str, stream: bool, header: bool) -> None:
    loop = Loop(pair, stream=stream, header=header)
    try:
        play(loop, case)
    finally:
        loop.close()
    if case not in NO_KEEP_CHECK:
        starts = [a.content[0].type if a.content else None for a in loop.answers]
        assert all(s == "thinking" for s in starts), f"thinking lost: {starts}"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("case", CASES)
def test_matrix_with_records_expired(pair: Pair, rejections: None, case: str, stream: bool) -> None:
    loop = Loop(pair, stream=stream, header=True, flush_each=True)
    try:
        play(loop, case)
    finally:
        loop.close()


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("case", CASES)
def test_matrix_with_redis_stopped(pair_without_redis: Pair, rejections: None, case: str, stream: bool) -> None:
    loop = Loop(pair_without_redis, stream=stream, header=True)
    try:
        play(loop, case)
    finally:
        loop.close()

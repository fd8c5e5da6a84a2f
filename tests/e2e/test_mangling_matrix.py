"""The state machine's acceptance matrix, with the official anthropic SDK.

Every request of a conversation alternates between two real gateway processes that
share one real redis-server, in front of the strict simulator. Each mangling is
applied to every replayed turn; stream and non-stream; with and without the SCID
header. The simulator must reject nothing, and with records present thinking must
stay on for every turn (the interleaved beta makes every simulator answer start
with thinking whenever thinking was enabled for that request).
Then the same matrix with the records gone (store flushed before every request) and
with Redis stopped: still zero rejections.

By default every matrix plays each case twice, pairwise over stream and header
(``tests/pairwise.py``: both stream modes and both header modes per case); the records-gone
matrices play the two combinations the with-records matrix leaves out, so between them every
(case, stream, header) is played. The rest of each product is marked ``slow``.

Every upstream body is inspected too: a tool result is synthesised ("no result was
returned") only where the client really lost one, and real results are never turned into
text, so a repair that restores recorded tool ids without mapping the client's results
back cannot hide behind the tool-chain rules. ``drop_redacted`` conversations carry
redacted_thinking, and ``drop_empty_signed_thinking`` runs with adaptive thinking at
``display: omitted`` (empty signed thinking). Every parametrisation has its own prompt, so
text-hash matching can never land on another test's conversation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from gateway.toolchain import NO_RESULT
from tests.e2e.helpers import WEATHER_TOOL, block_dicts, send, tool_results
from tests.manglings import HISTORY_MANGLINGS, MESSAGE_MANGLINGS, mangle_assistants
from tests.pairwise import stream_header_params
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
# Cases whose conversations carry redacted_thinking after the thinking block.
REDACTED = {"drop_redacted", "faithful", "thinking_to_tag_text", "text_before_thinking"}
# Cases played with a thinking configuration of their own.
CASE_THINKING: dict[str, dict[str, Any]] = {
    "drop_empty_signed_thinking": {"type": "adaptive", "display": "omitted"},
}
# The only cases whose upstream bodies may hold a synthesised result or a result turned into text.
SYNTHESIZED_OK = {"tool_result_missing"}
TEXTUALIZED_OK = {"orphan_tool_result_at_start"}
TEXTUALIZED = "[tool result for "  # toolchain.result_as_text


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

    def __init__(self, pair: Pair, sim: Sim, *, stream: bool, header: bool, flush_each: bool = False) -> None:
        self.clients = [anthropic.Anthropic(base_url=g.url, api_key="sk-matrix", max_retries=0,
                                            default_headers=BETA) for g in (pair.a, pair.b)]
        self.pair, self.sim, self.stream, self.header, self.flush_each = pair, sim, stream, header, flush_each
        self.n = 0
        self.scid: str | None = None
        self.answers: list[anthropic.types.Message] = []
        self.upstream: list[dict[str, Any]] = []  # the body the simulator received, per request

    @property
    def label(self) -> str:
        return f"{'stream' if self.stream else 'create'}/{'scid' if self.header else 'no-scid'}" \
               f"{'/expired' if self.flush_each else ''}{'' if self.pair.redis else '/no-redis'}"

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
        answer, headers = send(client, params, stream=self.stream)
        assert headers.get(SCID), "every response carries the conversation id"
        self.scid = headers[SCID]
        self.answers.append(answer)
        self.upstream.append(self.sim.last()["body"])
        return answer

    def close(self) -> None:
        for c in self.clients:
            c.close()


def play(loop: Loop, case: str, rounds: int = 3) -> None:
    redacted = " [[sim:redacted]]" if case in REDACTED else ""
    prompt = f"[[sim:tools={rounds}]]{redacted} weather? case {case} ({loop.label})"
    history: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    base = CASE_THINKING.get(case, THINKING)

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
        thinking: dict[str, Any] | None = base
        if case == "thinking_off_mid_loop" and step >= 1:
            thinking = None
        if case == "thinking_on_mid_loop":
            thinking = None if step == 0 else base
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
    if case in REDACTED:
        assert "redacted_thinking" in [b.type for b in loop.answers[0].content], "no redacted_thinking to mangle"
    if case in CASE_THINKING:
        assert loop.answers[0].content[0].type == "thinking" and loop.answers[0].content[0].thinking == ""


def check_upstream(loop: Loop, case: str) -> None:
    """No tool result synthesised or turned into text except where the case calls for it."""
    for n, body in enumerate(loop.upstream):
        blocks = [b for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                  for b in m["content"]]
        if case not in SYNTHESIZED_OK:
            assert not [b for b in blocks if b.get("type") == "tool_result" and b.get("content") == NO_RESULT], \
                f"request {n}: a tool result was synthesised (the real one was lost)"
        if case not in TEXTUALIZED_OK:
            assert not [b for b in blocks if b.get("type") == "text" and b["text"].startswith(TEXTUALIZED)], \
                f"request {n}: a real tool result was turned into text"


@pytest.fixture()
def rejections(sim: Sim) -> Iterator[None]:
    before = sum(sim.stats()["rejections"].values())
    yield
    assert sum(sim.stats()["rejections"].values()) == before, "the simulator rejected a request"


def run_case(pair: Pair, sim: Sim, case: str, *, stream: bool, header: bool, flush_each: bool = False) -> Loop:
    loop = Loop(pair, sim, stream=stream, header=header, flush_each=flush_each)
    try:
        play(loop, case)
    finally:
        loop.close()
    check_upstream(loop, case)
    return loop


# Two (stream, header) combinations per case by default, the rest ``slow``; the records-gone matrices
# sample the two combinations the with-records matrix leaves out.
WITH_RECORDS = stream_header_params([(c,) for c in CASES], CASES)
RECORDS_GONE = stream_header_params([(c,) for c in CASES], CASES, offset=1)


@pytest.mark.parametrize(("case", "stream", "header"), WITH_RECORDS)
def test_matrix_with_records(pair: Pair, sim: Sim, rejections: None, case: str, stream: bool, header: bool) -> None:
    loop = run_case(pair, sim, case, stream=stream, header=header)
    if case not in NO_KEEP_CHECK:
        starts = [a.content[0].type if a.content else None for a in loop.answers]
        assert all(s == "thinking" for s in starts), f"thinking lost: {starts}"


@pytest.mark.parametrize(("case", "stream", "header"), RECORDS_GONE)
def test_matrix_with_records_expired(pair: Pair, sim: Sim, rejections: None, case: str, header: bool,
                                     stream: bool) -> None:
    run_case(pair, sim, case, stream=stream, header=header, flush_each=True)


@pytest.mark.parametrize(("case", "stream", "header"), RECORDS_GONE)
def test_matrix_with_redis_stopped(pair_without_redis: Pair, sim: Sim, rejections: None, case: str, header: bool,
                                   stream: bool) -> None:
    run_case(pair_without_redis, sim, case, stream=stream, header=header)

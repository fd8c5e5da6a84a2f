"""The acceptance matrix for the OpenAI dialect, with the official openai SDK.

Every request of a conversation alternates between two real gateway processes that
share one real redis-server, in front of the strict simulator (Anthropic upstream).
Each mangling is applied to every replayed turn; stream and non-stream; with and
without the SCID header. The simulator must reject nothing, and with records present
reasoning must come back on every answer (the interleaved beta makes every simulator
answer start with thinking whenever thinking was enabled for that request, so an
answer without reasoning means the gateway had to turn thinking off), and every request
the simulator received replays exactly this conversation's own thinking on every turn
(restored from the records, never another conversation's).

By default each mangling is played twice, pairwise over stream and header (``tests/pairwise.py``:
both stream modes and both header modes per mangling); the rest of the product is marked ``slow``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from tests.openai.helpers import SCID, THINKING, Answer, History, ask, run_loop
from tests.openai.manglings import MANGLINGS
from tests.pairwise import run_label, stream_header_params
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer

BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}


@dataclass
class Pair:
    a: ServerProcess
    b: ServerProcess


@pytest.fixture(scope="module")
def pair(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Pair:
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "openai-matrix-secret",
           "GATEWAY_STORE_TIMEOUT_MS": "500"}
    return Pair(gateways.start(sim.url, env), gateways.start(sim.url, env))


@dataclass
class Loop:
    """A conversation whose consecutive requests alternate between two gateways."""

    pair: Pair
    stream: bool
    header: bool
    clients: list[openai.OpenAI] = field(default_factory=list)
    sim: Sim | None = None
    scids: list[str | None] = field(default_factory=list)
    upstream_bodies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clients = [openai.OpenAI(base_url=g.url + "/v1", api_key="sk-openai-matrix", max_retries=0,
                                      default_headers=BETA) for g in (self.pair.a, self.pair.b)]

    def send(self, history: History) -> Answer:
        client = self.clients[len(self.scids) % 2]
        last = self.scids[-1] if self.scids else None
        headers = {SCID: last} if self.header and last else {}
        answer = ask(client, history, stream=self.stream, headers=headers, extra_body=THINKING)
        assert answer.scid, "every response carries the conversation id"
        self.scids.append(answer.scid)
        if self.sim is not None:  # the tests run one request at a time: the last one is ours
            self.upstream_bodies.append(self.sim.last()["body"])
        return answer

    def close(self) -> None:
        for c in self.clients:
            c.close()


@pytest.fixture()
def rejections(sim: Sim) -> Iterator[None]:
    before = sum(sim.stats()["rejections"].values())
    yield
    assert sum(sim.stats()["rejections"].values()) == before, "the simulator rejected a request"


@pytest.mark.parametrize(("case", "stream", "header"),
                         stream_header_params([(c,) for c in sorted(MANGLINGS)], sorted(MANGLINGS)))
def test_openai_matrix_with_records(pair: Pair, sim: Sim, rejections: None, case: str, stream: bool,
                                    header: bool) -> None:
    loop = Loop(pair, stream, header, sim=sim)
    try:
        answers = run_loop(loop.send, f"[[sim:tools=3]] [[sim:parallel=2]] weather? openai case {case} "
                           f"{run_label(stream, header)}",
                           mangle=MANGLINGS[case])
    finally:
        loop.close()
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 3 + ["stop"]
    assert all(a.signed() and a.reasoning_content for a in answers), \
        f"reasoning lost: {[a.signed() for a in answers]}"
    assert len(set(loop.scids)) == 1, "the whole loop is one conversation"
    own = [a.reasoning_content for a in answers]
    for n, body in enumerate(loop.upstream_bodies):
        replayed = [b.get("thinking") for m in body["messages"] if m["role"] == "assistant"
                    for b in m["content"] if isinstance(b, dict) and b.get("type") == "thinking"]
        assert replayed == own[:n], f"request {n} did not replay this conversation's thinking"

"""The harness of the acceptance matrix's OpenAI- and Gemini-surface routes
(``tests/process/e2e/test_mangling_matrix.py``),
shared with the Gemini and OpenAI-compatible suites: two real gateway processes on one real redis-server in front
of one simulator; every request of a conversation goes to the other gateway than the one before, with or without
the SCID header."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import orjson

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.gemini.helpers import SCID, Answer, History, ask, gateway_env


@dataclass
class Pair:
    a: ServerProcess
    b: ServerProcess


def start_pair(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Pair:
    env = gateway_env(sim, GATEWAY_REDIS_URL=redis_server.url, GATEWAY_SECRET="provider-matrix-secret-012345678",
                      GATEWAY_STORE_TIMEOUT_MS="500")
    return Pair(gateways.start(sim.url, env), gateways.start(sim.url, env))


@dataclass
class OpenAILoop:
    """An OpenAI-surface conversation alternating between the pair."""

    pair: Pair
    model: str
    stream: bool
    header: bool
    sim: Sim
    params: dict[str, Any] = field(default_factory=dict)
    scids: list[str | None] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clients = [openai.OpenAI(base_url=g.url + "/v1", api_key="sk-provider-matrix", max_retries=0)
                        for g in (self.pair.a, self.pair.b)]

    def send(self, history: History) -> Answer:
        client = self.clients[len(self.scids) % 2]
        last = self.scids[-1] if self.scids else None
        headers = {SCID: last} if self.header and last else {}
        answer = ask(client, self.model, history, stream=self.stream, headers=headers, **self.params)
        assert answer.scid, "every response carries the conversation id"
        self.scids.append(answer.scid)
        self.bodies.append(self.sim.last()["body"])
        return answer

    def close(self) -> None:
        for c in self.clients:
            c.close()


@dataclass
class NativeLoop:
    """A Gemini-surface conversation (raw JSON, so the manglings can touch every field)."""

    pair: Pair
    model: str
    stream: bool
    header: bool
    sim: Sim
    scids: list[str | None] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def send(self, contents: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
        gw = (self.pair.a, self.pair.b)[len(self.scids) % 2]
        last = self.scids[-1] if self.scids else None
        headers = {"x-goog-api-key": "gk-provider-matrix", **({SCID: last} if self.header and last else {})}
        body = {"contents": copy.deepcopy(contents), **config}
        action = "streamGenerateContent?alt=sse" if self.stream else "generateContent"
        resp = httpx.post(f"{gw.url}/v1beta/models/{self.model}:{action}", json=body, headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
        self.scids.append(resp.headers.get(SCID))
        assert self.scids[-1], "every response carries the conversation id"
        self.bodies.append(self.sim.last()["body"])
        if not self.stream:
            return dict(resp.json()["candidates"][0]["content"])
        parts: list[dict[str, Any]] = []
        for line in resp.text.splitlines():
            if line.startswith("data: "):
                chunk = orjson.loads(line[6:])
                assert "error" not in chunk, chunk
                parts += chunk["candidates"][0]["content"].get("parts") or []
        return {"role": "model", "parts": parts}

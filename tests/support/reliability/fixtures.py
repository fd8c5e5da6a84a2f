"""Fixtures of the reliability suite: a private Redis, a gateway on it, and a conversation recorded
by tenant A (``Seeded``) that hostile requests from anyone must never alter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from state.keys import tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer, running
from tests.support.reliability.dialects import client, close_client
from tests.support.reliability.hostile import Keyspace

SECRET = "reliability-hostile-secret-01234"
KEY_A = "sk-tenant-a-0001"
KEY_B = "sk-tenant-b-0002"
MAX_BODY = 256 * 1024
BETA = "interleaved-thinking-2025-05-14"


@dataclass
class Seeded:
    """Tenant A's recorded tool loop: its history and what identifies it."""

    gateway: ServerProcess
    redis: RedisServer
    keyspace: Keyspace
    scid: str
    history: list[dict[str, Any]]
    tool_ids: list[str] = field(default_factory=list)
    thinking: list[tuple[str, str]] = field(default_factory=list)  # (text, signature)

    @property
    def tenant_a(self) -> str:
        return tenant_prefix(SECRET.encode(), KEY_A)

    @property
    def tenant_b(self) -> str:
        return tenant_prefix(SECRET.encode(), KEY_B)

    @property
    def a_prefix(self) -> bytes:
        return f"tg:{{{self.tenant_a}:".encode()

    def a_keys(self) -> tuple[int, str]:
        return self.keyspace.snapshot().digest(self.a_prefix)


@pytest.fixture(scope="session", autouse=True)
def _pooled_http_client() -> Iterator[None]:
    yield
    close_client()


@pytest.fixture(scope="module")
def private_redis() -> Iterator[RedisServer]:
    yield from running(RedisServer())


@pytest.fixture(scope="module")
def hostile_gw(sim: Sim, gateways: GatewayFactory, private_redis: RedisServer) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, {"GATEWAY_REDIS_URL": private_redis.url, "GATEWAY_SECRET": SECRET,
                                  "GATEWAY_GEMINI_BASE_URL": sim.url,
                                  "GATEWAY_STORE_TIMEOUT_MS": "1000", "GATEWAY_MAX_BODY_BYTES": str(MAX_BODY),
                                  "GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_LOG_FORMAT": "json"})
    yield sp
    sp.stop()


def a_body(history: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "messages": history}


@pytest.fixture(scope="module")
def seeded(hostile_gw: ServerProcess, private_redis: RedisServer) -> Iterator[Seeded]:
    """Tenant A plays a three-round tool loop (recorded), leaving the last tool results unanswered."""
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"[[sim:tools=3]] weather in three cities? {uuid.uuid4().hex}"}]
    scid = ""
    tool_ids: list[str] = []
    thinking: list[tuple[str, str]] = []
    for _ in range(3):
        r = client().post(hostile_gw.url + "/v1/messages", json=a_body(history),
                       headers={"x-api-key": KEY_A, "anthropic-beta": BETA}, timeout=20)
        assert r.status_code == 200, r.text
        answer = r.json()
        scid = r.headers["x-ag-conversation-id"]
        tool_ids += [b["id"] for b in answer["content"] if b["type"] == "tool_use"]
        thinking += [(b["thinking"], b["signature"]) for b in answer["content"] if b["type"] == "thinking"]
        history += [{"role": "assistant", "content": answer["content"]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
                                                 for b in answer["content"] if b["type"] == "tool_use"]}]
    with redis.Redis(port=private_redis.port) as rc:
        seeded = Seeded(hostile_gw, private_redis, Keyspace(rc), scid, history, tool_ids, thinking)
        assert seeded.a_keys()[0] > 3 and thinking
        yield seeded

"""The weakest evidence, end to end: each test leaves the gateway exactly one way to repair the history.

- The prefix fingerprint: a header-less client that regenerates every tool id and drops all text and
  thinking is still recognised (same SCID), and its turns are restored from the records.
- Layer 2, the exact-text -> signature index: the turn records are gone but the (text, signature) pair
  remains; a replayed thinking block with the exact text gets its signature back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, block_dicts, tool_results
from tests.support.manglings.anthropic import mangle_assistants

MODEL = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}


@pytest.fixture()
def no_rejections(sim: Sim) -> Iterator[None]:
    before = sum(sim.stats()["rejections"].values())
    yield
    assert sum(sim.stats()["rejections"].values()) == before, "the simulator rejected a request"


def send(client: anthropic.Anthropic, history: list[dict[str, Any]]) -> tuple[anthropic.types.Message, str]:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=4096, tools=[WEATHER_TOOL], thinking=THINKING,  # type: ignore[arg-type]
        messages=copy.deepcopy(history))  # type: ignore[arg-type]
    return raw.parse(), raw.headers[SCID]


def skeleton(history: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """Only tool calls remain of each assistant turn, under ids the client made up."""
    out = copy.deepcopy(history)
    ids: dict[str, str] = {}
    for m in out:
        if m["role"] == "assistant":
            m["content"] = [b for b in m["content"] if b["type"] == "tool_use"]
        for b in m["content"] if isinstance(m["content"], list) else ():
            if b["type"] == "tool_use":
                b["id"] = ids.setdefault(b["id"], f"call_{label}_{len(ids)}")
            elif b["type"] == "tool_result":
                b["tool_use_id"] = ids[b["tool_use_id"]]
    return out


def test_prefix_fingerprint_alone_recognises_the_conversation(
        sim: Sim, gateway: ServerProcess, no_rejections: None) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=3]] fingerprint only"}]
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-fingerprint", max_retries=0,
                             default_headers=BETA) as client:
        answer, scid = send(client, history)
        rounds = 0
        while answer.stop_reason == "tool_use":
            recorded_ids = [b.id for b in answer.content if b.type == "tool_use"]
            history = [*history, {"role": "assistant", "content": block_dicts(answer)},
                       {"role": "user", "content": tool_results(answer)}]
            answer, again = send(client, skeleton(history, "fp"))
            rounds += 1
            assert again == scid, f"round {rounds}: not recognised by the prefix fingerprint"
            assert answer.content[0].type == "thinking", "the restored loop start keeps thinking on"
            sent = sim.last()["body"]["messages"]
            # every replayed turn restored as recorded, the results mapped back to the recorded ids
            assert [m["content"] for m in sent if m["role"] == "assistant"] == \
                [m["content"] for m in history if m["role"] == "assistant"]
            assert [b["tool_use_id"] for b in sent[-1]["content"]] == recorded_ids
            assert [b["content"] for b in sent[-1]["content"]] == [b["content"] for b in history[-1]["content"]]
    assert rounds == 3


def test_exact_text_index_restores_a_signature_without_records(
        sim: Sim, gateways: GatewayFactory, redis_server: RedisServer, redis_url: str, no_rejections: None) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": "layer-two-0123456789abcdef012345"})
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=1]] layer two"}]
    with anthropic.Anthropic(base_url=gw.url, api_key="sk-layer-two", max_retries=0,
                             default_headers=BETA) as client:
        answer, _ = send(client, history)
        history += [{"role": "assistant", "content": block_dicts(answer)},
                    {"role": "user", "content": tool_results(answer)}]
        # Everything but the exact-text pairs expires: conversations, tool/text/fingerprint indexes.
        with redis_server.client() as r:
            keys = list(r.scan_iter(match="tg:*"))
            assert [k for k in keys if b":x:" in k], "the exact-text pair was indexed"
            r.delete(*[k for k in keys if b":x:" not in k])
        final, _ = send(client, mangle_assistants(history, "drop_signature"))
    assert final.content[0].type == "thinking"
    replayed = sim.last()["body"]["messages"][1]["content"][0]
    assert replayed == history[1]["content"][0]  # exact text, its own signature back
    gw.stop()

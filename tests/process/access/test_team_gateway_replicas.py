"""The team gateway through real processes (issue 35 acceptance): a real redis-server, two replicas behind HAProxy
(round robin), the official SDKs. A key limited to N requests per minute gets exactly N admitted across both
replicas and 429s in its own dialect after; a revoked key is refused on both replicas at once; the upstream sees
thinkgate's credential, never the gateway key; one key's conversation is not visible under another key."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.process.deploy.test_haproxy import HAProxy, _all_up, served, wait_for
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.cloud.helpers import BEDROCK_CLAUDE, cloud_env

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
ADMIN = "team-admin-token-0123456789"
MODEL = "claude-sonnet-4-5"
TOOLS: Any = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}]


@pytest.fixture()
def team(sim: Sim, gateways: GatewayFactory,
         redis_server: RedisServer) -> Iterator[tuple[HAProxy, list[ServerProcess]]]:
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "team-gateway-secret-0123456789abcd",
           "GATEWAY_ADMIN_TOKEN": ADMIN, "GATEWAY_UPSTREAM_API_KEYS": "anthropic=sk-ant-held-by-thinkgate",
           "GATEWAY_REQUIRE_GATEWAY_KEYS": "true"}
    replicas = [gateways.start(sim.url, env) for _ in range(2)]
    lb = HAProxy(replicas)
    try:
        wait_for(lambda: lb.proc.poll() is None and _all_up(lb), "both replicas UP in HAProxy")
        yield lb, replicas
    finally:
        lb.close()


def _create(url: str, **body: Any) -> str:
    made = httpx.post(f"{url}/admin/keys", json=body, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _ask(client: anthropic.Anthropic) -> int:
    try:
        client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
        return 200
    except anthropic.APIStatusError as e:
        return e.status_code


def test_a_rate_limit_holds_across_two_replicas(team: tuple[HAProxy, list[ServerProcess]], sim: Sim) -> None:
    lb, replicas = team
    key = _create(lb.url, name="alice", rpm=5)
    client = anthropic.Anthropic(base_url=lb.url, api_key=key, max_retries=0)
    statuses = [_ask(client) for _ in range(9)]
    assert statuses == [200] * 5 + [429] * 4, statuses
    assert all(served(sp) >= 4 for sp in replicas)  # HAProxy alternated: each replica admitted and refused some
    try:
        client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    except anthropic.RateLimitError as e:
        assert e.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert int(e.response.headers["retry-after"]) >= 1
    else:
        raise AssertionError("the sixth request was admitted")
    chat = openai.OpenAI(base_url=lb.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:  # the limit is the key's, whatever the dialect
        chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["code"] == "rate_limit_error"  # type: ignore[index]
    seen = sim.last()["headers"]
    assert seen["x-api-key"] == "sk-ant-held-by-thinkgate" and key not in str(seen)


def test_a_revoked_key_is_refused_by_both_replicas_at_once(team: tuple[HAProxy, list[ServerProcess]]) -> None:
    lb, replicas = team
    key = _create(lb.url, name="bob")
    direct = [anthropic.Anthropic(base_url=sp.url, api_key=key, max_retries=0) for sp in replicas]
    assert [_ask(c) for c in direct] == [200, 200]
    revoked = httpx.delete(f"{lb.url}/admin/keys/bob", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    at = time.monotonic()
    assert [_ask(c) for c in direct] == [401, 401]
    assert time.monotonic() - at < 1.0


def test_a_conversation_is_not_visible_under_another_key(team: tuple[HAProxy, list[ServerProcess]]) -> None:
    lb, _ = team
    one, other = _create(lb.url, name="carol"), _create(lb.url, name="dave")
    first = httpx.post(f"{lb.url}/v1/messages", timeout=30, json={
        "model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": one, "anthropic-version": "2023-06-01"})
    scid = first.headers["x-ag-conversation-id"]
    mine = httpx.get(f"{lb.url}/gateway/conversations/{scid}", headers={"x-api-key": one}, timeout=10)
    theirs = httpx.get(f"{lb.url}/gateway/conversations/{scid}", headers={"x-api-key": other}, timeout=10)
    assert mine.status_code == 200 and theirs.status_code == 404


def test_a_client_without_a_gateway_key_is_refused(team: tuple[HAProxy, list[ServerProcess]], sim: Sim) -> None:
    lb, _ = team
    before = sim.stats()["requests"] if "requests" in sim.stats() else None
    client = anthropic.Anthropic(base_url=lb.url, api_key="sk-ant-someones-own-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    if before is not None:
        assert sim.stats()["requests"] == before


def _usage(url: str, name: str) -> dict[str, Any]:
    report = httpx.get(f"{url}/admin/usage?days=1&key={name}", headers={"authorization": f"Bearer {ADMIN}"},
                       timeout=10).json()["usage"][name]
    return next(iter(report.values()), {}).get(MODEL, {})  # type: ignore[no-any-return]


def test_tokens_and_budget_trip_on_the_shared_store(team: tuple[HAProxy, list[ServerProcess]]) -> None:
    """The limits are counted as each answer completes (RELEASE, after its last byte) on the real store and read by
    the other replica's ADMIT: once a request's count landed, the next request is refused."""
    lb, _ = team
    client = anthropic.Anthropic(base_url=lb.url, api_key=_create(lb.url, name="erin", tpm=1), max_retries=0)
    assert _ask(client) == 200
    wait_for(lambda: _usage(lb.url, "erin").get("input"), "erin's tokens counted")
    assert [_ask(client) for _ in range(2)] == [429, 429]  # the first answer's tokens used the minute up
    spender = anthropic.Anthropic(base_url=lb.url, api_key=_create(lb.url, name="fay", budget_usd="0.000001/day"),
                                  max_retries=0)
    assert _ask(spender) == 200
    wait_for(lambda: _usage(lb.url, "fay").get("cost_usd"), "fay's spend counted")
    assert [_ask(spender) for _ in range(2)] == [429, 429]
    assert _usage(lb.url, "fay")["cost_usd"] > 0.000001


def test_a_fallback_chain_survives_an_overloaded_upstream_with_the_loops_thinking_intact(
        sim: Sim, gateways: GatewayFactory, redis_server: RedisServer, tmp_path: Path) -> None:
    """Two replicas behind HAProxy on one redis-server, a gateway key: the Claude API answers 529 at the loop's third
    request, the chain sends it to the same model on Bedrock (``GATEWAY_FALLBACKS``), whose answer goes back to the
    Claude API on the next; every request carries every earlier turn's thinking (Claude's signatures are valid on
    every platform), zero 4xx, the fallback counted once across the replicas."""
    env = cloud_env(sim, tmp_path, GATEWAY_CLOUD_WITHOUT_KEYS="false", GATEWAY_REDIS_URL=redis_server.url,
                    GATEWAY_SECRET="team-fallback-secret-0123456789abcd", GATEWAY_ADMIN_TOKEN=ADMIN,
                    GATEWAY_UPSTREAM_API_KEYS="anthropic=sk-ant-held-by-thinkgate",
                    GATEWAY_FALLBACKS=f"{MODEL}={BEDROCK_CLAUDE}")
    replicas = [gateways.start(sim.url, env) for _ in range(2)]
    lb = HAProxy(replicas)
    try:
        wait_for(lambda: lb.proc.poll() is None and _all_up(lb), "both replicas UP in HAProxy")
        client = anthropic.Anthropic(base_url=lb.url, api_key=_create(lb.url, name="fallback-team"), max_retries=0)
        before = sim.stats()
        messages: list[Any] = [{"role": "user", "content": "[[sim:conv=team-fallback]] [[sim:tools=3]] "
                                "[[sim:fault=overloaded]] [[sim:fault_round=2]] [[sim:fault_times=1]] weather?"}]
        seen: list[tuple[str, list[bool]]] = []
        for _ in range(5):
            answer = client.messages.create(model=MODEL, max_tokens=4096, messages=messages, tools=TOOLS,
                                            thinking={"type": "enabled", "budget_tokens": 1024},
                                            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
            last = sim.last()
            seen.append((last["path"], [m["content"][0]["type"] == "thinking" for m in last["body"]["messages"]
                                        if m["role"] == "assistant"]))
            content = [b.model_dump(exclude_none=True) for b in answer.content]
            messages.append({"role": "assistant", "content": [b for b in content if b["type"] != "thinking"]})
            calls = [b for b in content if b["type"] == "tool_use"]
            if not calls:
                break
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"],
                                                          "content": "sunny"} for c in calls]})
        after = sim.stats()
        assert answer.stop_reason == "end_turn" and after["rejections"] == before["rejections"], after["rejections"]
        assert [p.split("/")[1] for p, _ in seen] == ["v1", "v1", "model", "v1"], seen
        assert all(all(kept) and len(kept) == n for n, (_, kept) in enumerate(seen)), seen  # the client dropped them
        assert sum(metric_sum(sp, "gateway_fallbacks_total") for sp in replicas) == 1
        assert sum(metric_sum(sp, "gateway_requests_total", status="4xx") for sp in replicas) == 0
    finally:
        lb.close()
        for sp in replicas:
            sp.stop()

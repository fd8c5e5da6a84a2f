"""Gateway keys in process (issue 35 items 1, 2 and 5), the embedded store and a fake upstream: the admin API behind
its token, a request under a gateway key served with the upstream credential thinkgate holds (the client's key never
leaves), the refusals in the client's own dialect (invalid, revoked, a model the key may not use, a limit with
``retry-after``), and ``/metrics`` behind its token."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.access import admission
from gateway.app.factory import create_app
from gateway.app.settings import Settings
from state.errors import StoreUnavailable
from state.memory_store import MemoryStore
from tests.unit.gateway.test_handler import FakeUpstream
from tests.unit.gateway.test_route_once import ANTHROPIC_ANSWER

ADMIN = "admin-token-0123456789"
UPSTREAM_KEY = "sk-ant-upstream-held-by-thinkgate"
MESSAGE = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
CHAT = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
SSE = (Path(__file__).resolve().parents[2] / "fixtures" / "sse_thinking_tool_use.sse").read_bytes()


class Gateway:
    def __init__(self, client: httpx.AsyncClient, upstream: FakeUpstream) -> None:
        self.client, self.upstream = client, upstream
        self.store: Any = None

    async def admin(self, method: str, path: str, body: Any = None, token: str | None = ADMIN) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token is not None else {}
        return await self.client.request(method, path, headers=headers,
                                         content=orjson.dumps(body) if body is not None else None)

    async def key(self, name: str, **limits: Any) -> str:
        made = await self.admin("POST", "/admin/keys", {"name": name, **limits})
        assert made.status_code == 201, made.text
        return str(made.json()["key"])

    async def message(self, key: str, body: dict[str, Any] = MESSAGE) -> httpx.Response:
        """One request; then its key's counts land (``admission.settled``: they are counted just after the answer)."""
        answer = await self.client.post("/v1/messages", content=orjson.dumps(body),
                                        headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
        await admission.settled()
        return answer


@pytest.fixture()
async def gw(request: pytest.FixtureRequest) -> AsyncIterator[Gateway]:
    extra = getattr(request, "param", {})
    settings = Settings(**{"admin_token": ADMIN, "upstream_api_keys": f"anthropic={UPSTREAM_KEY}", **extra})
    upstream = FakeUpstream("anthropic", body=ANTHROPIC_ANSWER)
    app = create_app(settings, store=MemoryStore(), upstreams={"anthropic": upstream})  # type: ignore[dict-item]
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        gw = Gateway(client, upstream)
        gw.store = app.state.gateway.store
        yield gw


async def test_the_admin_api_wants_its_token(gw: Gateway) -> None:
    assert (await gw.admin("GET", "/admin/keys", token=None)).status_code == 401
    wrong = await gw.admin("GET", "/admin/keys", token="not-the-admin-token")
    assert wrong.status_code == 403 and "error" in wrong.json()
    assert (await gw.admin("POST", "/admin/keys", {"name": "eve"}, token="wrong-token-0000000")).status_code == 403
    assert (await gw.admin("GET", "/admin/keys")).json() == {"keys": []}, "nothing was created"


async def test_a_key_is_shown_once_and_stored_only_as_a_hash(gw: Gateway) -> None:
    key = await gw.key("alice", models=["claude-*"], rpm=60)
    assert key.startswith("tgk_")
    listed = (await gw.admin("GET", "/admin/keys")).json()["keys"]
    assert [k["name"] for k in listed] == ["alice"] and listed[0]["models"] == ["claude-*"] and listed[0]["rpm"] == 60
    assert key not in orjson.dumps(listed).decode() and key.rsplit("_", 1)[1] not in orjson.dumps(listed).decode()
    assert "hash" not in listed[0]
    assert (await gw.admin("POST", "/admin/keys", {"name": "alice"})).status_code == 409


async def test_a_request_under_a_gateway_key_goes_with_the_upstream_credential(gw: Gateway) -> None:
    key = await gw.key("bob")
    answer = await gw.message(key)
    assert answer.status_code == 200, answer.text
    (_, _, headers, _), = gw.upstream.sent
    assert headers["x-api-key"] == UPSTREAM_KEY and key not in orjson.dumps(headers).decode()


@pytest.mark.parametrize("bad", ["tgk_0123456789ab_" + "A" * 43, "tgk_short", "tgk_0123456789ab_" + "A" * 42 + "\t"])
async def test_an_invalid_gateway_key_is_a_401_in_the_clients_dialect(gw: Gateway, bad: str) -> None:
    await gw.key("carol")
    answer = await gw.message(bad)
    assert answer.status_code == 401 and answer.json()["type"] == "error", answer.text
    assert answer.json()["error"]["type"] == "authentication_error" and not gw.upstream.sent
    chat = await gw.client.post("/v1/chat/completions", content=orjson.dumps(CHAT),
                                headers={"authorization": f"Bearer {bad}"})
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "authentication_error"


async def test_a_revoked_key_is_refused_at_its_next_request(gw: Gateway) -> None:
    key = await gw.key("dave")
    assert (await gw.message(key)).status_code == 200
    assert (await gw.admin("DELETE", "/admin/keys/dave")).json()["revoked"] is True
    assert (await gw.message(key)).status_code == 401
    assert len(gw.upstream.sent) == 1


async def test_a_model_the_key_may_not_use_is_a_403(gw: Gateway) -> None:
    key = await gw.key("erin", models=["gemini-*"])
    answer = await gw.message(key)
    assert answer.status_code == 403 and answer.json()["error"]["type"] == "permission_error", answer.text
    assert not gw.upstream.sent


async def test_requests_per_minute_past_the_limit_get_429_with_retry_after(gw: Gateway) -> None:
    key = await gw.key("frank", rpm=3)
    statuses = [(await gw.message(key)).status_code for _ in range(3)]
    refused = await gw.message(key)
    assert statuses == [200, 200, 200] and refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error" and int(refused.headers["retry-after"]) >= 1
    # the dialect's own rate-limit headers, and not another dialect's
    assert refused.headers["anthropic-ratelimit-requests-limit"] == "3"
    assert refused.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert not [h for h in refused.headers if h.startswith("x-ratelimit-")]
    chat = await gw.client.post("/v1/chat/completions", content=orjson.dumps(CHAT),
                                headers={"authorization": f"Bearer {key}"})
    assert chat.status_code == 429 and chat.headers["x-ratelimit-limit-requests"] == "3"
    assert chat.headers["x-ratelimit-reset-requests"].endswith("s")
    assert not [h for h in chat.headers if h.startswith("anthropic-ratelimit-")]
    updated = await gw.admin("PATCH", "/admin/keys/frank", {"rpm": 0})
    assert updated.status_code == 200 and (await gw.message(key)).status_code == 200


async def test_tokens_per_minute_trip_once_the_answers_used_them(gw: Gateway) -> None:
    key = await gw.key("gina", tpm=5)  # each answer reports 3 + 1 tokens
    assert (await gw.message(key)).status_code == 200
    assert (await gw.message(key)).status_code == 200  # 4 counted: under 5
    refused = await gw.message(key)  # 8 counted
    assert refused.status_code == 429 and "tokens per minute" in refused.json()["error"]["message"]


async def test_the_client_key_is_forwarded_when_no_gateway_key_is_used(gw: Gateway) -> None:
    answer = await gw.message("sk-ant-clients-own-key")
    assert answer.status_code == 200
    (_, _, headers, _), = gw.upstream.sent
    assert headers["x-api-key"] == "sk-ant-clients-own-key"


@pytest.mark.parametrize("gw", [{"require_gateway_keys": True}], indirect=True)
async def test_a_gateway_that_requires_keys_refuses_a_clients_own(gw: Gateway) -> None:
    answer = await gw.message("sk-ant-clients-own-key")
    assert answer.status_code == 401 and not gw.upstream.sent


@pytest.mark.parametrize("gw", [{"metrics_token": "metrics-token-0123456789"}], indirect=True)
async def test_metrics_want_their_token_when_it_is_set(gw: Gateway) -> None:
    assert (await gw.client.get("/metrics")).status_code == 401
    assert (await gw.client.get("/metrics", headers={"authorization": "Bearer nope-nope-nope-nope"})).status_code == 403
    shown = await gw.client.get("/metrics", headers={"authorization": "Bearer metrics-token-0123456789"})
    assert shown.status_code == 200 and "gateway_key_admissions_total" in shown.text


@pytest.mark.parametrize("gw", [{"admin_token": None}], indirect=True)
async def test_without_an_admin_token_there_is_no_admin_api(gw: Gateway) -> None:
    assert (await gw.admin("GET", "/admin/keys")).status_code == 404


async def test_a_streamed_answer_gives_its_concurrency_slot_back(gw: Gateway) -> None:
    key = await gw.key("hana", concurrency=1)
    sse = SSE
    gw.upstream.body, gw.upstream.headers = sse, {"content-type": "text/event-stream"}
    for _ in range(3):  # one at a time: each gets the slot the one before gave back
        answer = await gw.message(key, {**MESSAGE, "stream": True})
        assert answer.status_code == 200 and b"message_stop" in answer.content, answer.text


@pytest.mark.parametrize("gw", [{"model_aliases": "fast=claude-haiku-4-5,smart=claude-opus-4-5"}], indirect=True)
async def test_a_model_alias_is_routed_and_sent_as_its_model(gw: Gateway) -> None:
    answer = await gw.message("sk-ant-clients-own-key", {**MESSAGE, "model": "fast"})
    chat = await gw.client.post("/v1/chat/completions", content=orjson.dumps({**CHAT, "model": "smart"}),
                                headers={"authorization": "Bearer sk-ant-clients-own-key"})
    assert answer.status_code == 200 and chat.status_code == 200, (answer.text, chat.text)
    assert [body["model"] for _, body, _, _ in gw.upstream.sent] == ["claude-haiku-4-5", "claude-opus-4-5"]


async def test_a_budget_is_spent_at_the_documented_point_and_usage_is_reported(gw: Gateway) -> None:
    # claude-sonnet-4-5 at $3 / $15 per million tokens: each answer (3 in, 1 out) costs 24 micro-dollars
    key = await gw.key("ivan", budget_usd="0.00005/day")
    assert [(await gw.message(key)).status_code for _ in range(3)] == [200, 200, 200]  # 0, 24, 48 spent before each
    refused = await gw.message(key)  # 72 >= 50
    assert refused.status_code == 429 and "budget" in refused.json()["error"]["message"]
    chat = await gw.client.post("/v1/chat/completions", content=orjson.dumps(CHAT),
                                headers={"authorization": f"Bearer {key}"})
    assert chat.status_code == 429 and chat.json()["error"]["code"] == "insufficient_quota"
    report = (await gw.admin("GET", "/admin/usage?days=1&key=ivan")).json()
    (day, models), = report["usage"]["ivan"].items()
    assert day == datetime.now(UTC).strftime("%Y-%m-%d")
    assert models == {"claude-sonnet-4-5": {"input": 9, "output": 3, "cost_usd": 72e-6}}, report
    shown = (await gw.client.get("/metrics")).text
    assert 'gateway_key_tokens_total{key="ivan",type="input"} 9.0' in shown
    assert 'gateway_key_spend_usd_total{key="ivan"}' in shown
    assert (await gw.admin("GET", "/admin/usage?days=40")).status_code == 400


class Away(MemoryStore):
    """The embedded store, but its gateway-key round trips fail while ``away``."""

    away = False

    async def admit(self, key_id: str, secret_hash: str, now_ms: int) -> Any:
        if self.away:
            raise StoreUnavailable("away")
        return await super().admit(key_id, secret_hash, now_ms)


@pytest.mark.parametrize("fail_open", [False, True])
async def test_with_the_store_away_a_key_is_refused_or_admitted_as_the_setting_says(fail_open: bool) -> None:
    store = Away()
    settings = Settings(admin_token=ADMIN, upstream_api_keys=f"anthropic={UPSTREAM_KEY}", limits_fail_open=fail_open)
    upstream = FakeUpstream("anthropic", body=ANTHROPIC_ANSWER)
    app = create_app(settings, store=store, upstreams={"anthropic": upstream})  # type: ignore[dict-item]
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        gw = Gateway(client, upstream)
        known, unknown = await gw.key("jo", rpm=1), "tgk_0123456789ab_" + "B" * 43
        assert (await gw.message(known)).status_code == 200  # admitted once: this worker knows it
        store.away = True
        answers = [(await gw.message(known)).status_code for _ in range(2)]
        assert answers == ([200, 200] if fail_open else [503, 503])  # (fail open: without its limits)
        assert (await gw.message(unknown)).status_code == 503  # never admitted here: not admitted now


async def test_an_expired_key_is_refused(gw: Gateway) -> None:
    key = await gw.key("kim", expires_in_days=30)
    assert (await gw.message(key)).status_code == 200
    record = next(r for r in await gw.store.key_records() if r.name == "kim")
    assert record.expires > 0
    assert await gw.store.key_put(dataclasses.replace(record, expires=1), create=False) == "ok"  # (long past)
    assert (await gw.message(key)).status_code == 401


async def test_admin_actions_are_audited_and_no_key_reaches_a_log(gw: Gateway,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = await gw.key("lou", rpm=1)
    assert (await gw.message(key)).status_code == 200
    assert (await gw.message(key)).status_code == 429
    await gw.admin("DELETE", "/admin/keys/lou")
    assert (await gw.message(key)).status_code == 401
    audit = [r.getMessage() for r in caplog.records if r.name == "thinkgate.audit"]
    key_id = key.split("_")[1]
    assert audit == [f"key created: lou ({key_id})", f"key revoked: lou ({key_id})"]
    secret = key.split("_", 2)[2]
    assert not [r for r in caplog.records if secret in r.getMessage() or secret in str(r.args)]
    assert secret not in (await gw.client.get("/metrics")).text


@pytest.mark.parametrize("gw", [{"keys_required_for": frozenset({"anthropic"})}], indirect=True)
async def test_a_route_can_serve_gateway_keys_only(gw: Gateway) -> None:
    """``GATEWAY_KEYS_REQUIRED_FOR=anthropic``: the Anthropic route refuses a client's own key (401 in the client's
    envelope, nothing sent), serves a gateway key; a route not named would forward the client's key as before."""
    refused = await gw.message("sk-ant-clients-own-key")
    assert refused.status_code == 401 and not gw.upstream.sent
    assert refused.json()["error"]["message"] == ("the route of model claude-sonnet-4-5 serves requests with a gateway "
                                                  "key only")
    assert (await gw.message(await gw.key("routed"))).status_code == 200
    (_, _, headers, _), = gw.upstream.sent
    assert headers["x-api-key"] == UPSTREAM_KEY

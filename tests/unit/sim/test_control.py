"""Auth, JSON errors, count_tokens and the ``/_sim`` control endpoints."""

from __future__ import annotations

import httpx

from tests.support.sim.helpers import HEADERS, MODEL, post, request


async def test_auth_required_x_api_key_or_bearer(client: httpx.AsyncClient) -> None:
    body = request("x", thinking=None)
    resp = await client.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert resp.status_code == 401
    assert resp.json()["error"]["type"] == "authentication_error"
    assert resp.headers["request-id"] == resp.json()["request_id"]
    bearer = await client.post("/v1/messages?beta=true", json=body, headers={"Authorization": "Bearer sk-x"})
    assert bearer.status_code == 200  # no anthropic-version needed


async def test_invalid_json(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/messages", content=b"{not json", headers=HEADERS)
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"


async def test_count_tokens(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": [
        {"role": "user", "content": "hello " * 100}]}, headers=HEADERS)
    assert resp.status_code == 200
    assert resp.json()["input_tokens"] > 100
    assert resp.headers["request-id"].startswith("req_")


async def test_stats_last_and_reset(client: httpx.AsyncClient) -> None:
    await post(client, request("ok"))
    await post(client, request("bad", temperature=0.3))
    await post(client, request("bad", max_tokens=100))
    resp = await client.post("/v1/messages?beta=true", json=request("last one", thinking=None),
                             headers={**HEADERS, "Anthropic-Beta": "interleaved-thinking-2025-05-14",
                                      "X-Trace": "t1"})
    assert resp.status_code == 200
    stats = (await client.get("/_sim/stats")).json()
    assert stats["requests"] == 4 and stats["accepted"] == 2
    assert stats["rejections"] == {"4": 1, "2": 1}
    last = (await client.get("/_sim/last")).json()
    assert last["query"] == "beta=true"
    assert last["headers"]["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert last["headers"]["x-trace"] == "t1" and last["headers"]["x-api-key"] == "sk-test"
    assert last["body"]["messages"][0]["content"] == "last one"
    reset = await client.post("/_sim/reset")
    assert reset.json()["requests"] == 0
    assert (await client.get("/_sim/stats")).json()["rejections"] == {}
    assert (await client.get("/_sim/last")).json()["body"] is None  # (issue 32: the request before the reset)


async def test_unknown_route_is_an_anthropic_404(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v1/nothing")
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "not_found_error"
    assert resp.headers["request-id"].startswith("req_")

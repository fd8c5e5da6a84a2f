"""Injected upstream failures: 529, mid-stream error after 200, 429 with retry-after, slow first byte."""

from __future__ import annotations

import time

import httpx

from tests.support.sim.helpers import answer, events_of, post, rejection, request, tool_results

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


async def test_overloaded_529(client: httpx.AsyncClient) -> None:
    for stream in (False, True):
        resp = await post(client, request("x [[sim:fault=overloaded]]", stream=stream))
        assert resp.status_code == 529
        body = resp.json()
        assert {k: body[k] for k in ("type", "error")} == OVERLOADED
        assert body["request_id"] == resp.headers["request-id"]


async def test_midstream_error_event_after_200(client: httpx.AsyncClient) -> None:
    resp = await post(client, request("x [[sim:fault=midstream]] [[sim:tools=1]]", stream=True))
    assert resp.status_code == 200
    events = events_of(resp.content)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and "content_block_delta" in names
    assert names[-1] == "error" and events[-1][1] == OVERLOADED
    assert "message_stop" not in names
    assert b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}' in resp.content


async def test_ratelimit_429_with_retry_after(client: httpx.AsyncClient) -> None:
    body = request("x [[sim:fault=ratelimit:3]]")
    status, etype, _ = await rejection(client, body)
    assert (status, etype) == (429, "rate_limit_error")
    assert (await post(client, body)).headers["retry-after"] == "3"


async def test_slow_first_byte(client: httpx.AsyncClient) -> None:
    t0 = time.monotonic()
    reply = await answer(client, request("x [[sim:fault=slow:200]]"))
    assert time.monotonic() - t0 >= 0.19
    assert reply["stop_reason"] == "end_turn"


async def test_fault_times_and_fault_round(client: httpx.AsyncClient) -> None:
    once = request("x [[sim:fault=overloaded]] [[sim:fault_times=1]]")
    assert (await post(client, once)).status_code == 529
    assert (await post(client, once)).status_code == 200  # a retry succeeds
    body = request("y [[sim:tools=2]] [[sim:fault=overloaded]] [[sim:fault_round=1]]")
    first = await answer(client, body)  # round 0 is fine
    body["messages"] += [{"role": "assistant", "content": first["content"]}, tool_results(first)]
    assert (await post(client, body)).status_code == 529
    stats = (await client.get("/_sim/stats")).json()
    assert stats["faults"] == 2 and stats["accepted"] == 4


async def test_deeply_nested_body_is_answered_not_500(client: httpx.AsyncClient) -> None:
    # nested 400 deep: more than the JSON encoder writes (255), less than the decoder reads (1024)
    raw = '{"model": "claude-opus-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": ' \
          '[{"type": "text", "text": "hi", "meta": ' + "[" * 400 + '"x"' + "]" * 400 + "}]}]}"
    r = await client.post("/v1/messages", content=raw, headers={"x-api-key": "k", "content-type": "application/json"})
    assert r.status_code < 500
    c = await client.post("/v1/messages/count_tokens", content=raw.replace('"max_tokens": 64, ', ""),
                          headers={"x-api-key": "k", "content-type": "application/json"})
    assert c.status_code == 200

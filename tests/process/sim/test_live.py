"""Behaviour that needs a real socket: each event flushed on its own, a held stream, a dropped connection."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from gateway.sse import SSEDecoder
from tests.support.sim.helpers import HEADERS, request


@pytest.mark.process
async def test_hold_relays_first_events_before_release(live_sim: str) -> None:
    body = request("x [[sim:hold]] [[sim:tools=1]]", stream=True)
    seen: list[str] = []
    progress = asyncio.Condition()

    async def reader(resp: httpx.Response) -> None:
        dec = SSEDecoder()
        async for chunk in resp.aiter_raw():
            async with progress:
                seen.extend(ev.event or "" for ev in dec.feed(chunk))
                progress.notify_all()

    async with httpx.AsyncClient(base_url=live_sim, timeout=5) as c:
        async with c.stream("POST", "/v1/messages", content=orjson.dumps(body), headers=HEADERS) as resp:
            assert resp.status_code == 200
            task = asyncio.create_task(reader(resp))
            async with progress:
                await asyncio.wait_for(progress.wait_for(lambda: "content_block_delta" in seen), 3)
            await asyncio.sleep(0.3)  # nothing more arrives while the stream is held
            assert seen == ["message_start", "content_block_start", "ping", "content_block_delta"]
            assert (await c.post("/_sim/release")).json() == {"released": 1}
            await asyncio.wait_for(task, 3)
    assert seen[-1] == "message_stop"


@pytest.mark.process
async def test_release_frees_streams_that_began_before_it(live_sim: str) -> None:
    """Whether the release lands before or after the stream reaches its hold point, it ends promptly."""
    async with httpx.AsyncClient(base_url=live_sim, timeout=5) as c:
        task = asyncio.create_task(c.post("/v1/messages", json=request("x [[sim:hold]]", stream=True),
                                          headers=HEADERS))
        for _ in range(600):  # wait until the request reached the simulator (no event to await)
            if (await c.get("/_sim/stats")).json()["accepted"] >= 1:
                break
            await asyncio.sleep(0.005)
        await c.post("/_sim/release")
        resp = await asyncio.wait_for(task, 3)
        assert resp.status_code == 200 and resp.text.rstrip().endswith('data: {"type":"message_stop"}')


@pytest.mark.process
async def test_drop_closes_connection_mid_body(live_sim: str) -> None:
    async with httpx.AsyncClient(base_url=live_sim, timeout=5) as c:
        for stream in (True, False):
            body = request("x [[sim:fault=drop]] [[sim:tools=1]]", stream=stream)
            received = b""
            with pytest.raises(httpx.RemoteProtocolError):
                async with c.stream("POST", "/v1/messages", content=orjson.dumps(body), headers=HEADERS) as r:
                    assert r.status_code == 200
                    async for chunk in r.aiter_raw():
                        received += chunk
            assert received
            if stream:
                assert received.startswith(b"event: message_start")
                assert b"message_stop" not in received

"""Fixtures: the simulator app in-process (httpx ASGI transport) and, for the tests that need
real sockets (holding a stream open, dropping a connection), served by hypercorn in the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette

from tests.support.sim.helpers import free_port
from thinkgate_sim.app import SimConfig, create_sim_app
from thinkgate_sim.signing import Minter


@pytest.fixture
def minter() -> Minter:
    return Minter(SimConfig().secret)


@pytest.fixture
def sim_app() -> Starlette:
    return create_sim_app(SimConfig())


@pytest.fixture
async def client(sim_app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=sim_app), base_url="http://sim") as c:
        yield c


@pytest.fixture
async def live_sim(sim_app: Starlette) -> AsyncIterator[str]:
    """Base URL of ``sim_app`` served by hypercorn on a free loopback port."""
    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    stop = asyncio.Event()
    task = asyncio.create_task(serve(sim_app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as probe:
        for _ in range(200):
            try:
                await probe.get(url + "/_sim/stats")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.01)
    try:
        yield url
    finally:
        stop.set()
        await task

"""An in-process Anthropic-shaped upstream on a free loopback port (aiohttp), for tests that drive the app in process
and decide the upstream's answer themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serving(handler: Callable[[web.Request], Awaitable[web.Response]],
                  path: str = "/v1/messages") -> AsyncIterator[str]:
    """Serve ``handler`` for ``POST path``; yields the base URL, stops the server on exit."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()

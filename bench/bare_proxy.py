"""The floor of this stack: a minimal Starlette + aiohttp pass-through, served like thinkgate.

    python bench/bare_proxy.py --upstream http://127.0.0.1:PORT --port 8080 [--workers N]

It forwards every POST unchanged (body, content-type and the Anthropic/OpenAI auth and version
headers) to the same path upstream over one pooled keep-alive aiohttp session, and streams the
answer back chunk by chunk as it arrives. No parsing, no state: whatever thinkgate adds on top of
this is the cost of what it does. hypercorn with uvloop, like ``thinkgate serve``.

With ``--redis URL`` it is the floor of a *stateful* proxy instead: the two store round trips every thinkgate
request makes (the coherence rule's load before the upstream call, the record before the answer's end goes out),
over thinkgate's own RESP client (``state.resp``), and nothing else: one GET of a key named by the path before
forwarding, one SET of the whole answer (EX 3600) before its last chunk is relayed. What a same-dialect faithful
request costs beyond this floor is the pipeline's own work (decode, identify, repair, sanitize, encode, metrics).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

FORWARDED = ("content-type", "x-api-key", "authorization", "anthropic-version", "anthropic-beta")
UPSTREAM = os.environ.get("BARE_PROXY_UPSTREAM", "http://127.0.0.1:8000")
STORE: Any = None  # --redis: a state.resp.RespNode


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=75)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        app.state.session = session
        yield


async def forward(request: Request) -> StreamingResponse:
    session: aiohttp.ClientSession = request.app.state.session
    body = await request.body()
    headers = {k: v for k in FORWARDED if (v := request.headers.get(k)) is not None}
    url = UPSTREAM + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    key = "bare:" + request.url.path
    if STORE is not None:
        await STORE.execute([["GET", key]])
    resp = await session.post(url, data=body, headers=headers)

    async def relay() -> AsyncIterator[bytes]:
        try:
            if STORE is None:
                async for chunk in resp.content.iter_any():
                    yield chunk
                return
            answer: list[bytes] = []  # the whole answer is "recorded" before its last chunk goes out
            async for chunk in resp.content.iter_any():
                if answer:
                    yield answer[-1]
                answer.append(chunk)
            await STORE.execute([["SET", key, b"".join(answer), "EX", 3600]])
            if answer:
                yield answer[-1]
        finally:
            resp.release()

    keep = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "request-id")}
    return StreamingResponse(relay(), status_code=resp.status, headers=keep)


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/healthz", health), Route("/{path:path}", forward, methods=["POST"])],
                lifespan=lifespan)


def main() -> None:
    global UPSTREAM, STORE
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--redis", help="redis://HOST:PORT: make the two store round trips a thinkgate request makes")
    args = ap.parse_args()
    UPSTREAM = args.upstream.rstrip("/")
    if args.redis:
        from state.resp import RespNode

        where = urlsplit(args.redis)
        STORE = RespNode(host=where.hostname or "127.0.0.1", port=where.port or 6379)
    config = Config()
    config.bind = [f"{args.host}:{args.port}"]
    config.keep_alive_timeout = 75
    config.accesslog = None
    if importlib.util.find_spec("uvloop"):
        import uvloop

        uvloop.run(serve(app, config))  # type: ignore[arg-type]
    else:
        asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()

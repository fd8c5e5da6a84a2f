"""A response that breaks off: the status, headers and part of the body, then the server closes the
connection (``[[sim:fault=drop]]``, every dialect)."""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class DroppedResponse(Response):
    """Sends the status, headers and part of the body, then stops: the server closes the connection."""

    def __init__(self, status_code: int, headers: dict[str, str], chunks: list[bytes],
                 delay: float = 0.0) -> None:
        super().__init__(status_code=status_code, headers=headers)
        if "content-length" not in headers:  # a stream: chunked, not the empty body's length
            self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.chunks = chunks
        self.delay = delay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(self.delay)

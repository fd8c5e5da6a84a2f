"""A recording HTTP proxy between gateways and the simulator, for tests with many conversations in flight.

``/_sim/last`` shows only the latest request, which is useless when sixteen conversations run at once.
Gateways pointed at this proxy instead of the simulator reach it unchanged (the proxy forwards method,
path, query, headers and body, and sends back status, headers and the whole body: a stream arrives
buffered, in one piece), and every exchange is recorded under the ``[[sim:conv=NAME]]`` marker of its
body, so a test reads what the upstream received for each conversation, in order, with the upstream's
status.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson

_MARKER = re.compile(rb"\[\[sim:conv=([A-Za-z0-9_-]{1,64})\]\]")
_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "accept-encoding",
                  "content-encoding", "proxy-connection", "te", "upgrade"})


@dataclass(frozen=True)
class Exchange:
    conversation: str | None  # the first ``[[sim:conv=NAME]]`` in the request body
    path: str                 # path and query, as the gateway asked
    body: Any                 # the request body (parsed JSON; None if it was not JSON)
    status: int               # the upstream's status


class RecordingProxy:
    """A threaded loopback proxy in front of ``target``; ``url`` is what gateways are pointed at."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=64))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> RecordingProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def of(self, conversation: str) -> list[Exchange]:
        """The exchanges of one conversation, in the order the upstream answered them."""
        with self._lock:
            return [e for e in self.exchanges if e.conversation == conversation]

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _forward(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                try:
                    resp = proxy._client.request(self.command, proxy.target + self.path, content=raw,
                                                 headers=headers)
                    status, body, out_headers = resp.status_code, resp.content, resp.headers.multi_items()
                except httpx.HTTPError as exc:  # the simulator dropped the connection (a fault): say so
                    status, body, out_headers = 502, repr(exc).encode(), []
                marker = _MARKER.search(raw)
                try:
                    parsed = orjson.loads(raw) if raw else None
                except orjson.JSONDecodeError:
                    parsed = None
                proxy._record(Exchange(marker.group(1).decode() if marker else None, self.path, parsed, status))
                self.send_response(status)
                for k, v in out_headers:
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward

        return Handler


@contextmanager
def recording_proxy(target: str) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(target).start()
    try:
        yield proxy
    finally:
        proxy.close()

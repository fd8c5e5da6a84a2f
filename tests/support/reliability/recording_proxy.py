"""A recording HTTP proxy between gateways and the simulator, for tests with many conversations in flight.

``/_sim/last`` shows only the latest request, which is useless when sixteen conversations run at once.
Gateways pointed at this proxy instead of the simulator reach it unchanged (the proxy forwards method,
path, query, headers and body), and every exchange is recorded under the ``[[sim:conv=NAME]]`` marker of its
body, so a test reads what the upstream received for each conversation, in order, with the upstream's
status and answer.

The answer is relayed as it arrives, each upstream read written on at once (chunked transfer encoding unless the
upstream gave a length), so a stream reaches the gateway over time as a real upstream's does. With ``split_seed``
the proxy also cuts the answer into small pieces at seeded pseudo-random byte offsets (``stream_cuts.Cutter``:
the same seed cuts the same answer at the same offsets), each written alone after a short pause, so the gateway
reads its upstream streams split inside events, inside JSON strings, inside multi-byte characters and between
``\\r`` and ``\\n``; ``stream_cuts.cut_classes`` counts which of these a run hit (``RecordingProxy.figures``). An
upstream that drops its answer midway is dropped midway to the gateway too (the connection closes before the
end), as the simulator's ``drop`` fault means it.
"""

from __future__ import annotations

import hashlib
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson

from tests.support.reliability.stream_cuts import Cuts, Cutter, HardCutter, cut_classes

_MARKER = re.compile(rb"\[\[sim:conv=([A-Za-z0-9_-]{1,64})\]\]")
_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "accept-encoding",
                  "content-encoding", "proxy-connection", "te", "upgrade"})
MAX_PIECE = 24        # bytes: the largest piece a split answer is cut into
PIECE_PAUSE_S = 0.0003  # between two pieces of a split answer, so the gateway reads them apart


@dataclass(eq=False)
class Exchange:
    conversation: str | None  # the first ``[[sim:conv=NAME]]`` in the request body
    path: str                 # path and query, as the gateway asked
    body: Any                 # the request body (parsed JSON; None if it was not JSON)
    status: int               # the upstream's status
    streamed: bool = False    # the answer was ``text/event-stream``
    answer: bytearray = field(default_factory=bytearray)  # the upstream's answer body, as relayed so far
    cuts: list[int] = field(default_factory=list)  # offsets in ``answer`` between two pieces written to the gateway
    complete: bool = False    # the whole answer reached the gateway (False: the upstream or the gateway dropped it)
    key: str | None = None    # the credential the gateway forwarded (the client's: which tenant asked)
    replayed: bool = False    # answered from the proxy's answers (``answers=True``), the upstream not asked

    @property
    def pieces(self) -> int:
        """How many writes the answer reached the gateway in."""
        return len(self.cuts) + 1 if self.answer else 0


@dataclass(frozen=True)
class Figures:
    streamed: int            # streamed upstream exchanges
    pieces: int              # the writes their answers reached the gateway in
    cuts: dict[str, int]     # the cuts between those pieces, by what they split (``stream_cuts.CUT_CLASSES``)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins every handler thread
    block_on_close = True
    # the listen backlog: socketserver's default of 5 overflows when a test's replicas open dozens of connections at
    # once, and the kernel then drops the SYNs; the client retries after 1, 3, 7 s, past a gateway's 10 s connect
    # timeout on a loaded box (seen: the transparency test's 504s "upstream ... timed out")
    request_queue_size = 256


class RecordingProxy:
    """A threaded loopback proxy in front of ``target``; ``url`` is what gateways are pointed at. ``split_seed``:
    cut every answer into pieces of at most ``max_piece`` bytes at offsets drawn from the seed (None: each upstream
    read is written on as it came). ``hard_cuts``: cut every upstream read at each hard place instead
    (``stream_cuts.HardCutter``)."""

    def __init__(self, target: str, *, split_seed: int | None = None, hard_cuts: bool = False,
                 max_piece: int = MAX_PIECE, pause_s: float = PIECE_PAUSE_S, answers: bool = False) -> None:
        """``answers``: keep every complete answer by (method, path, body) and give it again, byte for byte and
        without asking the upstream, to a request with the same method, path and body (the query aside: it may
        carry the key), so conversations played again get the very answers the first play got."""
        self.target = target.rstrip("/")
        self.answers: dict[tuple[str, str, bytes], tuple[int, list[tuple[str, str]], bytes]] | None = \
            {} if answers else None
        self.split_seed = split_seed
        self.hard_cuts = hard_cuts
        self.max_piece = max_piece
        self.pause_s = pause_s
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=64))
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> RecordingProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, end the connections still open (a handler waiting for a next request on one returns) and
        join every thread."""
        self._server.shutdown()
        self._thread.join()
        with self._lock:
            still_open = list(self._open)
        for sock in still_open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already gone
                pass
        self._server.server_close()
        self._client.close()

    def of(self, conversation: str, key: str | None = None) -> list[Exchange]:
        """The exchanges of one conversation (of one credential's, when given), in the order the upstream answered
        them."""
        with self._lock:
            return [e for e in self.exchanges if e.conversation == conversation and (key is None or e.key == key)]

    def figures(self, exchanges: list[Exchange] | None = None) -> Figures:
        """Streamed exchanges, the pieces their answers came in and the cuts by class (of ``exchanges``, default
        all)."""
        if exchanges is None:
            with self._lock:
                exchanges = list(self.exchanges)
        streamed = [e for e in exchanges if e.streamed]
        return Figures(len(streamed), sum(e.pieces for e in streamed),
                       dict(cut_classes((bytes(e.answer), e.cuts) for e in streamed)))

    @contextmanager
    def _fresh_on_race(self, method: str, url: str, raw: bytes, headers: dict[str, str]) -> Iterator[httpx.Response]:
        """The upstream's response; sent once more on a fresh connection when a pooled one was closed by the upstream
        just as it was reused (no response at all: the request never reached it; the simulator's hypercorn drops
        idle connections after 5 s, httpx keeps them longer), as the gateway's own client does."""
        try:
            with self._client.stream(method, url, content=raw, headers=headers) as resp:
                yield resp
                return
        except httpx.RemoteProtocolError as exc:
            if "without sending a response" not in str(exc):
                raise
        with self._client.stream(method, url, content=raw, headers={**headers, "connection": "close"}) as resp:
            yield resp

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def _tracked(self, sock: socket.socket, is_open: bool) -> None:
        with self._lock:
            (self._open.add if is_open else self._open.discard)(sock)

    def _cutter(self, method: str, path: str, raw: bytes) -> Cuts | None:
        if self.hard_cuts:
            return HardCutter()
        if self.split_seed is None:
            return None
        seed = hashlib.sha256(b"%d\0%s\0%s\0" % (self.split_seed, method.encode(), path.encode()) + raw).digest()
        return Cutter(random.Random(seed), self.max_piece)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def setup(self) -> None:
                super().setup()
                # every piece leaves at once (no Nagle wait for the previous one's ACK)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                proxy._tracked(self.connection, True)

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    proxy._tracked(self.connection, False)

            def _forward(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                if self.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256"):
                    headers["host"] = self.headers["host"]  # (SigV4 signed it: the simulator checks what was signed)
                marker = _MARKER.search(raw)
                try:
                    parsed = orjson.loads(raw) if raw else None
                except orjson.JSONDecodeError:
                    parsed = None
                conversation = marker.group(1).decode() if marker else None
                cutter = proxy._cutter(self.command, self.path, raw)
                exchange: Exchange | None = None
                key = _credential(headers, self.path)
                known = (self.command, self.path.split("?")[0], raw)
                if proxy.answers is not None and known in proxy.answers:
                    status, answer_headers, body = proxy.answers[known]
                    proxy._record(Exchange(conversation, self.path, parsed, status, "text/event-stream" in dict(
                        answer_headers).get("content-type", ""), bytearray(body), complete=True, key=key,
                        replayed=True))
                    self.send_response(status)
                    for k, v in answer_headers:
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                try:
                    with proxy._fresh_on_race(self.command, proxy.target + self.path, raw, headers) as resp:
                        exchange = Exchange(conversation, self.path, parsed, resp.status_code,
                                            "text/event-stream" in resp.headers.get("content-type", ""), key=key)
                        proxy._record(exchange)
                        self._relay(resp, exchange, cutter)
                        if proxy.answers is not None and exchange.complete:
                            kept = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _HOP
                                    and k.lower() not in ("content-length", "date")]
                            proxy.answers[known] = (resp.status_code, kept, bytes(exchange.answer))
                except httpx.HTTPError as exc:
                    if exchange is None:  # the simulator dropped the connection before answering (a fault): say so
                        proxy._record(Exchange(conversation, self.path, parsed, 502))
                        self._send_whole(502, repr(exc).encode())
                    else:  # it dropped it midway: so does the proxy
                        self.close_connection = True
                except OSError:  # the gateway went away (its client did): the upstream answer is dropped
                    self.close_connection = True

            def _send_whole(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _relay(self, resp: httpx.Response, exchange: Exchange, cutter: Cuts | None) -> None:
                self.send_response(resp.status_code)
                for k, v in resp.headers.multi_items():
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                length = None if "content-encoding" in resp.headers else resp.headers.get("content-length")
                chunked = length is None and self.command != "HEAD" and resp.status_code not in (204, 304)
                if chunked:
                    self.send_header("transfer-encoding", "chunked")
                elif length is not None:
                    self.send_header("content-length", length)
                self.end_headers()
                for chunk in resp.iter_bytes():
                    for piece in cutter.cut(chunk) if cutter is not None else (chunk,) if chunk else ():
                        if exchange.answer:
                            exchange.cuts.append(len(exchange.answer))
                            if cutter is not None:
                                time.sleep(proxy.pause_s)
                        exchange.answer += piece  # (before the gateway can see the piece, and answer its client)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
                exchange.complete = True

            do_GET = do_POST = _forward

        return Handler


def _credential(headers: dict[str, str], path: str) -> str | None:
    """The client credential a gateway forwarded: x-api-key, a bearer token, x-goog-api-key or ``?key=``."""
    lower = {k.lower(): v for k, v in headers.items()}
    for name in ("x-api-key", "x-goog-api-key"):
        if lower.get(name):
            return lower[name]
    auth = lower.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:]
    found = re.search(r"[?&]key=([^&]+)", path)
    return found.group(1) if found else None


@contextmanager
def recording_proxy(target: str, *, split_seed: int | None = None) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(target, split_seed=split_seed).start()
    try:
        yield proxy
    finally:
        proxy.close()

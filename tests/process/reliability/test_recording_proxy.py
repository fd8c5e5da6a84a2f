"""The recording proxy itself (``recording_proxy.py``): it relays an answer as it arrives, byte for byte, in several
pieces when it splits, and it drops midway what the upstream drops midway. The upstream is a tiny threaded server
that writes its stream in three reads and, for the first test, waits between the first and the rest until the test
has seen the first piece reach the client (an event, not a sleep)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.support.reliability.recording_proxy import RecordingProxy, recording_proxy

pytestmark = pytest.mark.process

# Gemini-style SSE (CRLF line ends), multi-byte characters inside a JSON string
EVENTS = (b'data: {"candidates": [{"content": {"parts": [{"text": "caf\xc3\xa9 \xe2\x80\x94 \xe6\x80\x9d\xe8\x80\x83 '
          b'\xf0\x9f\xa4\x94", "thought": true}]}}]}\r\n\r\n',
          b'data: {"candidates": [{"content": {"parts": [{"text": "Step 1: the long path, then the short one."}]}}]}'
          b'\r\n\r\n',
          b'data: {"candidates": [{"content": {"parts": [{"text": "done"}]}, "finishReason": "STOP"}]}\r\n\r\n')
WHOLE = b"".join(EVENTS)


class Upstream:
    """Writes ``EVENTS`` as three chunks of a chunked SSE answer; with ``gate``, waits for it after the first. With
    ``drop``, closes the connection after the first chunk instead."""

    def __init__(self, *, gate: threading.Event | None = None, drop: bool = False) -> None:
        self.gate, self.drop = gate, drop
        self.finished = threading.Event()  # the whole answer was written
        self.threads: set[threading.Thread] = set()  # its handler threads

    @contextmanager
    def serving(self) -> Iterator[str]:
        up = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                up.threads.add(threading.current_thread())
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for k, event in enumerate(EVENTS):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    if k == 0 and up.drop:
                        self.close_connection = True
                        return
                    if k == 0 and up.gate is not None:
                        up.gate.wait(5)
                self.wfile.write(b"0\r\n\r\n")
                up.finished.set()

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,))
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            thread.join()
            server.server_close()


def _post(proxy: RecordingProxy, on_piece: Any = None) -> list[bytes]:
    pieces: list[bytes] = []
    with httpx.Client(timeout=10) as client, \
            client.stream("POST", proxy.url + "/v1beta/models/g:streamGenerateContent?alt=sse",
                          content=b'{"contents": "[[sim:conv=c1]]"}') as resp:
        assert resp.status_code == 200 and resp.headers["content-type"] == "text/event-stream"
        for piece in resp.iter_raw():
            pieces.append(piece)
            if on_piece is not None:
                on_piece(pieces)
    return pieces


def test_a_stream_is_relayed_as_it_arrives_byte_for_byte_and_in_pieces() -> None:
    gate = threading.Event()
    upstream = Upstream(gate=gate)
    before_end: list[bool] = []

    def seen(pieces: list[bytes]) -> None:
        if len(pieces) == 1:  # the first piece: the upstream still waits for the gate
            before_end.append(not upstream.finished.is_set())
            gate.set()

    with upstream.serving() as url, recording_proxy(url, split_seed=7) as proxy:
        pieces = _post(proxy, seen)
        [ex] = proxy.of("c1")
    assert before_end == [True], "the first piece reached the client only after the upstream had finished"
    assert b"".join(pieces) == WHOLE
    assert len(pieces) >= 2
    assert bytes(ex.answer) == WHOLE and ex.complete and ex.streamed and ex.status == 200
    assert ex.pieces > len(EVENTS), "split: more pieces than the upstream wrote"
    assert all(0 < c < len(WHOLE) for c in ex.cuts) and ex.cuts == sorted(set(ex.cuts))


def test_the_same_seed_cuts_the_same_offsets() -> None:
    with Upstream().serving() as url:
        runs = []
        for seed in (7, 7, 8):
            with recording_proxy(url, split_seed=seed) as proxy:
                assert b"".join(_post(proxy)) == WHOLE
                runs.append(set(proxy.of("c1")[0].cuts))
    # the upstream's own read boundaries add cuts where the network put them: compare the drawn ones
    boundaries = {len(EVENTS[0]), len(EVENTS[0]) + len(EVENTS[1])}
    assert runs[0] - boundaries == runs[1] - boundaries
    assert runs[0] - boundaries != runs[2] - boundaries


def test_without_a_seed_each_upstream_read_is_written_on_whole() -> None:
    with Upstream().serving() as url, recording_proxy(url) as proxy:
        assert b"".join(_post(proxy)) == WHOLE
        [ex] = proxy.of("c1")
    assert ex.pieces <= len(EVENTS) and bytes(ex.answer) == WHOLE


def test_an_answer_the_upstream_drops_midway_is_dropped_midway() -> None:
    with Upstream(drop=True).serving() as url, recording_proxy(url, split_seed=3) as proxy:
        got: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            got += _post(proxy)
        [ex] = proxy.of("c1")
    assert bytes(ex.answer) == EVENTS[0] and not ex.complete


def test_close_ends_open_keep_alive_connections_and_joins_its_threads() -> None:
    upstream = Upstream()
    with upstream.serving() as url:
        before = set(threading.enumerate())
        proxy = RecordingProxy(url, split_seed=1).start()
        with httpx.Client(timeout=10) as client:  # its pooled connection is still open when the proxy closes
            assert client.post(proxy.url + "/x", content=b"{}").content == WHOLE
            ours = set(threading.enumerate()) - before - upstream.threads
            assert len(ours) >= 2  # serving, and the handler of the open connection
            proxy.close()
            assert not [t for t in ours if t.is_alive()]

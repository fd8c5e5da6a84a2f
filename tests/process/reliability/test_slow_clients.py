"""Server-side read timeouts (issue 22, item 2), over raw sockets against a served gateway: a client that never
finishes its headers is disconnected after ``GATEWAY_KEEP_ALIVE_TIMEOUT_S`` (hypercorn's idle timer), one that
trickles its body gets a 408 in its dialect after ``GATEWAY_BODY_TIMEOUT_S``, counted as a 4xx, no traceback,
nothing sent upstream. Before, 400 such connections stayed open past 60 s."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum

SLOW = 20  # connections of each kind at once
BODY = json.dumps({"model": "claude-opus-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture(scope="module")
def impatient(sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    yield gateways.start(sim.url, env={"GATEWAY_BODY_TIMEOUT_S": "1", "GATEWAY_KEEP_ALIVE_TIMEOUT_S": "1",
                                       "GATEWAY_LOG_LEVEL": "INFO"})


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    s = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return s


def _read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (10 s socket timeout: a hang fails the test)."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_a_client_that_never_finishes_its_headers_is_disconnected(impatient: ServerProcess) -> None:
    socks = [_connect(impatient.url) for _ in range(SLOW)]
    try:
        for s in socks:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: sk-slow\r\n")  # and nothing more
        start = time.monotonic()
        for s in socks:
            assert _read_all(s) == b""  # closed by the server, nothing answered
        assert time.monotonic() - start < 8
    finally:
        for s in socks:
            s.close()
    assert "Traceback" not in impatient.log()


@pytest.mark.parametrize(("target", "shape"), [("/v1/messages", "anthropic"), ("/v1/chat/completions", "openai"),
                                               ("/v1beta/models/gemini-3-pro-preview:generateContent", "gemini")])
def test_a_client_that_trickles_its_body_gets_a_408(impatient: ServerProcess, sim: Sim, target: str,
                                                    shape: str) -> None:
    total = lambda status: metric_sum(impatient, "gateway_requests_total", status=status)  # noqa: E731
    before_4xx, before_5xx, before_up = total("4xx"), total("5xx"), sim.stats()["requests"]
    socks = [_connect(impatient.url) for _ in range(SLOW)]
    try:
        for s in socks:
            s.sendall(f"POST {target} HTTP/1.1\r\nhost: x\r\nx-api-key: sk-slow\r\ncontent-type: application/json\r\n"
                      f"content-length: {len(BODY)}\r\nconnection: close\r\n\r\n{BODY[:10]}".encode())
        answers = [_read_all(s) for s in socks]
    finally:
        for s in socks:
            s.close()
    for data in answers:
        head, _, payload = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), head
        err = json.loads(payload)["error"]
        assert "did not arrive within 1 seconds" in err["message"]
        if shape == "anthropic":
            assert err["type"] == "invalid_request_error"
        elif shape == "openai":
            assert err["code"] == "request_timeout"
        else:
            assert err["status"] == "DEADLINE_EXCEEDED" and err["code"] == 408
    assert total("4xx") == before_4xx + SLOW and total("5xx") == before_5xx
    assert sim.stats()["requests"] == before_up
    assert "Traceback" not in impatient.log() and " ERROR " not in impatient.log()


@pytest.mark.parametrize("target", ["/v1/messages", "/v1/chat/completions"])
def test_a_non_stream_client_that_leaves_cancels_the_upstream_call_and_records_nothing(
        impatient: ServerProcess, target: str) -> None:
    """The simulator answers after 3 s; the client leaves after its request is sent. Before: the gateway waited the
    3 s out and recorded the turn nobody received (under the conversation id the client named). Now: the upstream
    call is cancelled at once, the request counts as a 499 (4xx), and the conversation holds nothing."""
    scid = uuid.uuid4().hex
    body = json.dumps({"model": "claude-opus-4-5", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "[[sim:fault=slow:3000]] hi"}]})
    total = lambda status: metric_sum(impatient, "gateway_requests_total", status=status)  # noqa: E731
    before_4xx, before_5xx = total("4xx"), total("5xx")
    # (the fixture's gateway is shared by the parameters: count this request's log line, not an earlier one's)
    cancelled = lambda: impatient.log().count("upstream call cancelled")  # noqa: E731
    before_cancelled = cancelled()
    with _connect(impatient.url) as s:
        s.sendall(f"POST {target} HTTP/1.1\r\nhost: x\r\nx-api-key: sk-leaves\r\ncontent-type: application/json\r\n"
                  f"x-ag-conversation-id: {scid}\r\ncontent-length: {len(body)}\r\n\r\n{body}".encode())
        start = time.monotonic()
    while (cancelled() == before_cancelled or total("4xx") == before_4xx) and time.monotonic() - start < 2.5:
        time.sleep(0.05)  # (the log line and the count are the events; the simulator would answer at 3 s)
    assert cancelled() == before_cancelled + 1, "the gateway waited for the upstream's answer"
    assert total("4xx") == before_4xx + 1 and total("5xx") == before_5xx
    time.sleep(3.2)  # past the simulator's answer: had the call gone on, its turn would be recorded by now
    r = httpx.get(f"{impatient.url}/gateway/conversations/{scid}", headers={"x-api-key": "sk-leaves"})
    assert r.status_code == 404, r.text

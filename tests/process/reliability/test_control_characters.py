"""Client faults are 4xx (issue 22, item 2), over raw sockets against a served gateway: a header value with a control
character is a 400 in the client's dialect before any upstream call, never a 500 with a traceback (the upstream
client refused to send it), Gemini's ``?key=`` (which becomes a header) too; a client that goes away mid-upload
is a 499, not a 5xx."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from tests.process_fixtures import ServerProcess, Sim, metric_sum

BODY = json.dumps({"model": "claude-opus-4-5", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()


def raw_post(url: str, target: str, headers: list[tuple[str, bytes]], body: bytes) -> tuple[int, dict[str, object]]:
    """POST over a plain socket (HTTP clients refuse to send such headers), one request, connection closed."""
    parts = urlsplit(url)
    head = f"POST {target} HTTP/1.1\r\nhost: {parts.hostname}\r\ncontent-type: application/json\r\n".encode()
    head += b"".join(name.encode() + b": " + value + b"\r\n" for name, value in headers)
    head += b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(head + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    payload = rest.split(b"\r\n\r\n", 1)[1]
    return int(status_line.split()[1]), json.loads(payload)


@pytest.mark.parametrize(("target", "headers", "shape"), [
    ("/v1/messages", [("x-api-key", b"key\x01x")], "anthropic"),
    ("/v1/messages", [("x-api-key", b"sk-ok"), ("anthropic-beta", b"interleaved\x7fthinking")], "anthropic"),
    ("/v1/chat/completions", [("authorization", b"Bearer tok\x1bx")], "openai"),
    ("/v1beta/models/gemini-3-pro-preview:generateContent?key=abc%0d%0aX-Evil:%201", [], "gemini"),
], ids=["x-api-key", "anthropic-beta", "authorization", "gemini-key-query"])
def test_a_control_character_in_a_header_is_a_400_in_the_clients_dialect(
        gateway: ServerProcess, sim: Sim, target: str, headers: list[tuple[str, bytes]], shape: str) -> None:
    before = sim.stats()["requests"]
    status, body = raw_post(gateway.url, target, headers, BODY)
    assert status == 400, body
    err = body["error"]
    assert isinstance(err, dict) and "control characters" in err["message"]
    if shape == "anthropic":
        assert body["type"] == "error" and err["type"] == "invalid_request_error"
    elif shape == "openai":
        assert err["type"] == "invalid_request_error"
    else:
        assert err["status"] == "INVALID_ARGUMENT" and err["code"] == 400
    assert sim.stats()["requests"] == before, "nothing reached the upstream"
    assert "Traceback" not in gateway.log()


def test_a_client_that_goes_away_mid_upload_is_a_client_fault_not_a_server_error(
        gateway: ServerProcess, sim: Sim) -> None:
    """Headers and part of the body, then the connection closed: counted as a 4xx (499), no 5xx, no ERROR line or
    traceback, nothing sent upstream (issue 22, item 2)."""
    parts = urlsplit(gateway.url)
    total = lambda status: metric_sum(gateway, "gateway_requests_total", endpoint="messages", status=status)  # noqa: E731
    before_4xx, before_5xx, before_up = total("4xx"), total("5xx"), sim.stats()["requests"]
    log_before = len(gateway.log())
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: sk-gone\r\ncontent-type: application/json\r\n"
                  b"content-length: 10000\r\n\r\n" + BODY[:20])
    deadline = time.monotonic() + 10
    while total("4xx") == before_4xx and time.monotonic() < deadline:
        time.sleep(0.05)  # (the metric is the event: the worker counts the request once it gave up on the body)
    assert total("4xx") == before_4xx + 1 and total("5xx") == before_5xx
    assert sim.stats()["requests"] == before_up
    tail = gateway.log()[log_before:]
    assert "Traceback" not in tail and " ERROR " not in tail

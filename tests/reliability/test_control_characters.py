"""Client faults are 4xx (issue 22, item 2): a header value with a control character, sent over a raw socket to a
served gateway, is a 400 in the client's dialect before any upstream call, never a 500 with a traceback (the
upstream client refused to send it). Gemini's ``?key=``, which becomes a header, too."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from tests.process_fixtures import ServerProcess, Sim

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

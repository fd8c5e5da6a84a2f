"""One reader for every upstream's error envelope; one renderer per client dialect."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import GatewayError, render_error, upstream_error


@pytest.mark.parametrize(("body", "message", "etype"), [
    (b'{"type":"error","error":{"type":"invalid_request_error","message":"messages.1: bad"},"request_id":"r"}',
     "messages.1: bad", "invalid_request_error"),
    (b'[{"error":{"code":400,"message":"Function call is missing a thought_signature","status":"INVALID_ARGUMENT"}}]',
     "Function call is missing a thought_signature", None),
    (b'{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"Gemini models require"}}}',
     "Provider returned error: Gemini models require", None),
    (b"<html>bad gateway</html>", "<html>bad gateway</html>", None),
    (b"", "upstream answered HTTP 400", None),
])
def test_upstream_error_reads_every_envelope(body: bytes, message: str, etype: str | None) -> None:
    err = upstream_error(400, body)
    assert (err.status, err.message, err.error_type) == (400, message, etype)


def test_rendered_in_each_dialect() -> None:
    err = upstream_error(529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    for dialect, path in (("anthropic", ("error", "message")), ("openai", ("error", "message")),
                          ("gemini", ("error", "message"))):
        status, body = render_error(dialect, err)  # type: ignore[arg-type]
        data = orjson.loads(body)
        assert status == 529 and data[path[0]][path[1]] == "Overloaded"


@pytest.mark.parametrize(("status", "google"), [(405, "UNIMPLEMENTED"), (501, "UNIMPLEMENTED"), (503, "UNAVAILABLE"),
                                                (404, "NOT_FOUND"), (500, "INTERNAL")])
def test_google_envelope_names_the_rpc_code_of_the_http_status(status: int, google: str) -> None:
    """code.proto's HTTP mappings; a wrong method is UNIMPLEMENTED, not INTERNAL (which reads as "retry")."""
    rendered, body = render_error("gemini", GatewayError(status, "x"))
    assert rendered == status and orjson.loads(body)["error"] == {"code": status, "message": "x", "status": google}

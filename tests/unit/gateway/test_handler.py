"""The one handler (``gateway.surfaces.handler``) in process, against a fake upstream: each surface's request is
decoded, then routed once (one error text, before any upstream call), then sent as the upstream dialect table says;
the answer comes back in the client's dialect."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from gateway.transport.upstream import UpstreamResponse


class FakeAnswer:
    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status, self.body, self.headers = status, body, headers

    async def read(self) -> bytes:
        return self.body

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        yield self.body

    def close(self) -> None: ...

    def release(self) -> None: ...


class FakeUpstream:
    """Answers every post with one canned answer and keeps what it was sent."""

    def __init__(self, name: str, status: int = 200, body: Any = None, headers: dict[str, str] | None = None) -> None:
        self.name, self.status, self.headers = name, status, headers or {"content-type": "application/json"}
        self.body = body if isinstance(body, bytes) else orjson.dumps(body)
        self.sent: list[tuple[str, dict[str, Any], dict[str, str], str]] = []

    async def post(self, path: str, body: bytes, headers: dict[str, str], query: str = "") -> UpstreamResponse:
        self.sent.append((path, orjson.loads(body), dict(headers), query))
        return FakeAnswer(self.status, self.body, self.headers)  # type: ignore[return-value]

    async def start(self) -> None: ...

    async def close(self) -> None: ...


GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                 "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}}
CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 64}


async def _post(upstreams: dict[str, FakeUpstream], path: str, body: Any, **headers: str) -> httpx.Response:
    app = create_app(Settings(), store=None, upstreams=upstreams)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        return await client.post(path, content=body if isinstance(body, bytes) else orjson.dumps(body),
                                 headers={"authorization": "Bearer sk-test", **headers})


@pytest.mark.parametrize(("path", "body", "envelope"), [
    ("/v1/chat/completions", {**CHAT, "model": "gemini-3-pro-preview"}, "openai"),
    ("/gateway/chat-stream", {"model": "gemini-3-pro-preview", "message": "hello"}, "anthropic"),
    ("/v1beta/models/claude-opus-4-5:generateContent", {"contents": [{"role": "user", "parts": [{"text": "x"}]}]},
     "gemini"),
])
async def test_an_unroutable_model_gets_the_one_error_and_no_upstream_call(path: str, body: Any, envelope: str) -> None:
    other = FakeUpstream("gemini" if "claude" in path else "anthropic")  # configured, but not the model's
    answer = await _post({other.name: other}, path, body)
    assert answer.status_code == 400 and "that this endpoint can call" in answer.text, answer.text
    error = answer.json()["error"]
    assert {"openai": "code", "anthropic": "type", "gemini": "status"}[envelope] in error
    assert not other.sent


async def test_the_request_is_decoded_before_it_is_routed() -> None:
    """A malformed body with an unroutable model: the decoder's error, not the routing one."""
    answer = await _post({"anthropic": FakeUpstream("anthropic")}, "/v1/chat/completions",
                         {"model": "gemini-3-pro-preview", "messages": "not a list"})
    assert answer.status_code == 400 and "that this endpoint can call" not in answer.text, answer.text


async def test_openai_client_to_a_gemini_upstream_as_the_dialect_table_says() -> None:
    gemini = FakeUpstream("gemini", body=GEMINI_ANSWER)
    answer = await _post({"gemini": gemini}, "/v1/chat/completions", {**CHAT, "model": "gemini-3-pro-preview"})
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "hi", answer.text
    (path, body, headers, query), = gemini.sent
    assert (path, query) == ("/v1beta/models/gemini-3-pro-preview:generateContent", "")
    assert headers["x-goog-api-key"] == "sk-test" and body["contents"][0]["parts"] == [{"text": "hello"}]


async def test_an_upstream_error_is_rendered_in_the_openai_envelope_with_its_status() -> None:
    gemini = FakeUpstream("gemini", 429, {"error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}})
    answer = await _post({"gemini": gemini}, "/v1/chat/completions", {**CHAT, "model": "gemini-3-pro-preview"})
    assert answer.status_code == 429
    assert answer.json() == {"error": {"message": "slow", "type": "rate_limit_error", "param": None,
                                       "code": "rate_limit_error"}}
    assert answer.headers["content-type"] == "application/json"


async def test_gemini_native_passes_the_clients_query_and_key_and_relays_the_answer_as_it_came() -> None:
    gemini = FakeUpstream("gemini", body=GEMINI_ANSWER)
    answer = await _post({"gemini": gemini}, "/v1beta/models/gemini-3-pro-preview:generateContent?key=gk-1",
                         {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}, authorization="")
    assert answer.status_code == 200 and answer.json() == GEMINI_ANSWER
    (path, _, headers, query), = gemini.sent
    assert (path, query, headers["x-goog-api-key"]) == ("/v1beta/models/gemini-3-pro-preview:generateContent",
                                                         "key=gk-1", "gk-1")


async def test_gemini_native_refuses_an_unknown_action_by_its_path() -> None:
    answer = await _post({"gemini": FakeUpstream("gemini")}, "/v1beta/models/gemini-3-pro-preview:embed", b"{")
    assert answer.status_code == 404 and answer.json()["error"]["status"] == "NOT_FOUND"


async def test_augment_relays_an_upstream_error_with_its_advice_and_refuses_an_answer_that_does_not_stream() -> None:
    body = {"model": "claude-opus-4-5", "message": "hello"}
    limited = FakeUpstream("anthropic", 429, {"type": "error", "error": {"type": "rate_limit_error", "message": "no"}},
                           {"content-type": "application/json", "retry-after": "3", "request-id": "req_1"})
    answer = await _post({"anthropic": limited}, "/gateway/chat-stream", body)
    assert answer.status_code == 429 and answer.json()["error"]["message"] == "no"
    assert (answer.headers["retry-after"], answer.headers["request-id"]) == ("3", "req_1")
    answer = await _post({"anthropic": FakeUpstream("anthropic", body={"content": []})}, "/gateway/chat-stream", body)
    assert answer.status_code == 502 and "without streaming" in answer.text


@pytest.mark.parametrize(("method", "path", "status"), [("POST", "/v1/messages", 400), ("GET", "/v1/nowhere", 404)])
async def test_a_gateway_error_names_one_request_id_in_its_header_envelope_and_access_line(
        method: str, path: str, status: int, caplog: pytest.LogCaptureFixture) -> None:
    """The observing layer gives every HTTP request its id (an endpoint's and a path no surface serves alike): the
    error envelope, its ``request-id`` header and the access line name the same one."""
    app = create_app(Settings(), store=None, upstreams={})
    caplog.set_level("INFO", logger="thinkgate.access")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        answer = await client.request(method, path, content=b"{not json", headers={"x-api-key": "sk-test"})
    rid = answer.headers.get("request-id", "")
    assert answer.status_code == status and rid.startswith("req_gw_"), (answer.status_code, answer.headers)
    assert answer.json()["request_id"] == rid
    access = [getattr(r, "fields", {}) for r in caplog.records if r.name == "thinkgate.access"]
    assert [f["request_id"] for f in access] == [rid] and access[0]["status"] == status, access

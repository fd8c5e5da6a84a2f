"""Wire-level behaviour of /v1/messages through real gateway and simulator processes."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port

KEY = {"x-api-key": "sk-test-wire", "anthropic-version": "2023-06-01"}

CLAUDE_CODE_BETAS = ("claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
                     "prompt-caching-scope-2026-01-05,advanced-tool-use-2025-11-20")


def claude_code_body() -> dict[str, Any]:
    return {
        "model": "claude-opus-4-7",
        "max_tokens": 32000,
        "stream": True,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                {"type": "text", "text": "[[sim:tools=0]] list files", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "The user switched to plan mode."},
        ],
        "tools": [
            {"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {}}},
            {"name": "WebFetch", "description": "fetch", "input_schema": {"type": "object"},
             "defer_loading": True},
        ],
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": "user_abc_account__session_123"},
    }


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, None
        for line in chunk.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:].strip())
        if name:
            out.append((name, data))
    return out


def test_claude_code_request_reaches_upstream_intact(sim: Sim, gateway: ServerProcess) -> None:
    body = claude_code_body()
    raw = json.dumps(body).encode()
    headers = {"authorization": "Bearer sk-ant-oat-cc", "anthropic-version": "2023-06-01",
               "anthropic-beta": CLAUDE_CODE_BETAS, "content-type": "application/json"}
    r = httpx.post(gateway.url + "/v1/messages?beta=true", content=raw, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    last = sim.last()
    assert last["body"] == body  # every field intact, the system entry inside messages included
    assert "beta=true" in last["query"]
    assert last["headers"]["anthropic-beta"] == CLAUDE_CODE_BETAS
    assert last["headers"]["authorization"] == "Bearer sk-ant-oat-cc"
    assert r.headers.get("request-id", "").startswith("req_")


SIM_REQUEST_ID = re.compile(r"req_01[0-9A-Za-z]{22}")  # the simulator's ids; the gateway's own are req_gw_...
SEVERAL_BETAS = ["interleaved-thinking-2025-05-14", "context-management-2025-06-27", "claude-code-20250219"]


# How the SDK authenticates: recent SDKs send the API key as ``Authorization: Bearer``; older clients
# (and Claude Code with an API key) send ``x-api-key`` with an older ``anthropic-version``.
CREDENTIALS: dict[str, dict[str, Any]] = {
    "bearer": {"api_key": "sk-test-fwd-bearer"},
    "x-api-key": {"api_key": "unused", "default_headers": {
        "x-api-key": "sk-test-fwd-key", "Authorization": anthropic.omit, "anthropic-version": "2023-06-01"}},
}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("credential", sorted(CREDENTIALS))
def test_client_headers_reach_upstream_unchanged_and_request_id_comes_back(
    sim: Sim, gateway: ServerProcess, credential: str, stream: bool,
) -> None:
    params: dict[str, Any] = {"model": "claude-opus-4-5", "max_tokens": 256, "betas": SEVERAL_BETAS,
                              "messages": [{"role": "user", "content": "[[sim:tools=0]] headers"}]}
    with anthropic.Anthropic(base_url=gateway.url, max_retries=0, **CREDENTIALS[credential]) as client:
        if stream:
            with client.beta.messages.stream(**params) as s:
                s.get_final_message()
                sent, received = s.response.request.headers, s.response.headers
        else:
            raw = client.beta.messages.with_raw_response.create(**params)
            raw.parse()
            sent, received = raw.http_response.request.headers, raw.headers
    upstream = sim.last()["headers"]
    assert sent["anthropic-beta"] == ",".join(SEVERAL_BETAS)  # the SDK's one comma-separated header
    if credential == "bearer":
        assert sent["authorization"] == "Bearer sk-test-fwd-bearer" and "x-api-key" not in sent
    else:
        assert sent["x-api-key"] == "sk-test-fwd-key" and "authorization" not in sent
    for name in ("anthropic-version", "anthropic-beta", "authorization", "x-api-key"):
        assert upstream.get(name) == sent.get(name), name  # unchanged, and nothing added
    assert SIM_REQUEST_ID.fullmatch(received["request-id"]), received["request-id"]


def test_beta_header_sent_on_several_lines_reaches_upstream_whole(sim: Sim, gateway: ServerProcess) -> None:
    """A raw client may send ``anthropic-beta`` once per value: every value goes upstream, not the last."""
    body = {"model": "claude-opus-4-5", "max_tokens": 256,
            "messages": [{"role": "user", "content": "[[sim:tools=0]] beta lines"}]}
    headers = [(k, v) for k, v in KEY.items()] + [("anthropic-beta", b) for b in SEVERAL_BETAS]
    r = httpx.post(gateway.url + "/v1/messages", json=body, headers=headers)
    assert r.status_code == 200, r.text
    forwarded = sim.last()["headers"]["anthropic-beta"]
    assert [b.strip() for b in forwarded.split(",")] == SEVERAL_BETAS


def test_upstream_error_status_body_and_request_id_unchanged(sim: Sim, gateway: ServerProcess) -> None:
    body = {"model": "claude-opus-4-5", "messages": [{"role": "user", "content": "hi"}]}  # no max_tokens
    via_gw = httpx.post(gateway.url + "/v1/messages", json=body, headers=KEY)
    direct = httpx.post(sim.url + "/v1/messages", json=body, headers=KEY)
    assert via_gw.status_code == direct.status_code == 400
    gw_body, direct_body = via_gw.json(), direct.json()
    assert gw_body["request_id"] == via_gw.headers["request-id"]  # the upstream's own id came back
    gw_body.pop("request_id"), direct_body.pop("request_id")
    assert gw_body == direct_body


def test_first_event_is_relayed_before_upstream_finishes(sim: Sim, gateway: ServerProcess) -> None:
    body = {"model": "claude-opus-4-5", "max_tokens": 4096, "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "[[sim:hold]] take your time"}]}
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body, headers=KEY, timeout=15) as r:
        assert r.status_code == 200
        seen = ""
        lines = r.iter_text()
        while "content_block_delta" not in seen:
            seen += next(lines)
        # The simulator is still holding the rest of the stream: nothing final has arrived yet.
        assert "message_stop" not in seen and "message_start" in seen
        sim.release()
        rest = "".join(lines)
    assert "message_stop" in rest


def test_count_tokens_passthrough(gateway: ServerProcess) -> None:
    body = {"model": "claude-opus-4-5", "messages": [{"role": "user", "content": "count me"}]}
    r = httpx.post(gateway.url + "/v1/messages/count_tokens", json=body, headers=KEY)
    assert r.status_code == 200 and isinstance(r.json()["input_tokens"], int)


# ------------------------------------------------------------------ bad input


def _assert_envelope(r: httpx.Response, status: int, etype: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == etype
    assert body["request_id"] and "Traceback" not in r.text
    return body


def test_malformed_json_is_400(gateway: ServerProcess) -> None:
    r = httpx.post(gateway.url + "/v1/messages", content=b'{"model": "x", "messages": [', headers=KEY)
    body = _assert_envelope(r, 400, "invalid_request_error")
    assert "not valid JSON" in body["error"]["message"]


def test_wrong_types_are_400(gateway: ServerProcess) -> None:
    r = httpx.post(gateway.url + "/v1/messages", json={"model": "m", "messages": "nope"}, headers=KEY)
    assert _assert_envelope(r, 400, "invalid_request_error")["error"]["message"] == \
        "messages: Input should be a valid list"


COUNT_TOKENS_BAD_BODIES = [  # (body, the 400's message)
    (b'{"model": "claude-opus-4-5", "messages": [', "Request body is not valid JSON"),
    (b"", "Request body is empty; expected a JSON object"),
    (b"[]", "Request body must be a JSON object"),
    (b'{"messages": [{"role": "user", "content": "hi"}]}', "model: Field required"),
    (b'{"model": 5, "messages": []}', "model: Input should be a valid string"),
    (b'{"model": "claude-opus-4-5"}', "messages: Field required"),
    (b'{"model": "claude-opus-4-5", "messages": "nope"}', "messages: Input should be a valid list"),
    (b'{"model": "claude-opus-4-5", "messages": [], "thinking": "on"}', "thinking: Input should be a valid dictionary"),
    (b'{"model": "claude-opus-5-5", "messages": {"role": "user"}}', "messages: Input should be a valid list"),
]


@pytest.mark.parametrize(("raw", "message"), COUNT_TOKENS_BAD_BODIES)
def test_count_tokens_refuses_what_is_not_a_request(gateway: ServerProcess, raw: bytes, message: str) -> None:
    """A body that is not a Messages request is a 400 in Anthropic's envelope, before the upstream counts it, whatever
    the model (the simulator, like an upstream that validates nothing on ``count_tokens``, would count it)."""
    r = httpx.post(gateway.url + "/v1/messages/count_tokens", content=raw,
                   headers={**KEY, "content-type": "application/json"})
    assert _assert_envelope(r, 400, "invalid_request_error")["error"]["message"].startswith(message)


def test_unknown_path_is_404_envelope(gateway: ServerProcess) -> None:
    r = httpx.post(gateway.url + "/v1/nothing", json={}, headers=KEY)
    _assert_envelope(r, 404, "not_found_error")


@pytest.fixture(scope="module")
def small_gateway(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    return gateways.start(sim.url, {"GATEWAY_MAX_BODY_BYTES": "2048"})


def test_body_over_limit_is_413(small_gateway: ServerProcess) -> None:
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
    r = httpx.post(small_gateway.url + "/v1/messages", json=big, headers=KEY)
    _assert_envelope(r, 413, "request_too_large")


def test_body_over_limit_chunked_is_413(small_gateway: ServerProcess) -> None:
    def gen() -> Iterator[bytes]:
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}]}'

    r = httpx.post(small_gateway.url + "/v1/messages", content=gen(), headers=KEY)
    _assert_envelope(r, 413, "request_too_large")


# ------------------------------------------------------------------ upstream failures


def test_upstream_connect_failure_is_502(gateways: GatewayFactory) -> None:
    dead = gateways.start(f"http://127.0.0.1:{free_port()}")
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(dead.url + "/v1/messages", json=body, headers=KEY)
    _assert_envelope(r, 502, "api_error")


def test_upstream_timeout_is_504(sim: Sim, gateways: GatewayFactory) -> None:
    impatient = gateways.start(sim.url, {"GATEWAY_READ_TIMEOUT_S": "0.3"})
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "[[sim:fault=slow:3000]]"}]}
    r = httpx.post(impatient.url + "/v1/messages", json=body, headers=KEY, timeout=10)
    _assert_envelope(r, 504, "api_error")


def test_upstream_overloaded_status_passes_through(gateway: ServerProcess) -> None:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "[[sim:fault=overloaded]]"}]}
    r = httpx.post(gateway.url + "/v1/messages", json=body, headers=KEY)
    _assert_envelope(r, 529, "overloaded_error")


@pytest.mark.parametrize(("marker", "etype"), [("midstream", "overloaded_error"), ("drop", "api_error")])
def test_midstream_failure_becomes_error_event(gateway: ServerProcess, marker: str, etype: str) -> None:
    body = {"model": "m", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": f"[[sim:fault={marker}]] go"}]}
    r = httpx.post(gateway.url + "/v1/messages", json=body, headers=KEY, timeout=10)
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1][0] == "error" and events[-1][1]["error"]["type"] == etype
    assert not any(name == "message_stop" for name, _ in events)


def test_client_disconnect_cancels_the_upstream_stream(sim: Sim, gateway: ServerProcess) -> None:
    cancelled_before = sim.stats()["streams_cancelled"]
    body = {"model": "claude-opus-4-5", "max_tokens": 4096, "stream": True,
            "messages": [{"role": "user", "content": "[[sim:hold]] I will hang up"}]}
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body, headers=KEY, timeout=15) as r:
        seen = ""
        lines = r.iter_text()
        while "content_block_delta" not in seen:
            seen += next(lines)
    # The client is gone while the simulator still holds the stream: the gateway must drop its upstream
    # request, which the simulator sees as an abandoned stream (well before its 10 s hold runs out).
    deadline = time.monotonic() + 5
    while sim.stats()["streams_cancelled"] == cancelled_before:
        assert time.monotonic() < deadline, "upstream stream was not cancelled"
        time.sleep(0.02)  # the simulator is another process: poll its counter

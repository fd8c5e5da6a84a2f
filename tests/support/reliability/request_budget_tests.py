"""Issue 32 item 5: one request may cost a worker at most ``GATEWAY_REQUEST_MEMORY_MB``, estimated from its body
before it is decoded (``gateway.surfaces.common``: 6 bytes per body byte, 1 KiB per JSON object). More is a 413
in the
client's own dialect, and nothing reaches the upstream; a ``content-length`` whose bytes alone are too many is
refused before the body is read."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.surfaces import common as request_cost
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim

BUDGET_MB = 40
ANTHROPIC = {"x-api-key": "sk-budget", "anthropic-version": "2023-06-01", "content-type": "application/json"}
OPENAI = {"authorization": "Bearer sk-budget", "content-type": "application/json"}
GEMINI = {"x-goog-api-key": "sk-budget", "content-type": "application/json"}


def tiny(n: int, role: str = "assistant") -> list[dict[str, str]]:
    return [{"role": "user" if (n - 1 - i) % 2 == 0 else role, "content": f"w{i}"} for i in range(n)]


@pytest.fixture(scope="module")
def gw(sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, {"GATEWAY_REQUEST_MEMORY_MB": str(BUDGET_MB)})
    yield sp
    sp.stop()


@pytest.mark.unit
def test_the_estimate_counts_bytes_and_objects() -> None:
    body = json.dumps({"messages": tiny(1000)}).encode()
    assert request_cost.estimate(body) == 6 * len(body) + 1024 * 1001
    assert request_cost.estimate(body, 1) == 6 * len(body) + 1024  # a count given is the count used
    assert _costly(body, 1 << 20) and not _costly(body, 8 << 20)
    assert not _costly(body, 0)  # no budget
    assert request_cost.byte_limit(60) == 10 and request_cost.byte_limit(0) == 0


class _Counted(bytes):
    """A body that says whether its objects were counted."""

    counted = 0

    def count(self, *args: Any) -> int:  # type: ignore[override]
        type(self).counted += 1
        return super().count(*args)


@pytest.mark.unit
def test_a_body_that_fits_even_as_all_objects_is_not_counted() -> None:
    body = _Counted(json.dumps({"messages": tiny(1000)}).encode())
    fits = request_cost.MOST_PER_BYTE * len(body)
    assert not _costly(body, fits) and _Counted.counted == 0
    assert not _costly(body, fits - 1) and _Counted.counted == 1  # counted: 1001 objects fit
    worst = b"{}" * 1000  # the most a byte can cost: the bound is exact for it
    assert request_cost.estimate(worst) == request_cost.MOST_PER_BYTE * len(worst)
    assert _costly(worst, request_cost.MOST_PER_BYTE * len(worst) - 1)


def _costly(body: bytes, budget: int) -> bool:
    return request_cost.must_count(body, budget) and request_cost.too_costly(body, budget, body.count(b"{"))


@pytest.mark.parametrize(("path", "headers", "shape"), [
    ("/v1/messages", ANTHROPIC, "anthropic"),
    ("/v1/chat/completions", OPENAI, "openai"),
    ("/v1beta/models/gemini-3-pro-preview:generateContent", GEMINI, "gemini"),
])
def test_a_body_of_many_objects_is_refused_before_it_is_decoded(gw: ServerProcess, sim: Sim, path: str,
                                                                 headers: dict[str, str], shape: str) -> None:
    n = 60_000  # 2.3 MB of JSON, about 75 MB at its peak: over the 40 MiB budget
    body = {"contents": [{"role": m["role"].replace("assistant", "model"), "parts": [{"text": m["content"]}]}
                         for m in tiny(n)]} if shape == "gemini" else \
        {"model": "claude-opus-4-5", "max_tokens": 16, "messages": tiny(n)}
    before = sim.stats()["requests"]
    r = httpx.post(gw.url + path, content=json.dumps(body).encode(), headers=headers, timeout=60)
    assert r.status_code == 413
    error = r.json()["error"]
    if shape == "anthropic":
        assert r.json()["type"] == "error" and error["type"] == "request_too_large"
    elif shape == "openai":
        assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
    else:
        assert error["code"] == 413 and error["status"] == "INVALID_ARGUMENT"
    assert f"{BUDGET_MB} MiB" in error["message"]
    assert sim.stats()["requests"] == before, "nothing reached the upstream"
    small = {"model": "claude-opus-4-5", "max_tokens": 16, "messages": tiny(101)}
    if shape != "gemini":
        assert httpx.post(gw.url + path, json=small, headers=headers, timeout=60).status_code == 200


def test_a_declared_length_over_the_budget_is_refused_before_the_body_is_read(gw: ServerProcess) -> None:
    """Headers promising 10 MB (60 MB at 6 bytes a byte) and no body at all: the 413 comes at once (a body the
    gateway waited for would end in the 408 of ``GATEWAY_BODY_TIMEOUT_S`` instead)."""
    url = urlsplit(gw.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: t\r\nx-api-key: sk-budget\r\nanthropic-version: 2023-06-01\r\n"
                  b"content-type: application/json\r\ncontent-length: 10000000\r\n\r\n")
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


@pytest.mark.parametrize(("path", "headers"), [("/v1/messages", ANTHROPIC), ("/v1/chat/completions", OPENAI)])
def test_a_replay_is_held_to_the_budget_by_what_it_added(gw: ServerProcess, sim: Sim, path: str,
                                                         headers: dict[str, str]) -> None:
    """A replay of a body the worker kept has only its new bytes counted (``replay_memo.Match.objects``): one that adds
    60,000 tiny messages to a counted, kept conversation is refused as that body sent fresh would be, and nothing
    reaches the upstream; one that adds a turn is served."""
    messages = tiny(3001, role="assistant")  # 110 KB: past what fits even as all ``{}``, so its objects are counted
    first = {"model": "claude-opus-4-5", "max_tokens": 16, "messages": messages}
    r = httpx.post(gw.url + path, content=json.dumps(first).encode(), headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    text = r.json()["content"][0]["text"] if "content" in r.json() else r.json()["choices"][0]["message"]["content"]
    grown = [*messages, {"role": "assistant", "content": text}]
    before = sim.stats()["requests"]
    big = {**first, "messages": [*grown, *tiny(60_000)[1:]]}
    r = httpx.post(gw.url + path, content=json.dumps(big).encode(), headers=headers, timeout=60)
    assert r.status_code == 413, r.text[:300]
    assert sim.stats()["requests"] == before, "nothing reached the upstream"
    turn = {**first, "messages": [*grown, {"role": "user", "content": "and then?"}]}
    r = httpx.post(gw.url + path, content=json.dumps(turn).encode(), headers=headers, timeout=60)
    assert r.status_code == 200, r.text[:300]

"""Metrics and logs of real ``thinkgate serve`` processes in front of the real simulator."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

import anthropic
import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port, scrape
from tests.support.e2e.helpers import run_tool_loop

BODY = {"model": "claude-opus-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "hello"}]}
HEADERS = {"x-api-key": "sk-test-workers", "anthropic-version": "2023-06-01"}


MESSAGES_OPUS = (("endpoint", "messages"), ("model", "claude-opus"), ("upstream", "anthropic"))  # BODY's series


def messages_total(m: dict[str, Any]) -> float:
    return sum(v for labels, v in m.get("gateway_requests_total", {}).items() if ("endpoint", "messages") in labels)


def per_worker(m: dict[str, Any]) -> dict[str, float]:
    return {dict(labels)["pid"]: v for labels, v in m.get("gateway_worker_requests", {}).items()}


def drive(gw: ServerProcess, n: int) -> None:
    for _ in range(n):  # a new connection per request: the kernel hands it to either worker
        r = httpx.post(gw.url + "/v1/messages", json=BODY, headers=HEADERS, timeout=10)
        assert r.status_code == 200, r.text


def wait_for(predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except httpx.HTTPError:  # a worker shutting down may drop the connection it just accepted
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)  # polling another process's state: there is nothing to await


def settled(m: dict[str, Any], served: int) -> dict[str, Any] | None:
    """The scrape if every per-request series counts exactly ``served`` requests (none pending), else None."""
    duration = m.get("gateway_request_duration_seconds_count", {})
    done = messages_total(m) == served == sum(per_worker(m).values()) \
        and duration.get(MESSAGES_OPUS) == served
    return m if done else None


def test_metrics_sum_both_workers_and_survive_worker_restarts(sim: Sim, gateways: GatewayFactory) -> None:
    # (stateless: several workers without Redis are refused, see below; the metrics are the same either way)
    gw = gateways.start(sim.url, {"GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_STATE_MACHINE_ENABLED": "false"}, workers=2)
    match = re.search(r"PROMETHEUS_MULTIPROC_DIR=(\S+)", gw.log())
    assert match, gw.log()
    mp_dir = match[1]
    assert os.path.isdir(mp_dir)

    served = 0
    while served < 400:  # until both workers answered some requests
        drive(gw, 10)
        served += 10
        workers = per_worker(scrape(gw))
        if len(workers) == 2 and all(v > 0 for v in workers.values()):
            break
    # Counters go up just after a response's last byte, so the last request's may land a moment after
    # its client returned: poll (bounded) until one scrape shows exactly the expected sums.
    m = wait_for(lambda: settled(scrape(gw), served))
    workers = per_worker(m)
    assert len(workers) == 2 and all(v > 0 for v in workers.values()), workers
    # whichever worker answers the scrape reports the sum of both
    assert messages_total(m) == served == sum(workers.values())
    assert wait_for(lambda: messages_total(scrape(gw)) == served)
    assert m["gateway_request_duration_seconds_count"][MESSAGES_OPUS] \
        == served

    # SIGHUP: hypercorn replaces both workers. Their live gauges leave (marked dead), counters stay.
    # Each new worker's gauge appears when that worker starts: wait for both, not just the first.
    old = set(workers)
    gw.proc.send_signal(signal.SIGHUP)
    new = wait_for(lambda: (w := set(per_worker(scrape(gw)))) and not (w & old) and len(w) == 2 and w)
    assert messages_total(scrape(gw)) == served  # the old workers' counters stay in the sum
    drive(gw, 5)
    assert wait_for(lambda: messages_total(scrape(gw)) == served + 5)
    assert set(per_worker(scrape(gw))) <= new

    gw.stop()
    assert not os.path.exists(mp_dir)  # the serve command created it and removed it


def test_two_workers_share_new_connections_evenly(sim: Sim, gateways: GatewayFactory) -> None:
    """Each worker listens on its own SO_REUSEPORT socket, so the kernel spreads connections between
    them; on hypercorn's one shared socket the worker awake in accept took nearly all of them."""
    gw = gateways.start(sim.url, {"GATEWAY_STATE_MACHINE_ENABLED": "false"}, workers=2)

    async def burst() -> None:  # 64 connections opened at once, as a loaded client pool does
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(limits=limits, timeout=20) as client:
            rs = await asyncio.gather(*(client.post(gw.url + "/v1/messages", json=BODY, headers=HEADERS)
                                        for _ in range(64)))
        assert all(r.status_code == 200 for r in rs)

    asyncio.run(burst())
    workers = per_worker(scrape(gw))
    assert len(workers) == 2, workers
    assert min(workers.values()) >= 16, workers  # a fair split is 32/32; binomial odds of < 16: ~3e-5


def _variants(text: str) -> list[str]:
    """``text`` as it could appear in a log: raw, JSON-escaped, and its longer lines."""
    out = [text, json.dumps(text)[1:-1]]
    out += [line.strip() for line in text.splitlines() if len(line.strip()) >= 16]
    return [v for v in out if v]


def test_no_key_signature_or_thinking_text_is_logged(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_LOG_LEVEL": "DEBUG", "GATEWAY_LOG_FORMAT": "json"})
    secret_part = secrets.token_hex(24)  # no "-" inside: the whole random part is checked below
    key = "sk-ant-api03-" + secret_part
    answers = []
    with anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0) as client:
        for stream in (False, True):
            result = run_tool_loop(client, "[[sim:tools=3]] weather in Paris, Rome, Oslo?", stream=stream)
            assert result.requests == 4
            answers += result.answers
    signatures = [b.signature for a in answers for b in a.content if b.type == "thinking"]
    thinking = [b.thinking for a in answers for b in a.content if b.type == "thinking"]
    assert len(signatures) >= 2 and all(signatures) and all(thinking)

    # Each access line is written just after its answer went out: stop the gateway (it drains the
    # requests in flight and exits) so the log is complete before it is read.
    gw.stop()
    assert gw.proc.returncode == 0, gw.log()
    log = gw.log()
    assert key not in log and secret_part not in log
    for sig in signatures:
        assert sig not in log
    for text in thinking:
        for variant in _variants(text):
            assert variant not in log, variant

    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    requests = [r for r in lines if r.get("logger") == "thinkgate.access" and r.get("msg") == "request"]
    assert len(requests) == 8
    assert {r["endpoint"] for r in requests} == {"messages"} and {r["status"] for r in requests} == {200}
    assert all(r["tenant"] and r["scid"] and r["request_id"].startswith("req_") for r in requests)
    assert {r["model"] for r in requests} == {"claude-opus-4-5"}
    assert any(r["actions"] for r in requests)  # verified thinking kept on replays
    assert all(isinstance(r["duration_ms"], float) for r in requests)


def upstream_errors(gw: ServerProcess) -> dict[str, float]:
    """kind -> gateway_upstream_errors_total{upstream="anthropic"} in the process's /metrics."""
    series = scrape(gw).get("gateway_upstream_errors_total", {})
    out: dict[str, float] = {}
    for labels, v in series.items():  # summed over the model label
        if ("upstream", "anthropic") in labels:
            out[dict(labels)["kind"]] = out.get(dict(labels)["kind"], 0.0) + v
    return out


def test_an_upstream_400_from_the_simulator_is_counted_by_kind(sim: Sim, gateways: GatewayFactory) -> None:
    """A forged signature never reaches the upstream (the sanitizer drops thinking no record vouches for,
    also with the state machine off), so the 400 that gets through is a parameter rule with parameter
    repair off: the simulator's real error body is classified as kind="params"."""
    gw = gateways.start(sim.url, {"GATEWAY_FIX_THINKING_PARAMS": "false", "GATEWAY_STATE_MACHINE_ENABLED": "false"})
    before = upstream_errors(gw)
    assert before.get("params") == 0  # the series exists from the start (alerts see the first increase)
    client = anthropic.Anthropic(base_url=gw.url, api_key="sk-test-upstream-400", max_retries=0)
    try:
        client.messages.create(model="claude-opus-4-5", max_tokens=4096, extra_body={"temperature": 0.2},
                               thinking={"type": "enabled", "budget_tokens": 2048},
                               messages=[{"role": "user", "content": "hello"}])
        raise AssertionError("the simulator accepted temperature 0.2 with thinking on")
    except anthropic.BadRequestError as e:
        assert "`temperature` may only be set to 1 when thinking is enabled" in str(e.message)
    finally:
        client.close()
    after = upstream_errors(gw)  # counted before the answer went out: no wait needed
    assert {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)} == {"params": 1}


def scid_lookups(gw: ServerProcess) -> dict[tuple[str, str], float]:
    series = scrape(gw).get("gateway_scid_lookups_total", {})
    return {(dict(labels)["via"], dict(labels)["result"]): v for labels, v in series.items()}


def test_another_tenants_scid_counts_as_foreign_and_is_served_as_a_new_conversation(
        sim: Sim, gateways: GatewayFactory, redis_url: str) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": "foreign-scid-secret-0123456789ab",
                                  "GATEWAY_STORE_TIMEOUT_MS": "2000"})
    owner = anthropic.Anthropic(base_url=gw.url, api_key="sk-tenant-a-foreign", max_retries=0)
    other = anthropic.Anthropic(base_url=gw.url, api_key="sk-tenant-b-foreign", max_retries=0)
    params: dict[str, Any] = {"model": "claude-opus-4-5", "max_tokens": 4096,
                              "thinking": {"type": "enabled", "budget_tokens": 2048}}
    try:
        raw = owner.messages.with_raw_response.create(
            **params, messages=[{"role": "user", "content": "the launch codes of tenant A"}])
        a_scid = raw.headers["x-ag-conversation-id"]
        a_answer = raw.parse()
        before = scid_lookups(gw)

        mine = [{"role": "user", "content": "hello from tenant B"}]
        b_raw = other.messages.with_raw_response.create(
            **params, messages=mine, extra_headers={"x-ag-conversation-id": a_scid})
        b_answer = b_raw.parse()
        after = scid_lookups(gw)  # counted in the load stage, before the upstream call
        # B is served as a new conversation: nothing of A's history reached the upstream or B
        assert sim.last()["body"]["messages"] == mine
        a_text = [b.thinking for b in a_answer.content if b.type == "thinking"]
        assert a_text and all(t not in b_raw.http_response.text for t in a_text)
        assert "launch codes" not in b_raw.http_response.text and b_answer.stop_reason == "end_turn"
        assert {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)} \
            == {("header", "foreign"): 1}

        # A's own conversation is untouched: A naming it is a hit, and its history is rebuilt
        owner.messages.create(**params, messages=[{"role": "user", "content": "and the second code?"}],
                              extra_headers={"x-ag-conversation-id": a_scid})
        assert scid_lookups(gw)[("header", "hit")] == after.get(("header", "hit"), 0) + 1
        assert sim.last()["body"]["messages"][0]["content"] == "the launch codes of tenant A"
    finally:
        owner.close()
        other.close()


@pytest.mark.process
def test_several_workers_without_a_shared_store_are_refused() -> None:
    """Issue 34 item 8: ``--workers 2`` without ``GATEWAY_REDIS_URL`` only warned and started (each worker its own
    embedded store), while the chart refuses the same setup: one line, exit 2, as any bad setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", str(free_port()), "--workers", "2"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-800:]
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("thinkgate: --workers 2 without GATEWAY_REDIS_URL: each worker would keep its own")

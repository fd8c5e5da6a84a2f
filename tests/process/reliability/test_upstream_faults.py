"""Upstream faults from the simulator reach every surface in its own dialect.

Real processes: the simulator, gateways on a real Redis. For each client dialect (Anthropic
/v1/messages, OpenAI /v1/chat/completions, Augment /gateway/chat-stream), streamed and not:
connection refused (502), slow first byte (served, or 504 past ``GATEWAY_READ_TIMEOUT_S``), 529
overloaded, 429 with ``retry-after`` (relayed), an ``overloaded_error`` event mid-stream and a
connection cut mid-stream (the dialect's in-stream error event, never a silent end). A turn cut
mid-stream is never recorded (the store holds nothing new; the export cannot find it). Retries
before the first byte (``GATEWAY_UPSTREAM_RETRIES``) are the same for every surface.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port
from tests.redis_fixtures import RedisServer
from tests.support.reliability.dialects import DIALECTS, client, headers_for, send

SECRET = "reliability-upstream-secret-0123"
READ_TIMEOUT_S = 0.5


def uniq() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def faulty_gw(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": SECRET,
                                  "GATEWAY_STORE_TIMEOUT_MS": "1000", "GATEWAY_READ_TIMEOUT_S": str(READ_TIMEOUT_S)})
    yield sp
    sp.stop()


@pytest.fixture(scope="module")
def refused_gw(gateways: GatewayFactory) -> Iterator[ServerProcess]:
    sp = gateways.start(f"http://127.0.0.1:{free_port()}", {"GATEWAY_CONNECT_TIMEOUT_S": "2"})
    yield sp
    sp.stop()


@pytest.fixture(scope="module")
def retry_gw(sim: Sim, gateways: GatewayFactory) -> Iterator[ServerProcess]:
    sp = gateways.start(sim.url, {"GATEWAY_UPSTREAM_RETRIES": "2", "GATEWAY_UPSTREAM_RETRY_MAX_DELAY_S": "2"})
    yield sp
    sp.stop()


# (fault marker, streamed) -> (status, error type, in-stream)
EXPECTED: dict[tuple[str, bool], tuple[int, str | None, bool]] = {
    ("overloaded", False): (529, "overloaded_error", False),
    ("overloaded", True): (529, "overloaded_error", False),
    ("ratelimit:7", False): (429, "rate_limit_error", False),
    ("ratelimit:7", True): (429, "rate_limit_error", False),
    ("midstream", False): (529, "overloaded_error", False),  # the simulator's non-stream form of it
    ("midstream", True): (200, "overloaded_error", True),
    ("drop", False): (502, "api_error", False),
    ("drop", True): (200, "api_error", True),
    ("slow:200", False): (200, None, False),
    ("slow:200", True): (200, None, False),
    ("slow:1500", False): (504, "api_error", False),   # no first byte within GATEWAY_READ_TIMEOUT_S
    ("slow:1500", True): (504, "api_error", False),
}
CASES = [(d, f, s) for d in DIALECTS for (f, s) in EXPECTED if s or d != "augment"]  # Augment always streams


@pytest.mark.parametrize(("dialect", "fault", "stream"), CASES,
                         ids=[f"{d}-{f}-{'stream' if s else 'create'}" for d, f, s in CASES])
def test_fault_reaches_the_client_in_its_dialect(faulty_gw: ServerProcess, dialect: str, fault: str,
                                                 stream: bool) -> None:
    out = send(faulty_gw.url, dialect, f"[[sim:fault={fault}]] [[sim:tools=1]] {uniq()}", stream=stream)
    status, etype, in_stream = EXPECTED[(fault, stream)]
    assert (out.status, out.error, out.in_stream) == (status, etype, in_stream), out.events[-2:]
    assert out.completed == (etype is None)
    if fault.startswith("ratelimit"):
        assert out.headers["retry-after"] == "7"


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_connection_refused_is_502_in_dialect(refused_gw: ServerProcess, dialect: str, stream: bool) -> None:
    out = send(refused_gw.url, dialect, f"hello {uniq()}", stream=stream)
    assert (out.status, out.error) == (502, "api_error")


def _dbsize(server: RedisServer) -> int:
    with server.client() as c:
        return int(c.dbsize())


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("fault", ["midstream", "drop"])
def test_a_turn_cut_mid_stream_is_never_recorded(faulty_gw: ServerProcess, redis_server: RedisServer,
                                                 dialect: str, fault: str) -> None:
    key = f"sk-cut-{uniq()}"
    before = _dbsize(redis_server)
    cut = send(faulty_gw.url, dialect, f"[[sim:fault={fault}]] [[sim:tools=1]] {uniq()}", key=key)
    assert cut.status == 200 and cut.in_stream and not cut.completed and cut.scid
    assert _dbsize(redis_server) == before, "a cut stream wrote to the store"
    export = client().get(f"{faulty_gw.url}/gateway/conversations/{cut.scid}", headers=headers_for(dialect, key))
    assert export.status_code == 404

    # Control: the same surface records a clean answer, which the next request finds.
    ok = send(faulty_gw.url, dialect, f"[[sim:tools=1]] {uniq()}", key=key)
    assert ok.status == 200 and ok.completed and ok.scid
    assert _dbsize(redis_server) > before
    export = client().get(f"{faulty_gw.url}/gateway/conversations/{ok.scid}", headers=headers_for(dialect, key))
    assert export.status_code == 200, export.text


# ------------------------------------------------------------------ retries before the first byte


def _requests(sim: Sim) -> int:
    return int(client().get(sim.url + "/_sim/stats").json()["requests"])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_retry_turns_a_transient_529_into_an_answer(sim: Sim, retry_gw: ServerProcess, dialect: str) -> None:
    before = _requests(sim)
    out = send(retry_gw.url, dialect, f"[[sim:fault=overloaded]] [[sim:fault_times=1]] {uniq()}")
    assert out.status == 200 and out.completed
    assert _requests(sim) - before == 2


def test_retry_honours_retry_after(sim: Sim, retry_gw: ServerProcess) -> None:
    before, t0 = _requests(sim), time.monotonic()
    out = send(retry_gw.url, "openai", f"[[sim:fault=ratelimit:1]] [[sim:fault_times=1]] {uniq()}", stream=False)
    assert out.status == 200 and out.completed
    assert time.monotonic() - t0 >= 0.95
    assert _requests(sim) - before == 2


def test_retry_after_beyond_the_cap_is_relayed_at_once(sim: Sim, retry_gw: ServerProcess) -> None:
    before, t0 = _requests(sim), time.monotonic()
    out = send(retry_gw.url, "anthropic", f"[[sim:fault=ratelimit:30]] [[sim:fault_times=1]] {uniq()}")
    assert (out.status, out.error) == (429, "rate_limit_error") and out.headers["retry-after"] == "30"
    assert time.monotonic() - t0 < 1.5 and _requests(sim) - before == 1


def test_retries_are_bounded(sim: Sim, retry_gw: ServerProcess) -> None:
    before = _requests(sim)
    out = send(retry_gw.url, "openai", f"[[sim:fault=overloaded]] [[sim:fault_times=5]] {uniq()}")
    assert (out.status, out.error) == (529, "overloaded_error")
    assert _requests(sim) - before == 3  # the first attempt + GATEWAY_UPSTREAM_RETRIES=2


def test_no_retry_once_the_stream_started(sim: Sim, retry_gw: ServerProcess) -> None:
    before = _requests(sim)
    out = send(retry_gw.url, "anthropic", f"[[sim:fault=midstream]] [[sim:fault_times=1]] {uniq()}")
    assert (out.status, out.error, out.in_stream) == (200, "overloaded_error", True)
    assert _requests(sim) - before == 1


def test_default_is_no_retry(sim: Sim, faulty_gw: ServerProcess) -> None:
    before = _requests(sim)
    out = send(faulty_gw.url, "augment", f"[[sim:fault=overloaded]] [[sim:fault_times=1]] {uniq()}")
    assert out.status == 529 and _requests(sim) - before == 1


def test_redis_keys_of_a_clean_turn_carry_a_ttl(faulty_gw: ServerProcess, redis_server: RedisServer) -> None:
    out = send(faulty_gw.url, "anthropic", f"[[sim:tools=1]] {uniq()}", key=f"sk-ttl-{uniq()}")
    assert out.completed
    with redis.Redis(port=redis_server.port) as c:
        assert all(c.ttl(k) > 0 for k in c.scan_iter(count=1000))

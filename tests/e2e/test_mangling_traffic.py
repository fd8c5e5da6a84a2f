"""Issue 23 item 4, the short form: the mangling matrices under realistic traffic (``tests/e2e/traffic.py``).

Every client surface x upstream pair plays ``PER_CELL`` mangled tool-loop conversations (cases in turn, stream
and header alternating), all cells mixed, ``WORKERS`` conversations in flight at once, two tenants, every
request on the other replica than the one before: two gateway processes on one real redis-server in front of
the strict simulator (through the recording proxy). Played twice, on two pairs of replicas:

- ``GATEWAY_STATE_MACHINE_ENABLED`` on: zero upstream 4xx, every conversation completes, and every replayed
  turn reaches the upstream with its thinking (every turn has a record: the gateway relayed it), no stateless
  fallback;
- off: zero upstream 4xx and every conversation completes (the sanitizer alone holds the invariants).

The two runs take the cases from different offsets, so between them twice as many cases are played. The long
form (every case in every stream x header combination) is ``bench/mangling_traffic.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.traffic import CELLS, plan, run
from tests.gemini.helpers import gateway_env
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.reliability.recording_proxy import RecordingProxy

PER_CELL = 3
WORKERS = 12
MIN_IN_FLIGHT = 8


@dataclass
class Replicas:
    proxy: RecordingProxy
    on: tuple[ServerProcess, ServerProcess]
    off: tuple[ServerProcess, ServerProcess]


@pytest.fixture(scope="module")
def replicas(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[Replicas]:
    proxy = RecordingProxy(sim.url).start()
    env = {k: v.replace(sim.url, proxy.url) for k, v in gateway_env(sim).items()}
    env |= {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "issue-23-traffic-0123456789abcdef01",
            "GATEWAY_STORE_TIMEOUT_MS": "1000", "GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_LOG_FORMAT": "json"}
    off = {**env, "GATEWAY_STATE_MACHINE_ENABLED": "false"}
    started = [gateways.start(proxy.url, e) for e in (env, env, off, off)]
    try:
        yield Replicas(proxy, (started[0], started[1]), (started[2], started[3]))
    finally:
        for sp in started:
            sp.stop()
        proxy.close()


@pytest.mark.timeout(180)
def test_every_cell_state_machine_on(replicas: Replicas, sim: Sim) -> None:
    report = run(replicas.on, replicas.proxy, sim, plan(per_cell=PER_CELL), workers=WORKERS, mode="on")
    print(report.table())
    assert len(report.cells) == len(CELLS)
    assert report.totals().replayed > 0
    found = report.problems(keep_thinking=True, min_in_flight=MIN_IN_FLIGHT)
    assert not found, report.table() + "\n" + "\n".join(found)


@pytest.mark.timeout(180)
def test_every_cell_state_machine_off(replicas: Replicas, sim: Sim) -> None:
    report = run(replicas.off, replicas.proxy, sim, plan(per_cell=PER_CELL, offset=PER_CELL), workers=WORKERS,
                 mode="off")
    print(report.table())
    assert len(report.cells) == len(CELLS)
    assert report.totals().stateless == report.requests, "the state machine is off: every request is stateless"
    found = report.problems(keep_thinking=False, min_in_flight=MIN_IN_FLIGHT)
    assert not found, report.table() + "\n" + "\n".join(found)

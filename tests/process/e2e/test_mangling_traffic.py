"""Issue 23 item 4, the short form: the mangling matrices under realistic traffic (``tests/support/e2e/traffic.py``).

Every client surface x upstream pair plays ``PER_CELL`` mangled tool-loop conversations (cases in turn, stream
and header alternating), all cells mixed, ``WORKERS`` conversations in flight at once, two tenants, every
request on the other replica than the one before: two gateway processes on one real redis-server in front of
the strict simulator (through the recording proxy, which relays every upstream answer in small pieces cut at
seeded offsets: the run checks that the replicas read streams cut at every kind of awkward place). Played once per
module and mode, on two pairs of replicas:

- ``GATEWAY_STATE_MACHINE_ENABLED`` on: per cell zero upstream 4xx, every conversation completes, every replayed
  turn reaches the upstream with its thinking (every turn has a record: the gateway relayed it), no stateless
  fallback;
- off: per cell zero upstream 4xx and every conversation completes (the sanitizer alone holds the invariants).

Each mode's run is checked as a whole (conversations in flight, tenants, no other conversation's content
upstream, the access log and ``gateway_stateless_requests_total`` agreeing), then cell by cell. The two runs take
the cases from different offsets, so between them twice as many cases are played (every case of the smaller
cells). The long form (every case in
every stream x header combination) is ``bench/mangling_traffic.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.traffic import CELLS, SPLIT_SEED, Report, plan, replica_env, run
from tests.support.reliability.recording_proxy import RecordingProxy
from tests.support.reliability.stream_cuts import CUT_CLASSES

PER_CELL = 4
WORKERS = 16  # (issue 36: "two replicas, 16 in flight")
MIN_IN_FLIGHT = 12
CELL_IDS = [c.id for c in CELLS]
RESPONSES_CELLS = [c for c in CELLS if c.surface == "responses"]


@dataclass
class Traffic:
    proxy: RecordingProxy
    sim: Sim
    replicas: dict[str, tuple[ServerProcess, ServerProcess]]
    reports: dict[str, Report] = field(default_factory=dict)

    def report(self, mode: str) -> Report:
        """The mode's run (played on first use, then shared by the module's tests)."""
        if mode not in self.reports:
            # off takes each cell's first cases (the OpenAI-compatible tables open with the fields each upstream
            # needs back dropped), on the ones after them
            convs = plan(per_cell=PER_CELL, offset=PER_CELL if mode == "on" else 0)
            self.reports[mode] = run(self.replicas[mode], self.proxy, self.sim, convs, workers=WORKERS, mode=mode)
            print(self.reports[mode].table())
        return self.reports[mode]


@pytest.fixture(scope="module")
def traffic(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    proxy = RecordingProxy(sim.url, split_seed=SPLIT_SEED).start()
    env = replica_env(sim, proxy, redis_server.url, "issue-23-traffic-0123456789abcdef01",
                      tmp_path_factory.mktemp("traffic"))
    off = {**env, "GATEWAY_STATE_MACHINE_ENABLED": "false"}
    started = [gateways.start(proxy.url, e) for e in (env, env, off, off)]
    try:
        yield Traffic(proxy, sim, {"on": (started[0], started[1]), "off": (started[2], started[3])})
    finally:
        for sp in started:
            sp.stop()
        proxy.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["on", "off"])
def test_the_run_is_realistic_traffic(traffic: Traffic, mode: str) -> None:
    """Every cell played, at least ``MIN_IN_FLIGHT`` conversations at once, two tenants; no upstream request
    carries another conversation's content; the access log counts the stateless requests the metric counts."""
    report = traffic.report(mode)
    assert sorted(report.cells) == sorted(CELL_IDS)
    assert report.max_in_flight >= MIN_IN_FLIGHT and report.tenants == 2
    assert all(len(r.tenants) == 2 for r in report.cells.values()), "every cell plays both tenants"
    assert report.foreign == 0, "an upstream request carried another conversation's content"
    # the replicas read their upstream streams cut at every kind of awkward place
    assert report.stream.streamed > 0 and report.stream.pieces > 10 * report.stream.streamed, report.stream
    assert set(report.stream.cuts) == set(CUT_CLASSES), report.stream
    totals = report.totals()
    assert totals.stateless == report.stateless_metric
    if mode == "on":
        assert totals.replayed > 0 and report.stateless_metric == 0
    else:  # but a replay that needs records (a bare reference, previous_response_id alone) is refused, not served
        unserved = sum(r.refused_cases.get(case, 0) for r in report.cells.values()
                       for case in ("references", "previous"))
        assert unserved == totals.refused > 0
        assert totals.stateless == report.requests - unserved, "the state machine is off: every request is stateless"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cell", CELL_IDS)
def test_state_machine_on(traffic: Traffic, cell: str) -> None:
    """Zero upstream 4xx, every conversation completed, thinking on every replayed turn, no stateless fallback."""
    r = traffic.report("on").cells[cell]
    assert r.clean, f"{r.cell}: {r.runs} runs, {r.completed} completed, {r.upstream_4xx} upstream 4xx, {r.samples}"
    assert r.kept == r.replayed, f"thinking kept on {r.kept} of {r.replayed} replayed turns"
    assert r.stateless == 0
    assert r.refused == 0, "records exist: no replay is refused"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cell", CELL_IDS)
def test_state_machine_off(traffic: Traffic, cell: str) -> None:
    """Zero upstream 4xx and every conversation completed, with the sanitizer alone."""
    r = traffic.report("off").cells[cell]
    assert r.clean, f"{r.cell}: {r.runs} runs, {r.completed} completed, {r.upstream_4xx} upstream 4xx, {r.samples}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cell", [c.id for c in RESPONSES_CELLS])
def test_state_machine_off_responses_surface(traffic: Traffic, cell: str) -> None:
    """Without records a Responses client's reasoning items are all there is. Replayed as received, they carry the
    thinking of every upstream kind (the gateway seals it into the ``encrypted_content``, a Responses upstream's own
    reasoning items too) on every turn; without reasoning items or without
    ``encrypted_content``, none (degraded, never forged). Bare references need the records: refused with the API's
    404 before any upstream request (``traffic_clients.REFUSALS``), never a 4xx upstream."""
    r = traffic.report("off").cells[cell]
    played = r.by_case
    assert {"faithful", "drop_reasoning", "drop_encrypted", "references"} <= set(played), played
    kept, replayed = played["faithful"]
    assert replayed > 0 and kept == replayed, played
    assert played["drop_reasoning"][0] == played["drop_encrypted"][0] == 0, played
    assert r.refused > 0 and r.clean, (r.refused, r.samples)

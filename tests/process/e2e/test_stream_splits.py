"""Upstream streams split at every hard place at once, for every client surface x upstream pair of the traffic matrix.

The recording proxy between two gateway replicas and the strict simulator cuts every upstream read it relays at each
hard place (``stream_cuts.HardCutter``): between every ``\\r`` and ``\\n`` (Gemini's SSE ends its lines with CRLF),
inside every multi-byte UTF-8 character (the simulator's thinking text holds two-, three- and four-byte ones), just
after every backslash of a JSON escape and inside every field name, each piece written alone. The seeded run of the
traffic matrix (``test_mangling_traffic.py``) hits these places at random; here every one is hit in every stream:
Anthropic events, Gemini ``streamGenerateContent?alt=sse`` chunks, OpenAI-compatible chunks and ``data: [DONE]``, and
OpenAI Responses events. Every conversation plays streamed (two cases of each cell, with and without the
conversation-id header) and must complete with zero upstream 4xx and its thinking on every replayed turn: the strict
simulator checks the signature over the exact thinking bytes the gateway recorded from the split stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.process_fixtures import GatewayFactory, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.traffic import CELLS, Report, plan, replica_env, run
from tests.support.reliability.recording_proxy import RecordingProxy


@pytest.fixture(scope="module")
def report(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    proxy = RecordingProxy(sim.url, hard_cuts=True).start()
    env = replica_env(sim, proxy, redis_server.url, "stream-splits-0123456789abcdef0123456",
                      tmp_path_factory.mktemp("splits"))
    replicas = [gateways.start(proxy.url, env) for _ in range(2)]
    try:
        convs = [dataclasses.replace(c, stream=True, header=c.index % 2 == 0) for c in plan(per_cell=2)]
        result = run(replicas, proxy, sim, convs, workers=8)
        print(result.table())
        yield result
    finally:
        for sp in replicas:
            sp.stop()
        proxy.close()


@pytest.mark.timeout(180)
def test_every_stream_was_split_at_every_hard_place(report: Report) -> None:
    cuts = report.stream.cuts
    assert report.stream.streamed >= len(CELLS) * 2, report.stream
    assert cuts.get("crlf", 0) > 0 and cuts.get("utf8", 0) > 0 and cuts.get("json_string", 0) > 0, report.stream
    assert not report.rejections and report.foreign == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cell", [c.id for c in CELLS])
def test_split_streams_complete_and_keep_their_thinking(report: Report, cell: str) -> None:
    r = report.cells[cell]
    assert r.clean, f"{r.cell}: {r.runs} runs, {r.completed} completed, {r.upstream_4xx} upstream 4xx, {r.samples}"
    assert r.kept == r.replayed and r.stateless == 0 and r.refused == 0, (r.kept, r.replayed, r.stateless)

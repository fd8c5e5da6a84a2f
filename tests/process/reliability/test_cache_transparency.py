"""Issue 31, item 2: the per-worker caches are transparent. Whatever a replica holds, the upstream receives the same
bytes for the same conversation.

Every client surface x upstream pair of the traffic matrix (``tests/support/e2e/traffic.py``: every cell, its cases in
turn,
the issue's three client shapes among the Anthropic ones), each conversation played once per way of serving it,
all on one real redis-server:

- ``warm``: every request by one replica, which holds whatever its caches kept of the conversation;
- ``alternating``: every request by the other replica than the one before;
- ``cold``: each request by a replica that never saw the conversation (one process per step);
- ``off``: a replica with every continuation switched off (no conversation cache, no replay memo, no spliced or
  carried stage priors);
- ``lagging``: the first request by one replica, the next three by another, the rest by the first again, which
  holds the conversation as it was three turns earlier.

The first way (``warm``) is played against the strict simulator through a proxy that keeps every answer; the others
get the very same answers from the proxy, byte for byte, for the very same request bodies, so their clients send
the very same histories: any difference in what a way sends upstream is the gateway's. Each conversation's
sequence of upstream request bodies must be byte-identical in every way. Each way is played by its own tenant (its
own API key), so no way reads another's records.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.traffic import CELLS as ALL_CELLS
from tests.support.e2e.traffic import CLOUD_UPSTREAMS, replica_env
from tests.support.e2e.traffic import plan as traffic_plan
from tests.support.e2e.traffic_clients import PLAY, Conv
from tests.support.reliability.recording_proxy import Exchange, RecordingProxy

WAYS = ("warm", "alternating", "cold", "off", "lagging")
STEPS = 8  # the most requests a conversation of the matrix makes (its flows included)
PER_CELL = int(os.environ.get("TG_TRANSPARENCY_PER_CELL", "2"))
# the issue's client shapes, played in every run beside the cells' cases in turn
ISSUE_CASES = ("drop_latest_assistant", "collapse_text_blocks", "split_parallel_calls", "split_parallel_calls_grouped")
# The proxy tells the ways apart by the client credential each upstream request carries (each way is its own
# tenant); a cloud platform receives the gateway's own credential instead, whatever the tenant, so its cells cannot be
# told apart here. The bytes a cloud cell sends are the Anthropic (Gemini) cell's through one deterministic rewrite
# (``finish``) after every cache; those cells are compared, the cloud ones play in
# tests/process/e2e/test_mangling_traffic.py.
CELLS = tuple(c for c in ALL_CELLS if c.upstream not in CLOUD_UPSTREAMS)
OFF = {"GATEWAY_LOAD_CACHE_MB": "0", "GATEWAY_REPLAY_MEMO_MB": "0",
       "GATEWAY_CONTINUATIONS_OFF": "splice,carried_repair,carried_sanitize"}


@dataclass
class Replicas:
    proxy: RecordingProxy
    warm: ServerProcess
    other: ServerProcess
    off: ServerProcess
    cold: list[ServerProcess]

    def schedule(self, way: str) -> list[str]:
        """The replica of each request of a conversation, by its step (``Conv.url`` with ``index`` 0)."""
        w, o = self.warm.url, self.other.url
        return {"warm": [w] * STEPS, "alternating": [w, o] * (STEPS // 2), "off": [self.off.url] * STEPS,
                "cold": [sp.url for sp in self.cold], "lagging": [w, o, o, o] + [w] * (STEPS - 4)}[way]


@pytest.fixture(scope="module")
def replicas(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    proxy = RecordingProxy(sim.url, answers=True).start()
    env = replica_env(sim, proxy, redis_server.url, "issue-31-transparency-0123456789a",
                      tmp_path_factory.mktemp("transparency"))
    started = [gateways.start(proxy.url, env) for _ in range(2)] + [gateways.start(proxy.url, env | OFF)]
    cold = [gateways.start(proxy.url, env) for _ in range(STEPS)]
    try:
        yield Replicas(proxy, started[0], started[1], started[2], cold)
    finally:
        for sp in [*started, *cold]:
            sp.stop()
        proxy.close()


def conversations(tag: str) -> list[Conv]:
    convs = traffic_plan(CELLS, per_cell=PER_CELL, tag=tag)
    anthropic_cell = next(c for c in CELLS if c.surface == "anthropic")
    n = len(convs)
    convs += [Conv(n + k, f"t{n + k}-{tag}", anthropic_cell, case, stream, header, "")
              for k, (case, stream, header) in enumerate(
                  (case, stream, header) for case in ISSUE_CASES for stream, header in ((False, True), (True, False)))]
    return convs


def as_played(conv: Conv, way: str, tag: str) -> Conv:
    """The conversation as one way plays it: its own tenant, its requests by the way's schedule."""
    return dataclasses.replace(conv, index=0, key=f"sk-transparency-{way}-{conv.index}-{tag}", requests=0,
                               scids=[], completed=False, refused=None, errors=[])


def play(replicas: Replicas, convs: Sequence[Conv], way: str) -> None:
    urls = replicas.schedule(way)

    def one(conv: Conv) -> None:
        try:
            PLAY[conv.cell.surface](conv, urls)
        except Exception as e:  # a failure is a finding: the comparison shows where the ways parted
            conv.errors.append(f"{type(e).__name__}: {str(e)[:300]}")

    with ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(one, convs))


def bodies(exchanges: list[Exchange]) -> list[bytes]:
    return [orjson.dumps(e.body, option=orjson.OPT_SORT_KEYS) for e in exchanges]


def difference(want: list[bytes], got: list[bytes]) -> str:
    for n, (a, b) in enumerate(zip(want, got, strict=False)):
        if a != b:
            diff = difflib.unified_diff(a.decode(errors="replace").split(',"'), b.decode(errors="replace").split(',"'),
                                        lineterm="", n=1)
            return f"upstream request {n} differs: " + " | ".join(list(diff)[2:14])
    return f"{len(got)} upstream requests, {len(want)} when warm"


@pytest.mark.timeout(600)
def test_the_upstream_receives_the_same_bytes_however_the_replicas_serve_the_conversation(
        replicas: Replicas) -> None:
    tag = uuid.uuid4().hex[:8]
    base = conversations(tag)
    played = {way: [as_played(c, way, tag) for c in base] for way in WAYS}
    play(replicas, played["warm"], "warm")  # against the simulator: the proxy keeps every answer
    with ThreadPoolExecutor(max_workers=len(WAYS) - 1) as pool:
        list(pool.map(lambda way: play(replicas, played[way], way), WAYS[1:]))
    proxy = replicas.proxy
    problems: list[str] = []
    compared = requests = 0
    cells = set()
    for k, conv in enumerate(base):
        warm = played["warm"][k]
        want = bodies(proxy.of(conv.name, warm.key))
        if warm.errors or not want:
            problems.append(f"{conv.cell.id} {conv.case}: the warm play failed: {warm.errors}")
            continue
        cells.add(conv.cell.id)
        for way in WAYS[1:]:
            mine = played[way][k]
            exchanges = proxy.of(conv.name, mine.key)
            got = bodies(exchanges)
            requests += len(got)
            compared += 1
            if got != want:
                problems.append(f"{conv.cell.id} {conv.case} (stream={conv.stream}, header={conv.header}) {way}: "
                                f"{difference(want, got)}; client errors {mine.errors}")
            elif not all(e.replayed for e in exchanges):
                problems.append(f"{conv.cell.id} {conv.case} {way}: an answer was not the warm play's")
    figures = (f"{len(base)} conversations x {len(WAYS)} ways ({compared} compared, {requests} upstream requests "
               f"besides the warm ones), {len(cells)} of {len(CELLS)} cells")
    print(figures)
    assert not problems, figures + "\n" + "\n".join(problems[:40])
    assert cells == {c.id for c in CELLS}

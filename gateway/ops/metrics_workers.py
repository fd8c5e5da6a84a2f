"""The metrics' exposition and their life in each worker: ``GET /metrics`` (``metrics_endpoint``), every known series
created at 0 when a worker starts (``zero_series``, ``worker_started``) and a worker's live gauges gone when it stops
(``worker_stopped``). The metrics themselves are defined in ``gateway.ops.metrics``.

Multi-worker: under ``PROMETHEUS_MULTIPROC_DIR`` (``thinkgate serve --workers N`` creates it, see
``multiprocess_dir``) workers write to files there and ``/metrics`` merges them all; counters of
exited workers stay in the sum, live gauges of dead ones leave it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client import multiprocess as mp
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway.ops.metrics import LABELLED, LABELS, STORE_CIRCUIT_OPEN, UPSTREAMS, child, label

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MULTIPROCESS = MULTIPROC_ENV in os.environ  # decided at import, as prometheus_client does
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes
_LIVE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db")
log = logging.getLogger("thinkgate.metrics")


def registry() -> CollectorRegistry:
    if not MULTIPROCESS:
        return REGISTRY
    reg = CollectorRegistry()
    mp.MultiProcessCollector(reg)  # every worker's files, merged
    return reg


async def metrics_endpoint(request: HTTPRequest) -> Response:
    """``GET /metrics`` (Prometheus text format)."""
    data = await run_in_threadpool(generate_latest, registry())
    return Response(data, headers={"content-type": TEXT_FORMAT})


# Labels whose values come from the traffic (the model, the tenant) start with their catch-all only; every other label
# starts with its whole closed vocabulary but "other" (``upstream``: the configured upstreams, ``zero_series``).
TRAFFIC_LABELS = frozenset({"model", "tenant", "key"})


def zero_series(upstreams: Iterable[str] = ()) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(metric name, label values) of every series ``worker_started`` creates at 0: for each labelled metric in
    ``LABELS``, every combination of its labels' start values (``TRAFFIC_LABELS``)."""
    configured = frozenset(label(u, UPSTREAMS) for u in upstreams) - {"other"}
    for name in LABELLED:
        if not LABELS[name]:
            continue
        values = [configured if lab == "upstream" else frozenset({"other"}) if lab in TRAFFIC_LABELS
                  else allowed - {"other"} for lab, allowed in LABELS[name].items()]
        for combo in itertools.product(*(sorted(v) for v in values)):
            yield name, combo


def worker_started(upstreams: Iterable[str] = ()) -> None:
    """Lifespan start: every labelled series with a known label set at 0 (``zero_series``: a rate panel or an alert
    has a series to read before the first event, and a counter born at 1 would hide its first increase), and drop
    live gauges left by workers that died without cleaning up."""
    for name, values in zero_series(upstreams):
        child(LABELLED[name], *values)
    STORE_CIRCUIT_OPEN.set(0)
    if MULTIPROCESS:
        _reap_dead_workers(os.environ[MULTIPROC_ENV])


def worker_stopped() -> None:
    """Lifespan end: this worker's live gauges leave the merge (its counters stay in the sum)."""
    if MULTIPROCESS:
        mp.mark_process_dead(os.getpid())


def _reap_dead_workers(path: str) -> None:
    for pid in {int(m[1]) for m in map(_LIVE_FILE.fullmatch, os.listdir(path)) if m} - {os.getpid()}:
        with contextlib.suppress(PermissionError):  # PermissionError: alive, someone else's
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                mp.mark_process_dead(pid, path)


@contextlib.contextmanager
def multiprocess_dir(workers: int) -> Iterator[str | None]:
    """``thinkgate serve``: with more than one worker and no ``PROMETHEUS_MULTIPROC_DIR``, create a
    fresh directory and export it before the workers spawn; remove it when serving ends. A directory
    the operator set is used as is (and must be emptied by them between runs)."""
    if workers <= 1 or os.environ.get(MULTIPROC_ENV):
        yield os.environ.get(MULTIPROC_ENV) or None
        return
    path = tempfile.mkdtemp(prefix="thinkgate-metrics-")
    os.environ[MULTIPROC_ENV] = path
    log.info("metrics: %d workers share %s=%s", workers, MULTIPROC_ENV, path)
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)

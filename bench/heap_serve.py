"""Bench only: ``thinkgate serve`` (one worker, this process) with ``tracemalloc`` on, to see what holds a served
worker's memory. Never part of the gateway: the gateway has no switch for it; ``bench/memory.py --heap DIR`` starts
the worker through this file instead of ``python -m gateway serve``.

    BENCH_HEAP_DIR=/tmp/heap python bench/heap_serve.py serve --port 8080

- ``SIGUSR1`` writes a snapshot of what is allocated now to ``$BENCH_HEAP_DIR/now-N.snap``; the first one (the
  idle worker) also starts the watcher (not during start-up, whose imports would be snapshotted at every step).
- The watcher thread snapshots the heap whenever what is traced exceeds the last peak snapshot by 4 MiB
  (``peak.snap``, overwritten): what was alive at the worker's peak, which is what its RSS keeps.
- ``$BENCH_HEAP_DIR/traced.json``: tracemalloc's current bytes and the highest peak it saw (read before each
  snapshot, whose own lists would count: the peak is reset after each), written with each snapshot.

Read the snapshots with ``bench/memory.py --heap-report DIR``. Tracing costs CPU (several times slower): the
figures are where memory goes, not how fast.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FRAMES = int(os.environ.get("BENCH_HEAP_FRAMES", "16"))
STEP = 4 << 20  # a new peak snapshot only when the traced memory grew by this much over the last one
OUT = Path(os.environ.get("BENCH_HEAP_DIR", "."))
_count = itertools.count()
_lock = threading.Lock()
_peak = [0]


def _write(name: str) -> None:
    with _lock:
        current, peak = tracemalloc.get_traced_memory()
        _peak[0] = max(_peak[0], peak)
        snap = tracemalloc.take_snapshot()
        snap.dump(str(OUT / name))
        del snap
        tracemalloc.reset_peak()
        (OUT / "traced.json").write_text(json.dumps({"current": current, "peak": _peak[0], "last": name}))


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # (off the event loop's thread: a snapshot takes a while, and the watcher may hold the lock)
    n = next(_count)
    threading.Thread(target=_write, args=(f"now-{n}.snap",), daemon=True).start()
    if n == 0:
        threading.Thread(target=_watch, daemon=True).start()


def _watch() -> None:
    best = tracemalloc.get_traced_memory()[0]
    while True:
        time.sleep(0.02)
        current, _ = tracemalloc.get_traced_memory()
        if current > best + STEP:
            best = current
            _write("peak.snap")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(FRAMES)
    signal.signal(signal.SIGUSR1, _on_signal)
    from gateway.app.cli import main as gateway_main

    return gateway_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

"""The short form of ``bench/store_bench.py`` (the store benchmark), so the benchmark keeps working.

Three samples per figure: the numbers mean nothing here; the run must complete against every backend
(embedded, a real redis-server, a real 3-master Cluster and a TLS-only redis-server through ``state.resp`` and
through redis-py), and the report must hold both tables with a numeric value in every cell.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = 3
LATENCY_HEADER = ("| backend | turns | load p50 ms | load p99 ms | SCID-only p50 | p99 | record p50 ms "
                  "| record p99 ms | load CPU us | record CPU us |")
BYTES_HEADER = ("| JSON content | msgpack (no compression) | stored record | Redis lists MEMORY USAGE/turn "
                "| all keys incl. indexes MEMORY USAGE/turn |")
NUMBER = re.compile(r"\d+(\.\d+)?")


def table_after(lines: list[str], header: str) -> list[list[str]]:
    """The cells of the body rows of the markdown table whose header line is ``header``."""
    start = lines.index(header)
    assert lines[start + 1].startswith("| ---")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.mark.timeout(120)
@pytest.mark.process
def test_store_bench_short_form_reports_every_backend_and_size() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "store_bench.py"), "--samples", str(SAMPLES),
                           "--cluster", "--tls"], capture_output=True, text=True, timeout=100, check=False, cwd=ROOT)
    if done.returncode and "no redis-server here serves TLS" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert re.fullmatch(rf"redis-server \d+\.\d+\.\d+; TLS: \S+ \d+\.\d+\.\d+ on 127\.0\.0\.1, Python 3\.\d+\.\d+, "
                        rf"{SAMPLES} samples each", lines[0]), lines[0]

    latency = table_after(lines, LATENCY_HEADER)
    backends = ("memory", "redis", "redis-cluster", "redis-tls", "redis-tls (redis-py)")
    assert [(r[0], r[1]) for r in latency] == [(backend, n) for backend in backends for n in ("10", "100", "500")]
    for row in latency:
        assert len(row) == 10 and all(NUMBER.fullmatch(c) for c in row[2:]), row
        figures = [float(c) for c in row[2:]]
        assert all(f > 0 for f in figures), row
        for p50, p99 in zip(figures[:6:2], figures[1:6:2], strict=True):
            assert p99 >= p50, row

    assert "bytes per turn (100 turns;" in done.stdout
    (sizes,) = table_after(lines, BYTES_HEADER)
    stored = re.fullmatch(r"(\d+) \((\d+)% of JSON\)", sizes[2])
    assert stored, sizes
    json_bytes, msgpack_bytes, lists_mem, all_mem = (int(sizes[i]) for i in (0, 1, 3, 4))
    assert min(json_bytes, msgpack_bytes, int(stored[1]), lists_mem, all_mem) > 0
    assert abs(int(stored[2]) - 100 * int(stored[1]) / json_bytes) <= 1  # both columns are rounded means
    assert all_mem >= lists_mem  # every key, indexes included, holds at least the conversation lists

"""The short form of ``bench/cpu_ab.py`` (CPU per request, builds side by side), so the benchmark keeps working:
every target answers every request and gets a row with a CPU figure; a bad target fails loudly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.process
def test_cpu_ab_short_form_reports_every_target(stream: bool) -> None:
    targets = ["bare", ".", ".:GATEWAY_REDIS_URL="]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_ab.py"), ",".join(targets),
                           "--requests", "60", "--rounds", "1", "--turns", "4",  # >= a few 10 ms ticks of CPU each
                           *(["--stream"] if stream else [])],
                          capture_output=True, text=True, timeout=110, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {m[1]: (float(m[2]), float(m[3])) for m in re.finditer(r"^\| (\S+) \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|",
                                                               done.stdout, re.M)}
    assert set(rows) == set(targets), done.stdout
    assert all(cpu > 0 and first > 0 for cpu, first in rows.values()), rows
    assert ("time to first byte" in done.stdout) == stream


@pytest.mark.timeout(60)
@pytest.mark.process
def test_a_target_that_is_not_a_tree_fails() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_ab.py"), "/nonexistent-tree",
                           "--requests", "2", "--rounds", "1"],
                          capture_output=True, text=True, timeout=50, check=False, cwd=ROOT)
    assert done.returncode != 0

"""The short form of ``bench/stage_timer.py`` (wall time per pipeline stage, in process), so the benchmark keeps
working: every stage a request goes through gets a row with a figure, faithful and mangled."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mangled", [False, True])
@pytest.mark.process
def test_stage_timer_short_form_times_every_stage(mangled: bool) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "stage_timer.py"), "--turns", "3", "--requests", "4",
                           *(["--mangled"] if mangled else [])],
                          capture_output=True, text=True, timeout=110, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {m[1]: float(m[2]) for m in re.finditer(r"^\| (\w+) \| ([\d.]+) \|$", done.stdout, re.M)}
    stages = {"decode", "take", "load", "build_query", "repair_and_sanitize", "repair", "sanitize_from", "encode",
              "record", "turn_record", "keep"}
    assert stages <= set(rows), done.stdout
    assert all(rows[s] > 0 for s in stages), rows

"""The test tiers as collected: ``pytest -m unit`` picks no soak (a ``slow`` test is always ``process``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.process
def test_the_unit_tier_collects_no_slow_soak() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "unit", "-p", "no:randomly",
                          "tests/reliability/test_soak.py"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    collected = [line for line in out.stdout.splitlines() if "::" in line]
    assert collected, out.stdout + out.stderr  # the module's unit tests are still collected
    assert not [line for line in collected if "test_soak_full" in line], collected

"""The test tiers as collected: ``pytest -m unit`` picks no soak (a ``slow`` test is always ``process``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.process
def test_the_unit_tier_collects_no_slow_soak() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "unit", "-p", "no:randomly",
                          "tests/unit/reliability/test_soak.py"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    collected = [line for line in out.stdout.splitlines() if "::" in line]
    assert collected, out.stdout + out.stderr  # the module's unit tests are still collected
    assert not [line for line in collected if "test_soak_full" in line], collected



@pytest.mark.process
def test_a_tier_directory_holds_only_its_tier() -> None:
    """``tests/unit`` collects no process test and ``tests/process`` no unit test (a shared module's tests of the
    other tier are deselected there: ``tests/tiers.py``); both collections run at once."""
    runs = {(directory, other): subprocess.Popen(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-m", other, directory],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for directory, other in (("tests/unit", "process"), ("tests/process", "unit"))}
    for (directory, other), proc in runs.items():
        out, err = proc.communicate(timeout=120)
        summary = out.strip().splitlines()[-1] if out.strip() else err
        assert proc.returncode == 5 and "no tests collected" in summary and "deselected" in summary, (directory, out,
                                                                                                        err)
        assert not [line for line in out.splitlines() if "::" in line], f"{other} tests in {directory}"

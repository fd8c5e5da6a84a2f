"""The test tiers as collected: ``pytest -m unit`` picks no soak (a ``slow`` test is always ``process``)."""

from __future__ import annotations

import os
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



def _collect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.process
@pytest.mark.parametrize(("directory", "test"), [
    ("unit", "@pytest.mark.process\ndef test_probe() -> None:\n    pass\n"),
    ("process", "def test_probe() -> None:\n    pass\n")],
    ids=["a process test in tests/unit", "a unit test in tests/process"])
def test_a_test_in_the_other_tiers_directory_fails_the_collection(directory: str, test: str) -> None:
    """Every run of a tier refuses a test of the other tier in its directory (``tests/conftest.py``), so a misplaced
    test fails CI's first collection; shown here on a one-test file in each directory (not the whole tree twice)."""
    probe = ROOT / "tests" / directory / f"test_zz_tier_probe_{os.getpid()}.py"
    probe.write_text(f"import pytest\n\n\n{test}")
    try:
        out = _collect(str(probe.relative_to(ROOT)))
    finally:
        probe.unlink()
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    assert "tests in the other tier's directory" in out.stderr and "test_probe" in out.stderr, out.stderr


@pytest.mark.process
def test_a_shared_modules_tests_of_the_other_tier_are_deselected_in_each_directory() -> None:
    """A module of both tiers' tests (``tests/tiers.py``) keeps each tier's tests in that tier's directory: asked
    for the other tier, each directory's file of it collects nothing (both collections run at once)."""
    runs = {shared: subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                                      "-p", "no:cacheprovider", "-m", other, shared],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for shared, other in (("tests/unit/gateway/test_splice.py", "process"),
                                  ("tests/process/gateway/test_splice.py", "unit"))}
    for shared, proc in runs.items():
        out, err = proc.communicate(timeout=60)
        summary = out.strip().splitlines()[-1] if out.strip() else err
        assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED and "deselected" in summary, (shared, out, err)

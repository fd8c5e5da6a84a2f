"""Sustained load (``bench/soak.py``): streaming tool loops through two workers on a real Redis.

The short form runs by default (30 loops for 14 s, TTL 3 s, 4 turns kept per conversation); the full
form (200 loops for 5 minutes) is ``-m slow``. Both run the documented command in a subprocess and
check its verdicts: zero errors and rejections, flat worker RSS, Redis bounded by TTL and max-turns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def soak(tmp_path: Path, *args: str, timeout: float) -> dict[str, Any]:
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, str(SOAK), *args, "--json", str(out)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert out.exists(), done.stdout[-2000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    return result


def check(result: dict[str, Any]) -> None:
    v = result["verdicts"]
    assert result["errors"] == 0 and result["rejections"] == 0, result["error_samples"]
    assert v["rss_ok"], (v["rss_warm_mib"], v["rss_end_mib"])
    assert v["keyspace_plateau_ok"], (v["dbsize_peak_first_half"], v["dbsize_peak_second_half"])
    assert v["max_turns_ok"] and v["expired_ok"], v
    assert result["ok"] and result["turns_ok"] > 0


def test_soak_short(tmp_path: Path) -> None:
    result = soak(tmp_path, "--loops", "30", "--duration", "14", "--ttl", "3", "--warmup", "5", timeout=55)
    check(result)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_soak_full(tmp_path: Path) -> None:
    result = soak(tmp_path, "--loops", "200", "--duration", "300", "--ttl", "20", "--warmup", "60", timeout=460)
    check(result)

"""Sustained load (``bench/soak.py``): streaming tool loops through two workers on a real Redis.

The short form runs by default (30 loops for 14 s, TTL 3 s, 4 turns kept per conversation); the full
form (200 loops for 5 minutes) is ``-m slow``. Both run the documented command in a subprocess and
check its verdicts: zero errors and rejections, flat worker RSS, Redis bounded by TTL and max-turns.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import soak as bench_soak

SOAK = Path(__file__).resolve().parents[3] / "bench" / "soak.py"


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
    assert v["keyspace_plateau_ok"], (v["dbsize_peak_first_half"], v["dbsize_peak_second_half"],
                                      v["turn_rate_second_vs_first_half"])
    assert v["max_turns_ok"] and v["expired_ok"], v
    assert result["ok"] and result["turns_ok"] > 0


@pytest.mark.process
def test_soak_short(tmp_path: Path) -> None:
    result = soak(tmp_path, "--loops", "30", "--duration", "14", "--ttl", "3", "--warmup", "5", timeout=55)
    check(result)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_soak_full(tmp_path: Path) -> None:
    result = soak(tmp_path, "--loops", "200", "--duration", "300", "--ttl", "20", "--warmup", "60", timeout=460)
    check(result)


def _samples(rates: tuple[float, float], keys: Callable[[float, int], int]) -> list[dict[str, Any]]:
    """One sample a second for 14 s; turns recorded at rates[0] per second, then rates[1] from 7 s."""
    out, turns = [], 0.0
    for t in range(15):
        out.append({"t": float(t), "rss": [100.0], "dbsize": keys(t, int(turns)), "used_memory": 0,
                    "turns": int(turns)})
        turns += rates[0] if t < 7 else rates[1]
    return out


@pytest.mark.parametrize(("rates", "expire", "ok"), [
    ((100, 100), True, True),     # steady, keys expire: flat
    ((100, 100), False, False),   # steady, nothing expires: the keyspace grows with every turn
    ((50, 100), True, True),      # a slow first half (busy box): more keys later, from more turns, not a leak
    ((50, 100), False, False),    # a slow first half does not hide keys that never expire
])
def test_the_keyspace_verdict_follows_the_recording_rate(rates: tuple[float, float], expire: bool, ok: bool) -> None:
    ttl, per_turn = 3, 6

    def keys(t: float, turns: int) -> int:  # expiring: the turns of the last TTL; else every turn so far
        if not expire:
            return turns * per_turn
        rate = rates[0] if t <= 7 else rates[1]
        return int(min(turns, rate * ttl) * per_turn)

    args = argparse.Namespace(warmup=2, ttl=ttl, duration=14, max_turns=4)
    v = bench_soak.verdicts(args, bench_soak.Totals(), 0, _samples(rates, keys), 4, 0)
    assert v["keyspace_plateau_ok"] is ok, v

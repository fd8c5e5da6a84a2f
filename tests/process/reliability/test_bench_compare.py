"""The short form of ``bench/compare.py`` (the performance comparison), so the benchmark keeps working.

Tiny sizes and a one-second throughput window: the figures mean nothing here; the run must complete,
every target must answer every request, and the report must hold every section. The structural
facts it reports are checked: the store round trips per request (one to load once a worker knows the
conversation, one to record) and the per-turn storage figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(240)
@pytest.mark.process
def test_compare_short_form_runs_and_reports_every_section(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "compare.py"), "--samples", "3", "--repeats", "2",
                           "--sizes", "3", "--concurrency", "4", "--duration", "1", "--no-litellm",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=220, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    res = json.loads((tmp_path / "compare.json").read_text())
    md = (tmp_path / "compare.md").read_text()
    for title in ("Added latency", "Streaming", "OpenAI Chat Completions", "Throughput", "Store", "Targets"):
        assert title in md
    assert res["targets"] == ["direct", "bare", "tg-embedded", "tg-redis"]
    kinds = {(r["gateway"], r["replay"], r["stream"]) for r in res["latency"]}
    assert kinds == {("tg-embedded", "faithful", False), ("tg-embedded", "mangled", False),
                     ("tg-redis", "faithful", False), ("tg-redis", "mangled", False), ("tg-redis", "faithful", True)}
    assert all(r["samples"] == 6 for r in res["latency"] + res["openai"])  # 3 rounds x 2 conversations
    for r in res["latency"]:
        for name in ("direct", "bare", r["gateway"]):
            assert r[name]["total"]["p50"] > 0 and r[name]["ttfb"]["p50"] > 0
    assert [t["target"] for t in res["throughput"]] == ["direct", "bare", "tg-redis", "tg-redis-w2"]
    assert all(t["errors"] == 0 and t["requests"] > 0 for t in res["throughput"])
    two = res["throughput"][3]
    assert len(two["rss_mb_per_worker"]) == 2  # two workers measured
    assert len(two["cpu_s_per_worker"]) == 2  # (4 connections may all land on one worker: no split checked)
    assert res["sim"]["rejections"] == {} and res["sim"]["unauthorized"] == 0
    store = res["store"]
    # one worker plays a 20-round loop: every request records once; the first loads nothing (no history), every
    # later one loads once (what the worker holds serves only as of the head its round trip reads: state.coherence)
    assert store["store_round_trips_per_request"] == pytest.approx(1.95)
    assert store["stored_record_bytes"] > 0 and store["turn_with_prompt_json_bytes"] > store["turn_json_bytes"] > 0
    # the store figures use a tenant of their own: the conversation's keys and the index keys
    assert store["redis_all_keys_bytes_per_turn"] > store["redis_conversation_keys_bytes_per_turn"] > 0
    assert store["redis_keys"] > 3

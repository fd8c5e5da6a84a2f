"""The spread of ``bench/compare.py``'s ratios over several runs, per tree: median and range of each ratio to the bare
proxy measured in the same run (one run's cell swings 20-50% on a shared box; a before/after difference is only
established where the two trees' ranges part).

    python bench/compare_spread.py before=RUN1/compare.json,RUN2/compare.json after=RUN3/compare.json,...

Ratios per run: thinkgate's added p50 over the bare proxy's (non-stream, each gateway, replay and size), and the
difference of the two (ms: steadier where the bare proxy's added p50 is a few ms, and near 0 in some runs); the stream's
TTFB added p50 minus the bare proxy's (ms); one worker's requests/s over the bare proxy's; CPU per request over the
bare proxy's.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def ratios(res: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in res["latency"]:
        g, bare = r[r["gateway"]], r["bare"]
        if r["stream"]:
            out[f"stream TTFB - bare's (ms), {r['turns']} turns, {r['gateway']}"] = (
                g["ttfb_added"]["p50"] - bare["ttfb_added"]["p50"])
        else:
            cell = f"{r['turns']} turns, {r['gateway']} {r['replay']}"
            if bare["added"]["p50"] > 0:  # (a bare proxy's added p50 near 0 makes the ratio meaningless)
                out[f"added p50 / bare's, {cell}"] = g["added"]["p50"] / bare["added"]["p50"]
            out[f"added p50 - bare's (ms), {cell}"] = g["added"]["p50"] - bare["added"]["p50"]
    by = {t["target"]: t for t in res["throughput"]}
    if "bare" in by and "tg-redis" in by:
        out["one worker requests/s / bare's"] = by["tg-redis"]["rps"] / by["bare"]["rps"]
        out["CPU ms per request / bare's"] = by["tg-redis"]["cpu_ms_per_request"] / by["bare"]["cpu_ms_per_request"]
    return out


def main(argv: list[str]) -> None:
    trees: dict[str, list[dict[str, float]]] = {}
    loads: dict[str, list[float]] = {}
    for arg in argv:
        name, _, files = arg.partition("=")
        for path in filter(None, files.split(",")):
            res = json.loads(Path(path).read_text())
            trees.setdefault(name, []).append(ratios(res))
            loads.setdefault(name, []).append(res["load_start"][0])
    keys = list(dict.fromkeys(k for runs in trees.values() for run in runs for k in run))
    names = list(trees)
    print("| figure | " + " | ".join(f"{n}: median (range), {len(trees[n])} runs" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for k in keys:
        cells = []
        for n in names:
            vals = [run[k] for run in trees[n] if k in run]
            cells.append(f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})" if vals else "")
        print(f"| {k} | " + " | ".join(cells) + " |")
    print("\nload average (1 min) at each run's start: " + "; ".join(
        f"{n} " + ", ".join(f"{x:.1f}" for x in loads[n]) for n in names))


if __name__ == "__main__":
    main(sys.argv[1:])

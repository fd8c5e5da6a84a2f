"""Peak memory one request costs a worker, against the size of its body (issue 32, item 5).

    python bench/peak_rss.py [--huge-mb 24] [--tiny 100000] [--json out.json]

For each (surface, body) a fresh ``thinkgate serve`` (one worker, default settings, the embedded store) and the
simulator: the worker's high-water mark (``VmHWM``, /proc) after one request, less its RSS before it (the baseline,
measured in the same run), over the body's size; and what it still holds a second after the answer (``kept_mb``).
Bodies: one string of ``--huge-mb`` MB of words, and ``--tiny`` tiny messages (contents, input items).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.body_sweep import SURFACES, messages
from bench.compare import free_port, spawn, thinkgate

COUNT_TOKENS = ("/v1/messages/count_tokens", SURFACES["messages"][1],
                lambda n, text: {k: v for k, v in messages(n, text).items() if k != "max_tokens"})


def hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def measure(sim_url: str, path: str, headers: dict[str, str], payload: bytes) -> dict[str, Any]:
    gw = thinkgate(sim_url, {"GATEWAY_GEMINI_BASE_URL": sim_url, "GATEWAY_MAX_BODY_BYTES": str(256 << 20)})
    try:
        base = psutil.Process(gw.proc.pid).memory_info().rss / 2**20
        status = httpx.post(gw.url + path, content=payload, headers=headers, timeout=600).status_code
        peak = hwm_mb(gw.proc.pid)
        time.sleep(1.0)  # the worker gives memory back after the answer, in the background: nothing to await here
        after = psutil.Process(gw.proc.pid).memory_info().rss / 2**20
    finally:
        gw.stop()
    body = len(payload) / 2**20
    return {"status": status, "body_mb": round(body, 1), "peak_over_base_mb": round(peak - base, 1),
            "ratio": round((peak - base) / body, 1), "kept_mb": round(after - base, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--huge-mb", type=int, default=24)
    ap.add_argument("--tiny", type=int, default=100_000)
    ap.add_argument("--json")
    args = ap.parse_args()
    port = free_port()
    sim = spawn([sys.executable, "-m", "gateway", "sim", "--port", str(port)], {}, "/_sim/stats", port)
    huge = "word " * (args.huge_mb << 18)
    out: dict[str, Any] = {}
    try:
        for name, (path, headers, build) in {**SURFACES, "count_tokens": COUNT_TOKENS}.items():
            for kind, payload in (("string", json.dumps(build(1, lambda i: huge)).encode()),
                                  ("tiny", json.dumps(build(args.tiny, lambda i: f"w{i}")).encode())):
                out[f"{name}/{kind}"] = row = measure(sim.url, path, headers, payload)
                print(f"{name}/{kind}", json.dumps(row), flush=True)
    finally:
        sim.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

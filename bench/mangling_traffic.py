"""Issue 23 item 4, the long form: every mangling of every client surface x upstream pair under realistic traffic.

    python bench/mangling_traffic.py [--repeat 1] [--workers 16] [--modes on,off[,store-down]]
                                     [--gateway-workers 1] [--cells responses->,->responses] [--split-seed 23]
                                     [--json out.json]

Starts real processes on loopback only: a redis-server, the strict simulator (``thinkgate sim``), a recording
proxy in front of it (``tests/support/reliability/recording_proxy.py``: it relays every answer as it arrives, cut into
small
pieces at offsets drawn from ``--split-seed``) and, per state-machine mode, two gateway
replicas (``thinkgate serve``) on that one redis-server, every upstream kind routed to the simulator. Then plays
``tests/support/e2e/traffic.py``'s plan: every case of every cell (``CELLS``: 25 surface x upstream pairs; ``--cells``:
those whose id contains one of the given strings) in each of the four stream x header combinations, ``--repeat``
times, all cells mixed, ``--workers`` conversations in flight at once, two tenants, every request on the other
replica than the one before. With ``GATEWAY_STATE_MACHINE_ENABLED`` on, then off; ``store-down``: on, but
``GATEWAY_REDIS_URL`` names a port nothing listens on (every request a stateless fallback, behind the store's
circuit breaker).

Prints per mode and cell: runs (conversations), completed, refused by design (Responses replays that need records,
without them), requests, upstream 4xx, client errors, thinking kept /
replayed turns (what the upstream received), stateless fallbacks (the gateways' access log; the run-wide
``gateway_stateless_requests_total`` in the header line; below it the streamed upstream answers, the pieces they
were relayed in and the cuts by what they split), and what breaks the promise. Exit status 1 if anything
does (state machine on: any 4xx, error, unfinished conversation, turn without its thinking or stateless
fallback; off and store-down: any 4xx, error or unfinished conversation).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.process_fixtures import GatewayFactory, Sim, free_port, start_process
from tests.redis_fixtures import RedisServer
from tests.support.e2e.traffic import CELLS, SPLIT_SEED, plan, replica_env, run
from tests.support.reliability.recording_proxy import RecordingProxy

SECRET = "bench-mangling-traffic-0123456789abcdef"
# what each mode sets over the replicas' environment
MODES: dict[str, dict[str, str]] = {
    "on": {"GATEWAY_STATE_MACHINE_ENABLED": "true"},
    "off": {"GATEWAY_STATE_MACHINE_ENABLED": "false"},
    "store-down": {"GATEWAY_STATE_MACHINE_ENABLED": "true", "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="plays of every (cell, case, stream, header)")
    ap.add_argument("--workers", type=int, default=16, help="conversations in flight at once (>= 8)")
    ap.add_argument("--modes", default="on,off", help="state machine modes to run, in order")
    ap.add_argument("--gateway-workers", type=int, default=1, help="worker processes per gateway replica")
    ap.add_argument("--cells", default="", help="play only the cells whose id contains one of these (comma-separated)")
    ap.add_argument("--split-seed", type=int, default=SPLIT_SEED,
                    help="where the proxy cuts the upstream answers it relays (-1: as each upstream read came)")
    ap.add_argument("--json", help="write the reports here")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= set(MODES) or args.workers < 8:
        ap.error(f"--modes takes {', '.join(MODES)}; --workers must be at least 8")

    wanted = [w for w in args.cells.split(",") if w]
    cells = [c for c in CELLS if not wanted or any(w in c.id for w in wanted)]
    if not cells:
        ap.error(f"--cells matches none of {', '.join(c.id for c in CELLS)}")
    redis_server = RedisServer()
    redis_server.start()
    sim_process = start_process("sim", ["sim"], "/_sim/stats")
    sim = Sim(sim_process)
    proxy = RecordingProxy(sim.url, split_seed=None if args.split_seed < 0 else args.split_seed).start()
    gateways = GatewayFactory()
    creds = tempfile.TemporaryDirectory()  # (the cloud platforms' credentials: tests/support/cloud/helpers.py)
    env = replica_env(sim, proxy, redis_server.url, SECRET, Path(creds.name))
    failed = False
    reports = []
    try:
        for mode in modes:
            mode_env = {**env, **MODES[mode]}
            replicas = [gateways.start(proxy.url, mode_env, args.gateway_workers) for _ in range(2)]
            convs = plan(cells, repeat=args.repeat, tag=f"{mode}{uuid.uuid4().hex[:6]}")
            report = run(replicas, proxy, sim, convs, workers=args.workers, mode=mode)
            problems = report.problems(keep_thinking=mode == "on")
            print(report.table())
            print("\n".join(f"  PROBLEM {p[:600]}" for p in problems) or "  no problems", end="\n\n", flush=True)
            failed |= bool(problems)
            reports.append({**asdict(report), "problems": problems})
            for sp in replicas:
                sp.stop()
    finally:
        gateways.close()
        proxy.close()
        sim_process.stop()
        os.unlink(sim_process.log_path)
        redis_server.stop()
        creds.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

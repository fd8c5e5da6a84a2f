"""Child process for the concurrency test: ``python -m tests.support.state._writer URL TENANT SCID TAG N``.

Prints ``ready`` once connected, waits for a line on stdin, appends N turns (all in flight at once),
retries every tenth one, then prints ``done``.
"""

from __future__ import annotations

import asyncio
import sys

from state.factory import open_store
from state.store import TurnWrite
from tests.support.state.factories import turn


async def main(url: str, tenant: str, scid: str, tag: str, n: int) -> None:
    store = open_store(url, timeout_ms=10_000)
    await store.start()
    try:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await asyncio.gather(*(store.record(tenant, TurnWrite(turn(i, tag=tag), scid=scid)) for i in range(n)))
        retried = await asyncio.gather(
            *(store.record(tenant, TurnWrite(turn(i, tag=tag), scid=scid)) for i in range(0, n, 10)))
        assert all(r.status == "duplicate" for r in retried), retried
        print("done", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))

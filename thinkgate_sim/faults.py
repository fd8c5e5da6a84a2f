"""The fault and hold markers (``[[sim:fault=...]]``, ``[[sim:fault_round=R]]``, ``[[sim:fault_times=N]]``,
``[[sim:hold]]``) for the profiles that speak an OpenAI shape (OpenAI-compatible chat completions, Responses), in
that dialect's error shapes; the Anthropic and Gemini profiles apply the same markers in their own modules.

``inject`` takes the fault due now (after a ``slow`` one's wait) and answers the ones that replace the answer
(``overloaded``: 503, or ``midstream`` on a request that does not stream; ``ratelimit``: 429 with ``retry-after``);
``json_answer`` and ``stream_answer`` apply the ones that cut it (``drop``: the connection closes halfway;
``midstream``: an error event halfway) and ``hold`` (a stream pauses after its first content frame until
``POST /_sim/release``, or ``HOLD_SECONDS``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse

from thinkgate_sim.dropped import DroppedResponse
from thinkgate_sim.scenarios import Scenario

HOLD_SECONDS = 10.0
# OpenAI's own texts for an overloaded engine and a rate limit (the shapes every OpenAI-compatible API relays)
OVERLOADED = {"error": {"message": "The engine is currently overloaded, please try again later.",
                        "type": "server_error", "param": None, "code": None}}
RATE_LIMITED = {"error": {"message": "Rate limit reached for requests. Please try again later.",
                          "type": "requests", "param": None, "code": "rate_limit_exceeded"}}


async def inject(state: Any, scenario: Scenario, round_: int, conversation: str, stream: bool,
                 headers: dict[str, str] | None = None) -> tuple[str | None, Response | None]:
    """(the fault due now, the answer that replaces the model's when it is one of those)."""
    fault = scenario.fault if scenario.fault_round in (None, round_) else None
    kind: str | None = state.take_fault(fault, scenario.conv or conversation, round_, scenario.fault_times)
    if kind is None or fault is None:
        return None, None
    if kind == "slow":
        await asyncio.sleep(fault.value / 1000)  # the fault itself is a wait
    if kind == "overloaded" or (kind == "midstream" and not stream):
        return kind, Response(orjson.dumps(OVERLOADED), 503, headers=headers, media_type="application/json")
    if kind == "ratelimit":
        return kind, Response(orjson.dumps(RATE_LIMITED), 429, media_type="application/json",
                              headers={**(headers or {}), "retry-after": str(fault.value)})
    return kind, None


def json_answer(kind: str | None, body: bytes, headers: dict[str, str] | None = None) -> Response:
    if kind == "drop":
        return DroppedResponse(200, {**(headers or {}), "content-type": "application/json",
                                     "content-length": str(len(body))}, [body[:len(body) // 2]])
    return Response(body, 200, headers=headers, media_type="application/json")


def stream_answer(state: Any, kind: str | None, frames: list[bytes], error_frame: bytes, hold: bool,
                  headers: dict[str, str] | None = None) -> Response:
    """``frames`` (the whole SSE answer) as the fault and the hold marker want them."""
    if kind == "drop":
        return DroppedResponse(200, {**(headers or {}), "content-type": "text/event-stream"},
                               frames[:max(1, len(frames) // 2)], delay=0.005)
    if kind == "midstream":
        frames = [*frames[:max(1, len(frames) // 2)], error_frame]
    return StreamingResponse(pump(state, frames, 1 if hold else -1, state.release_gen), headers=headers,
                             media_type="text/event-stream")


async def pump(state: Any, events: list[bytes], hold_at: int, gen: int) -> AsyncIterator[bytes]:
    """Yield one event per body chunk; after event ``hold_at`` wait (at most ``HOLD_SECONDS``) for
    ``/_sim/release``, unless a release already came after this stream began. Counts streams that
    completed and streams the client abandoned (so tests can see a disconnect reach the upstream)."""
    stats = state.stats
    stats.streams_open += 1
    done = False
    try:
        for k, event in enumerate(events):
            yield event
            if k == hold_at and state.release_gen == gen:
                state.holding += 1
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(state.release.wait(), HOLD_SECONDS)
                finally:
                    state.holding -= 1
        done = True
    finally:
        stats.streams_open -= 1
        if done:
            stats.streams_completed += 1
        else:
            stats.streams_cancelled += 1

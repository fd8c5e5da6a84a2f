"""The relay records a finished turn before the client sees the end of the answer in its dialect, and
nothing earlier waits.

An upstream that delivers the whole answer in one read (a short answer, a fast upstream) used to have
every event held back until the turn was recorded: the first byte waited for the store round trip.
The end of the answer is what a client stops reading at (issue 22): Anthropic's ``message_delta`` (stop
reason) and ``message_stop``; OpenAI's ``finish_reason`` chunk and ``[DONE]`` (the finish_reason chunk
used to go out before the record); Augment's final node; a Gemini client's last chunk, the one with the
``finishReason`` (it used to go out before the record, which only came once the upstream closed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import orjson

from gateway.dialects.accumulate import Snapshot
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.augment import stream as augment_stream
from gateway.dialects.gemini.wire import GeminiTranslator, NativeStreamEncoder
from gateway.dialects.openai_chat import stream as openai_chat_stream
from gateway.transport.upstream import TranslatedStream, relay_sse

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "sse_thinking_tool_use.sse"


class OneRead:
    """Enough of ``UpstreamResponse``: the whole stream in ``reads`` pieces."""

    status = 200
    headers: ClassVar[dict[str, str]] = {}

    def __init__(self, body: bytes, reads: int = 1) -> None:
        step = -(-len(body) // reads)
        self.pieces = [body[k:k + step] for k in range(0, len(body), step)]

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for p in self.pieces:
            yield p

    def close(self) -> None: ...

    def release(self) -> None: ...


async def _timeline(reads: int) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []

    async def on_complete(turn: Any) -> None:
        events.append(("recorded", turn.id))

    relay = relay_sse(OneRead(FIXTURE.read_bytes(), reads), anthropic.StreamEncoder(None),  # type: ignore[arg-type]
                      on_complete=on_complete)
    async for out in relay:
        events.append(("sent", out))
    return events


async def test_one_read_stream_sends_its_events_before_recording_and_message_stop_after() -> None:
    events = await _timeline(reads=1)
    kinds = [k for k, _ in events]
    assert kinds == ["sent", "recorded", "sent"]
    first, last = events[0][1], events[2][1]
    assert b"message_start" in first and b"content_block_delta" in first
    assert b"message_delta" not in first and b"message_stop" not in first
    assert b"message_delta" in last and b"message_stop" in last
    assert first + last == FIXTURE.read_bytes()  # byte-for-byte, nothing lost or reordered


async def test_many_reads_record_exactly_once_before_message_stop() -> None:
    events = await _timeline(reads=9)
    recorded = [i for i, (k, _) in enumerate(events) if k == "recorded"]
    assert len(recorded) == 1
    sent = b"".join(out for k, out in events if k == "sent")
    assert sent == FIXTURE.read_bytes()
    before = b"".join(out for k, out in events[:recorded[0]] if k == "sent")
    assert b"message_stop" not in before and b"message_delta" not in before and b"content_block_stop" in before


# ------------------------------------------------------------------ every surface's end of the answer


async def _encoded(source: Any, encoder: Any, snap: Snapshot | None = None) -> tuple[bytes, bytes]:
    """(the client's bytes sent before the turn was recorded, those sent after)."""
    sent: list[bytes] = []
    at: list[int] = []

    async def on_complete(turn: Any) -> None:
        at.append(len(sent))

    async for out in relay_sse(source, encoder, on_complete=on_complete, snapshot=snap):
        sent.append(out)
    assert len(at) == 1
    return b"".join(sent[:at[0]]), b"".join(sent[at[0]:])


async def test_openai_finish_reason_and_done_come_after_the_record() -> None:
    snap = Snapshot()
    before, after = await _encoded(OneRead(FIXTURE.read_bytes(), 9), openai_chat_stream.StreamEncoder(snap, created=1),
                                   snap)
    assert b'"finish_reason":null' in before and b'"finish_reason":"' not in before and b"[DONE]" not in before
    assert b'"finish_reason":"tool_use"' in after or b'"finish_reason":"tool_calls"' in after
    assert after.endswith(b"data: [DONE]\n\n")


async def test_augment_final_node_comes_after_the_record() -> None:
    before, after = await _encoded(OneRead(FIXTURE.read_bytes(), 9), augment_stream.StreamEncoder())
    assert b"stop_reason" not in before.replace(b'"stop_reason":null', b"")
    assert b'"stop_reason":' in after


GEMINI_CHUNKS = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Thinking...", "thought": True}]}}],
     "modelVersion": "gemini-3-pro-preview", "responseId": "r1"},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "It is sunny.", "thoughtSignature": "c2ln"}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}],
     "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}},
]


async def test_gemini_last_chunk_comes_after_the_record() -> None:
    body = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in GEMINI_CHUNKS)
    translator = GeminiTranslator(origin="gemini/gemini-3-pro-preview", mint=lambda k, n, a: f"call_{k}",
                                  model="gemini-3-pro-preview")
    source = TranslatedStream(OneRead(body, 3), translator, raw_events=True)  # type: ignore[arg-type]
    before, after = await _encoded(source, NativeStreamEncoder(sse=True))
    assert before.count(b"data: ") == 2 and b"finishReason" not in before
    assert after.count(b"data: ") == 1 and b'"finishReason":"STOP"' in after

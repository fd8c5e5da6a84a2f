"""One parse per stream event (issue 33 item 4): a translated upstream stream reaches the relay as the canonical event
objects its translator made (nothing is written to SSE bytes and parsed again inside the gateway), and a canonical
(Anthropic) stream's events are each parsed once. The client's bytes are the same either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway import sse
from gateway.dialects.accumulate import Snapshot
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import ToolUseBlock
from gateway.dialects.openai_chat import stream as openai_chat_stream
from gateway.dialects.openai_compat.wire import CompatTranslator
from gateway.transport import upstream
from gateway.transport.upstream import TranslatedStream, relay_sse
from tests.unit.gateway.streaming.test_relay_order import FIXTURE, OneRead

COMPAT = Path(__file__).resolve().parents[3] / "fixtures" / "compat_reasoning_parallel_tools.sse"


class Counted:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loads = 0
        self.framed = 0
        real_loads, real_encode = orjson.loads, sse.encode_event

        def loads(data: Any) -> Any:
            self.loads += 1
            return real_loads(data)

        def encode_event(event: str | None, data: object) -> bytes:
            self.framed += 1
            return real_encode(event, data)

        monkeypatch.setattr(upstream.orjson, "loads", loads)
        monkeypatch.setattr(sse, "encode_event", encode_event)


async def _relayed(source: Any, encoder: Any) -> tuple[bytes, int, int]:
    """(the client's bytes, turns recorded, the tool calls of the turn: each call's arguments are parsed once)"""
    turns: list[Any] = []

    async def on_complete(turn: Any) -> None:
        turns.append(turn)

    out = b"".join([b async for b in relay_sse(source, encoder, on_complete=on_complete)])
    return out, len(turns), sum(isinstance(b, ToolUseBlock) for t in turns for b in t.content)


def _json_events(raw: bytes) -> int:
    return sum(1 for ev in sse.SSEDecoder().feed(raw) if ev.data.startswith("{"))


async def test_a_translated_stream_reaches_the_relay_as_event_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(monkeypatch)
    snap = Snapshot()
    stream = TranslatedStream(OneRead(COMPAT.read_bytes(), 7),  # type: ignore[arg-type]
                              CompatTranslator(origin="deepseek/deepseek-reasoner", model="deepseek-reasoner"))
    out, recorded, calls = await _relayed(stream, openai_chat_stream.StreamEncoder(snap, created=1))
    assert recorded == 1 and calls == 2 and b'"tool_calls"' in out and out.endswith(b"data: [DONE]\n\n")
    assert counted.framed == 0  # no canonical event was written to SSE inside the gateway
    # each upstream chunk is parsed once (by its translator), each call's arguments once; nothing else
    assert counted.loads == _json_events(COMPAT.read_bytes()) + calls


async def test_a_canonical_stream_parses_each_event_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(monkeypatch)
    raw = FIXTURE.read_bytes()
    out, recorded, calls = await _relayed(OneRead(raw, 5), anthropic.StreamEncoder(None))
    assert recorded == 1 and out == raw  # byte for byte
    assert counted.loads == _json_events(raw) + calls

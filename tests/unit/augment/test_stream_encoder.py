"""The NDJSON encoder against golden transcripts: Anthropic SSE fixtures in, Augment chunks out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects.accumulate import Snapshot, accumulate
from gateway.dialects.augment.codec import ToolMeta, stop_reason_of
from gateway.dialects.augment.stream import StreamEncoder, error_line
from gateway.dialects.gemini.wire import GeminiTranslator
from gateway.dialects.openai_compat.wire import CompatTranslator
from gateway.sse import SSEDecoder, SSEEvent
from gateway.transport.upstream import TranslatedStream, Translator, UpstreamResponse
from tests.support.augment.client import assert_tools_stream_per_tool

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GOLDEN = ["thinking_tool_use", "omitted_redacted", "midstream_error", "parallel_tools"]
EV = SSEEvent(None, "", b"")


def encode(raw: bytes | list[dict[str, Any]], encoder: StreamEncoder, cuts: Sequence[int] = ()) -> bytes:
    """As the relay does it: framing, accumulate, then the encoder, chunk by chunk (a translated stream's events
    come as the objects the translator made)."""
    dec, snap, out, pos = SSEDecoder(), Snapshot(), b"", 0
    if isinstance(raw, list):
        for data in raw:
            accumulate(data, snap)
            out += encoder.event(data, None)
        return out
    for cut in [*sorted(cuts), len(raw)]:
        for ev in dec.feed(raw[pos:cut]):
            data = json.loads(ev.data)
            accumulate(data, snap)
            out += encoder.event(data, ev)
        pos = cut
    return out


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_transcript(name: str) -> None:
    raw = (FIXTURES / f"sse_{name}.sse").read_bytes()
    golden = (FIXTURES / f"augment_{name}.ndjson").read_bytes()
    assert encode(raw, StreamEncoder()) == golden


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4000), max_size=30))
def test_any_chunking_gives_the_same_lines(cuts: list[int]) -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    golden = (FIXTURES / "augment_thinking_tool_use.ndjson").read_bytes()
    assert encode(raw, StreamEncoder(), [c % (len(raw) + 1) for c in cuts]) == golden


def test_golden_thinking_bytes_and_order() -> None:
    lines = [json.loads(x) for x in (FIXTURES / "augment_thinking_tool_use.ndjson").read_text("utf-8").splitlines()]
    nodes = [n for line in lines for n in line.get("nodes", [])]
    assert [n["type"] for n in nodes] == [8, 0, 0, 7, 5, 10, 2]
    expected = json.loads((FIXTURES / "sse_thinking_tool_use.json").read_text("utf-8"))["content"][0]
    assert nodes[0]["thinking"] == {"summary": expected["thinking"], "signature": expected["signature"]}
    assert all(expected["thinking"] not in line["text"] for line in lines)
    assert json.loads(nodes[4]["tool_use"]["input_json"]) == {"location": "San Francisco, CA", "unit": "celsius"}
    assert lines[-1]["stop_reason"] == 3


def test_tool_use_start_opt_out_and_mcp_names() -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    meta = {"get_weather": ToolMeta("weather-server", "weather")}
    lines = [json.loads(x) for x in encode(raw, StreamEncoder(meta, tool_use_start=False)).splitlines()]
    nodes = [n for line in lines for n in line.get("nodes", [])]
    assert [n["type"] for n in nodes] == [8, 0, 0, 5, 10, 2]
    assert [n["id"] for n in nodes] == [1, 2, 3, 4, 5, 6]
    assert nodes[3]["tool_use"]["mcp_server_name"] == "weather-server"
    assert nodes[3]["tool_use"]["mcp_tool_name"] == "weather"


def test_relay_errors_and_nothing_after_them() -> None:
    enc = StreamEncoder()
    assert enc.error("api_error", "upstream stream timed out") == error_line("api_error", "upstream stream timed out")
    assert enc.event({"type": "message_stop"}, EV) == b"" and enc.error("api_error", "again") == b""
    line = json.loads(error_line("api_error", "x", after_text=True))
    assert line["text"].startswith("\n\n[thinkgate] upstream error (api_error)") and line["stop_reason"] == 1
    assert "nodes" not in line


def test_stop_reason_falls_back_to_what_was_seen() -> None:
    enc = StreamEncoder()
    enc.event({"type": "content_block_start", "index": 0,
               "content_block": {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": 1}}}, EV)
    stop = enc.event({"type": "content_block_stop", "index": 0}, EV)
    assert json.loads(stop)["nodes"][0]["tool_use"]["input_json"] == '{"a":1}'
    last = json.loads(enc.event({"type": "message_stop"}, EV).splitlines()[-1])
    assert last == {"text": "", "unknown_blob_names": [], "checkpoint_not_found": False,
                    "workspace_file_chunks": [], "stop_reason": 3}


@pytest.mark.parametrize(("reason", "number"), [("end_turn", 1), ("stop_sequence", 1), ("max_tokens", 2),
                                                ("tool_use", 3), ("refusal", 4), ("pause_turn", 1), (None, 1)])
def test_stop_reason_mapping(reason: str | None, number: int) -> None:
    assert stop_reason_of(reason) == number


def nodes_of(ndjson: bytes) -> list[dict[str, Any]]:
    return [n for line in ndjson.splitlines() for n in json.loads(line).get("nodes", [])]


def test_parallel_tools_stream_per_tool() -> None:
    """Anthropic streams parallel tool_use blocks one after another (start, input deltas, stop)."""
    golden = (FIXTURES / "augment_parallel_tools.ndjson").read_bytes()
    nodes = nodes_of(golden)
    assert [n["type"] for n in nodes] == [8, 0, 0, 7, 5, 7, 5, 10, 2]
    assert len(assert_tools_stream_per_tool(nodes)) == 2
    assert [json.loads(n["tool_use"]["input_json"]) for n in nodes if n["type"] == 5] == \
        [{"city": "Paris"}, {"city": "Rome", "unit": "celsius"}]
    # Each TOOL_USE line leaves the encoder as soon as its block stops, before the next block starts.
    raw = (FIXTURES / "sse_parallel_tools.sse").read_bytes()
    second_start = raw.index(b'"index": 3, "content_block"')
    early = nodes_of(encode(raw[:second_start], StreamEncoder()))
    assert [n["type"] for n in early][-2:] == [7, 5]


class _Body:
    """Just enough of an ``UpstreamResponse`` for ``TranslatedStream``: a body in one chunk."""

    status, headers = 200, {"content-type": "text/event-stream"}

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        yield self.raw


def translated(raw: bytes, translator: Translator) -> list[dict[str, Any]]:
    """Another family's SSE translated into canonical events, as the relay receives them."""

    async def collect() -> list[dict[str, Any]]:
        stream = TranslatedStream(cast(UpstreamResponse, _Body(raw)), translator)
        batches = [batch async for batch in stream.events()]
        return [d for batch in batches for d, _ in batch if d is not None]

    return asyncio.run(collect())


def _gemini() -> Translator:
    return GeminiTranslator(origin="gemini/gemini-3-pro-preview", mint=lambda k, name, args: f"call_{k}",
                            model="gemini-3-pro-preview")


def _deepseek() -> Translator:
    return CompatTranslator(origin="deepseek/deepseek-reasoner", model="deepseek-reasoner")


TRANSLATED = {"gemini_thought_parallel_tools": _gemini, "compat_reasoning_parallel_tools": _deepseek}


@pytest.mark.parametrize("name", sorted(TRANSLATED))
def test_other_families_reasoning_streams_as_thinking_nodes(name: str) -> None:
    """Gemini thought summaries and OpenAI-compatible reasoning text: THINKING nodes before the text,
    never in it; the signature only where the part carried one; tools per tool."""
    raw = translated((FIXTURES / f"{name}.sse").read_bytes(), TRANSLATED[name]())
    out = encode(raw, StreamEncoder())
    assert out == (FIXTURES / f"augment_{name}.ndjson").read_bytes()
    lines = [json.loads(x) for x in out.splitlines()]
    nodes = nodes_of(out)
    types = [n["type"] for n in nodes]
    assert 8 in types and types.index(8) < types.index(0)
    thinking = [n["thinking"] for n in nodes if n["type"] == 8]
    text = "".join(line["text"] for line in lines)
    assert all(t["summary"] and t["summary"] not in text for t in thinking)
    assert len(assert_tools_stream_per_tool(nodes)) == 2
    assert lines[-1]["stop_reason"] == 3


def test_thought_signature_only_where_the_part_carries_one() -> None:
    out = encode(translated((FIXTURES / "gemini_thought_parallel_tools.sse").read_bytes(), _gemini()), StreamEncoder())
    thinking = [n["thinking"] for n in nodes_of(out) if n["type"] == 8]
    assert thinking == [{"summary": "**Planning**\r\nTwo cities: Paris", "signature": "CsSignedThoughtPart=="},
                        {"summary": "Checking the forecast for both — 天气. "}]
    out = encode(translated((FIXTURES / "compat_reasoning_parallel_tools.sse").read_bytes(), _deepseek()),
                 StreamEncoder())
    assert [n["thinking"] for n in nodes_of(out) if n["type"] == 8] == \
        [{"summary": "Two cities,\r\n so two calls — 思考 "}]


@pytest.mark.parametrize(("translator", "chunk", "number"), [
    (_deepseek, '{"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]}', 4),
    (_gemini, '{"candidates": [{"content": {"parts": [{"text": "no"}]}, "finishReason": "SAFETY"}]}', 4),
])
def test_refusals_end_with_safety(translator: Any, chunk: str, number: int) -> None:
    """OpenAI's ``content_filter`` is SAFETY (4) in the reference; thinkgate's canonical ``refusal``
    (also Gemini's SAFETY finish) carries it to the one table."""
    head = '{"choices": [{"index": 0, "delta": {"content": "x"}}]}' if translator is _deepseek else None
    raw = "".join(f"data: {x}\n\n" for x in (head, chunk) if x).encode()
    lines = [json.loads(x) for x in encode(translated(raw, translator()), StreamEncoder()).splitlines()]
    assert lines[-1]["stop_reason"] == number

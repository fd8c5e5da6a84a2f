"""The NDJSON encoder against golden transcripts: Anthropic SSE fixtures in, Augment chunks out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocols.augment import ToolMeta, stop_reason_of
from gateway.protocols.augment_stream import StreamEncoder, error_line
from gateway.streaming.accumulate import Snapshot, accumulate
from gateway.streaming.sse import SSEDecoder, SSEEvent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = ["thinking_tool_use", "omitted_redacted", "midstream_error"]
EV = SSEEvent(None, "", b"")


def encode(raw: bytes, encoder: StreamEncoder, cuts: Sequence[int] = ()) -> bytes:
    """As the relay does it: framing, accumulate, then the encoder, chunk by chunk."""
    dec, snap, out, pos = SSEDecoder(), Snapshot(), b"", 0
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
                                                ("tool_use", 3), ("refusal", 1), (None, 1)])
def test_stop_reason_mapping(reason: str | None, number: int) -> None:
    assert stop_reason_of(reason) == number

"""Golden SSE transcripts drive the framing decoder and the pure accumulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn, message_dict
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    PROVIDER,
    BlockProvider,
    OpaqueBlock,
    ProviderFields,
    ProviderSig,
    TextBlock,
    ThoughtBlock,
)
from gateway.dialects.responses import codec as responses
from gateway.dialects.responses import stream as responses_stream
from gateway.sse import SSEDecoder
from gateway.transport.upstream import relay_sse
from tests.unit.gateway.streaming.test_relay_order import OneRead
from tests.unit.responses.test_protocol import IDS, SEAL

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
GOLDEN = ["sse_thinking_tool_use", "sse_omitted_redacted"]


def _run(raw: bytes, cuts: list[int]) -> tuple[Snapshot, list[str | None], bytes]:
    dec, snap, names, relayed = SSEDecoder(), Snapshot(), [], b""
    pos = 0
    for cut in [*sorted(cuts), len(raw)]:
        for ev in dec.feed(raw[pos:cut]):
            names.append(ev.event)
            relayed += ev.raw
            accumulate(json.loads(ev.data), snap)
        pos = cut
    assert list(dec.flush()) == []
    return snap, names, relayed


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_transcript_accumulates_to_final_message(name: str) -> None:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    expected = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    snap, _names, relayed = _run(raw, [])
    assert snap.complete
    assert message_dict(snap) == expected
    assert relayed == raw  # unchanged events are relayed byte-for-byte
    turn = finished_turn(snap)
    assert turn is not None and turn.stop_reason == expected["stop_reason"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4000), max_size=40))
def test_any_chunking_gives_the_same_turn(cuts: list[int]) -> None:
    raw = (FIXTURES / "sse_thinking_tool_use.sse").read_bytes()
    cuts = [c % (len(raw) + 1) for c in cuts]
    snap, names, _ = _run(raw, cuts)
    expected = json.loads((FIXTURES / "sse_thinking_tool_use.json").read_text(encoding="utf-8"))
    assert message_dict(snap) == expected
    assert "future_event_type" in names and "ping" in names  # unknown events are seen, not dropped


def test_thinking_bytes_exact_and_signature_replaces() -> None:
    snap, _, _ = _run((FIXTURES / "sse_thinking_tool_use.sse").read_bytes(), [])
    block = snap.blocks[0]
    assert block["thinking"] == "Let me think.\r\n  Trailing spaces   \n\n\ncafé — 思考 🤔\r\n"
    assert block["signature"].startswith("EqQBCg")  # the second signature_delta replaced the first


def test_empty_thinking_text_with_signature_is_kept() -> None:
    snap, _, _ = _run((FIXTURES / "sse_omitted_redacted.sse").read_bytes(), [])
    assert snap.blocks[0] == {"type": "thinking", "thinking": "", "signature": "EqOmitted=="}


def test_midstream_error_is_not_a_complete_turn() -> None:
    snap, names, _ = _run((FIXTURES / "sse_midstream_error.sse").read_bytes(), [])
    assert names[-1] == "error"
    assert snap.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert not snap.complete and finished_turn(snap) is None


def test_crlf_framing_is_decoded() -> None:
    raw = b'event: ping\r\ndata: {"type":"ping"}\r\n\r\n: comment\r\n\r\ndata: {"type":"x"}\r\n\r\n'
    events = list(SSEDecoder().feed(raw))
    assert [(e.event, e.data) for e in events] == [("ping", '{"type":"ping"}'), (None, '{"type":"x"}')]


def test_malformed_tool_input_is_a_protocol_error() -> None:
    from gateway.dialects.accumulate import UpstreamProtocolError

    snap = Snapshot()
    accumulate({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}}}, snap)
    accumulate({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"a": '}}, snap)
    with pytest.raises(UpstreamProtocolError):
        accumulate({"type": "content_block_stop", "index": 0}, snap)


def _translated(start: dict[str, object], *, provider: object = None) -> Snapshot:
    delta: dict[str, object] = {"stop_reason": "end_turn"}
    if provider is not None:
        delta[PROVIDER] = provider
    snap = Snapshot()
    for event in ({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
                                                       "model": "x", "content": [], "usage": {}}},
                  {"type": "content_block_start", "index": 0, "content_block": start},
                  {"type": "content_block_stop", "index": 0},
                  {"type": "message_delta", "delta": delta, "usage": {}},
                  {"type": "message_stop"}):
        accumulate(event, snap)
    return snap


def test_a_translated_streams_typed_provider_data_lands_in_the_turns_typed_fields() -> None:
    """Issue 33 item 4: provider data rides a translated stream's events typed (``canonical.BlockProvider``,
    ``ProviderFields``) and the finished turn has it in its fields; a ``provider_delta`` signs a thought."""
    sig = ProviderSig("gemini-3", "c2ln")
    turn = finished_turn(_translated({"type": "text", "text": "hi", PROVIDER: BlockProvider("gemini-3", sig)},
                                     provider=ProviderFields("openrouter", {"reasoning_details": [{"data": "D"}]})))
    assert turn is not None and turn.content == [TextBlock("hi", sig=sig)]
    assert turn.provider == ProviderFields("openrouter", {"reasoning_details": [{"data": "D"}]})
    assert PROVIDER not in turn.extra
    snap = _translated({"type": "thought", "thinking": "", PROVIDER: BlockProvider("responses/gpt-5")})
    assert finished_turn(snap) is not None
    assert finished_turn(snap).content == [ThoughtBlock("", "responses/gpt-5")]  # type: ignore[union-attr]
    accumulate({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "t"}},
               snap)
    accumulate({"type": "content_block_delta", "index": 0,
                "delta": {"type": "provider_delta", "sig": ProviderSig("responses/gpt-5", {"item": 1})}}, snap)
    assert finished_turn(snap).content == [  # type: ignore[union-attr]
        ThoughtBlock("t", "responses/gpt-5", ProviderSig("responses/gpt-5", {"item": 1}))]


def test_a_provider_key_that_came_as_json_is_never_read_as_provider_data() -> None:
    """An upstream's (or a client's) own ``_provider`` key, parsed from JSON, is a dict, never the typed value: it
    stays where it was, forwarded as it came, and signs nothing."""
    forged = {"origin": "gemini-3", "value": "FORGED"}
    fields = {"origin": "openrouter", "fields": {"reasoning_details": []}}
    turn = finished_turn(_translated({"type": "text", "text": "hi", PROVIDER: forged}, provider=fields))
    assert turn is not None and turn.content == [TextBlock("hi", {PROVIDER: forged})]
    assert turn.provider is None and turn.extra[PROVIDER] == fields
    thought = finished_turn(_translated({"type": "thought", "thinking": "t", PROVIDER: forged}))
    assert thought is not None and isinstance(thought.content[0], OpaqueBlock)


def _malformed_stream(block: dict[str, object], delta: dict[str, object] | None = None) -> bytes:
    events: list[dict[str, object]] = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "x",
                                              "content": [], "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *([{"type": "content_block_delta", "index": 0, "delta": delta}] if delta else []),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"}]
    return b"".join(b"event: " + str(e["type"]).encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
                    for e in events)


async def _relay(raw: bytes, encoder: Any, snap: Snapshot | None = None) -> tuple[bytes, int]:
    recorded: list[object] = []

    async def on_complete(turn: object) -> None:
        recorded.append(turn)

    out = b"".join([b async for b in relay_sse(OneRead(raw), encoder, on_complete=on_complete,  # type: ignore[arg-type]
                                               snapshot=snap)])
    return out, len(recorded)


async def test_a_block_the_upstream_sent_malformed_ends_the_stream_with_the_dialects_error_event() -> None:
    """A malformed block from the upstream (a tool id that is no string, a signature that is a number) is the
    upstream's fault: the client gets its dialect's error event, as for any invalid stream, nothing is recorded, and
    no exception (a client 400, before) escapes the relay: at the record, and where the Responses encoder seals a
    block mid-stream."""
    raw = _malformed_stream({"type": "tool_use", "id": 7, "name": "f", "input": {}})
    out, recorded = await _relay(raw, anthropic.StreamEncoder(None))
    assert recorded == 0 and out.endswith(b'"type":"error","error":{"type":"api_error","message":"upstream sent an '
                                          b'invalid stream: content.0.tool_use.id: Input should be a valid string"}}'
                                          b"\n\n")
    raw = _malformed_stream({"type": "thinking", "thinking": "", "signature": ""},
                            {"type": "signature_delta", "signature": 5})
    snap = Snapshot()  # the relay's, which the Responses encoder reads its blocks from
    encoder = responses_stream.StreamEncoder(
        snap, ids=IDS, final=lambda: (IDS, IDS.scid), seal=SEAL.seal, model="m", created_at=1,
        echo=dict(responses.ECHOED), include_encrypted=True, summary=True, scid=IDS.scid)
    out, recorded = await _relay(raw, encoder, snap)
    assert recorded == 0 and b"upstream sent an invalid stream: content.thinking.signature" in out
    assert b"response.output_item.done" not in out  # failed where the reasoning item was sealed

"""Golden SSE transcripts drive the framing decoder and the pure accumulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn, message_dict
from gateway.dialects.canonical import (
    PROVIDER,
    BlockProvider,
    OpaqueBlock,
    ProviderFields,
    ProviderSig,
    TextBlock,
    ThoughtBlock,
)
from gateway.sse import SSEDecoder

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

"""Codec: byte-exact round trips (property-based) and CodecError on anything malformed."""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state import records
from state.coherence import Lru
from state.errors import CodecError, StoreError
from state.keys import replay_digest
from state.records import Location, TurnRecord, VerifiedPair

# surrogate-free text (hypothesis' default alphabet excludes Cs), biased towards whitespace edge cases
edge_text = st.one_of(
    st.text(),
    st.lists(st.sampled_from(["\r\n", "\n", "\r", " ", "\t", "\u00a0", "\u2028", "\u3000", "a", "é",
                              "🧠", "\x00", "\ufeff", "\u200b"])).map("".join),
    st.just(""),
)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                        st.floats(allow_nan=False), edge_text)
json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


@st.composite
def blocks(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind in draw(st.lists(st.sampled_from(["thinking", "redacted", "text", "tool", "other"]), max_size=6)):
        if kind == "thinking":
            out.append({"type": "thinking", "thinking": draw(edge_text), "signature": draw(edge_text)})
        elif kind == "redacted":
            out.append({"type": "redacted_thinking", "data": draw(st.text())})
        elif kind == "text":
            out.append({"type": "text", "text": draw(edge_text)})
        elif kind == "tool":
            out.append({"type": "tool_use", "id": draw(st.text(min_size=1)), "name": "t",
                        "input": draw(st.dictionaries(st.text(max_size=5), json_value, max_size=3))})
        else:
            out.append({"type": draw(st.text(max_size=10)), "x": draw(json_value)})
    return out


@settings(max_examples=200, deadline=None)
@given(content=blocks(), provider=st.dictionaries(st.text(max_size=8), json_value, max_size=3),
       fingerprint=st.one_of(st.none(), st.text()))
def test_turn_round_trips_exactly(content: list[dict[str, Any]], provider: dict[str, Any],
                                  fingerprint: str | None) -> None:
    prompt = [{"role": "user", "content": content[:1]}]
    rec = TurnRecord(content=content, provider=provider, model="m", prefix_fingerprint=fingerprint, prompt=prompt)
    back = records.decode_turn(records.encode_turn(rec), 7)
    assert back.content == content and back.provider == provider and back.position == 7
    assert back.prompt == prompt
    assert back.turn_id == rec.turn_id and back.prefix_fingerprint == fingerprint
    for a, b in zip(content, back.content, strict=True):
        for key in ("thinking", "signature", "text", "data"):
            if key in a:
                assert b[key].encode("utf-8") == a[key].encode("utf-8")  # byte-exact
        assert list(a) == list(b)  # key order kept


@settings(max_examples=200, deadline=None)
@given(thinking=edge_text, signature=edge_text)
def test_pair_round_trips_exactly(thinking: str, signature: str) -> None:
    back = records.decode_pair(records.encode_pair(VerifiedPair(thinking, signature)))
    assert back == VerifiedPair(thinking, signature)
    assert back.thinking.encode() == thinking.encode()


@settings(max_examples=100, deadline=None)
@given(signature=edge_text.filter(bool))
def test_signature_round_trips_exactly(signature: str) -> None:
    assert records.decode_signature(records.encode_signature(signature)).encode("utf-8", "surrogatepass") == \
        signature.encode("utf-8", "surrogatepass")


def test_exact_index_values_hold_the_signature_only() -> None:
    text, sig = "a long thought\r\n" * 40, "EqQBCkYIBRgCKkD" * 10
    data = records.encode_signature(sig)
    assert text.encode() not in data and len(data) < len(sig) + 8
    # values written before hold [thinking, signature]: the signature is what is read
    assert records.decode_signature(records.encode_pair(VerifiedPair(text, sig))) == sig
    for bad in (records.pack(""), records.pack(3), records.pack(["t", ""]), records.pack(["t"])):
        with pytest.raises(CodecError):
            records.decode_signature(bad)


def test_records_without_prompt_still_decode() -> None:
    rec = TurnRecord(content=[{"type": "text", "text": "old"}])
    old = records.pack([rec.turn_id, rec.content, {}, "", "", "", rec.created_at, None])  # pre-prompt layout
    assert records.decode_turn(old).prompt == []


def test_replay_digest_round_trips_and_older_records_have_none() -> None:
    content = [{"type": "text", "text": "hi"}]
    rec = TurnRecord(content=content, replay_digest=replay_digest(content) or b"")
    assert len(rec.replay_digest) == 16
    assert records.decode_turn(records.encode_turn(rec), 1).replay_digest == rec.replay_digest
    old = records.pack([rec.turn_id, content, {}, "", "", "", rec.created_at, None, []])  # pre-digest layout
    assert records.decode_turn(old).replay_digest == b""
    bad = records.pack([rec.turn_id, content, {}, "", "", "", rec.created_at, None, [], "not bytes"])
    with pytest.raises(CodecError):
        records.decode_turn(bad)


def test_decoded_turns_are_cached_by_bytes_and_position() -> None:
    cache: records.TurnCache = Lru(records.DEFAULT_TURN_CACHE_ENTRIES)
    data = records.encode_turn(TurnRecord(content=[{"type": "text", "text": "cached"}]))
    first = records.decode_turn(data, 3, cache)
    assert records.decode_turn(bytes(bytearray(data)), 3, cache) is first  # equal bytes from another read: a hit
    assert records.decode_turn(data, 4, cache).position == 4  # the position is part of the key
    assert records.decode_turn(bytearray(data), 3, cache) is first
    assert records.decode_turn(data, 3) is not first and records.decode_turn(data, 3) == first  # no cache: decoded


def test_the_decoded_turn_cache_is_bounded_and_can_be_turned_off() -> None:
    datas = [records.encode_turn(TurnRecord(content=[{"type": "text", "text": f"t{i}"}])) for i in range(5)]
    cache: records.TurnCache = Lru(2)
    first = [records.decode_turn(d, 0, cache) for d in datas]
    assert records.decode_turn(datas[4], 0, cache) is first[4]  # among the 2 most recent
    assert records.decode_turn(datas[0], 0, cache) is not first[0]  # evicted: decoded again, equal
    assert records.decode_turn(datas[0], 0, cache) == first[0]
    off: records.TurnCache = Lru(0)
    assert records.decode_turn(datas[1], 0, off) is not records.decode_turn(datas[1], 0, off)


async def test_a_store_keeps_its_own_decoded_turns() -> None:
    """Each store (one per worker) owns its decoded-turn cache, sized by ``decoded_turns``: no process-wide one."""
    from state.memory_store import MemoryStore
    from state.store import LoadQuery, TurnWrite

    a, b, off = MemoryStore(), MemoryStore(), MemoryStore(decoded_turns=0)
    for store in (a, b, off):
        res = await store.record("t", TurnWrite(TurnRecord(content=[{"type": "text", "text": "x"}])))
        store.conversation_cache.put("t", res.scid, None)  # (not its own append's cached copy: decode it)
        first = (await store.load("t", LoadQuery(scid=res.scid))).conversation
        store.conversation_cache.put("t", res.scid, None)
        again = (await store.load("t", LoadQuery(scid=res.scid))).conversation
        assert first is not None and again is not None
        assert (again.turns[0] is first.turns[0]) is (store is not off)
    assert len(a.decoded_turns) == len(b.decoded_turns) == 1 and a.decoded_turns is not b.decoded_turns


def test_empty_thinking_with_signature_round_trips() -> None:
    rec = TurnRecord(content=[{"type": "thinking", "thinking": "", "signature": "EqQBCkYIBRgCKkD=="}])
    back = records.decode_turn(records.encode_turn(rec))
    assert back.content[0] == {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBRgCKkD=="}
    assert back.verified_pair() == VerifiedPair("", "EqQBCkYIBRgCKkD==")


def test_lone_surrogates_survive() -> None:
    text = "a\ud800b\udfff\r\n"  # json.loads can produce these; they must not be lost or altered
    back = records.decode_pair(records.encode_pair(VerifiedPair(text, "s")))
    assert back.thinking == text


def test_large_payloads_are_compressed_and_exact() -> None:
    text = "the quick brown fox jumps over the lazy dog\r\n" * 500
    data = records.encode_turn(TurnRecord(content=[{"type": "thinking", "thinking": text, "signature": "s"}]))
    assert data[0] == records.VERSION_ZLIB and len(data) < len(text) // 4
    assert records.decode_turn(data).content[0]["thinking"] == text
    small = records.pack("short")
    assert small[0] == records.VERSION_MSGPACK


def test_location_and_scid_round_trip() -> None:
    loc = Location("abcdefghijklmnop", "0" * 64, None)
    assert records.decode_location(records.encode_location(loc)) == loc
    tid = hashlib.sha256(b"turn").hexdigest()
    loc = Location("abcdefghijklmnop", tid, 7)
    data = records.encode_location(loc)
    assert records.decode_location(data) == loc
    assert tid.encode() not in data and bytes.fromhex(tid) in data  # the turn id as its 32 bytes
    assert len(data) < len(records.pack([loc.scid, tid, 7]))
    # values written before: the turn id as 64 hex characters
    assert records.decode_location(records.pack([loc.scid, tid, 7])) == loc
    odd = Location("abcdefghijklmnop", "not-a-turn-id", 1)  # anything else is kept as given
    assert records.decode_location(records.encode_location(odd)) == odd
    with pytest.raises(CodecError):
        records.decode_location(records.pack([loc.scid, b"short", 7]))
    assert records.decode_scid(records.encode_scid("abcdefghijklmnop")) == "abcdefghijklmnop"


@pytest.mark.parametrize("data", [
    b"", b"\x01", b"\x09\x90", b"\x01\xc1", b"\x02not-zlib", b"\x01\x92\x01",
    bytes([1]) + msgpack.packb([1, 2, 3]), bytes([1]) + msgpack.packb(["x"] * 8),
])
def test_garbage_raises_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        records.decode_turn(data)


@settings(max_examples=300, deadline=None)
@given(st.binary())
def test_arbitrary_bytes_never_raise_anything_but_codec_error(data: bytes) -> None:
    for decode in (records.decode_turn, records.decode_pair, records.decode_signature, records.decode_location,
                   records.decode_scid):
        try:
            decode(data)
        except CodecError:
            pass


def test_unencodable_values_raise_codec_error() -> None:
    assert issubclass(CodecError, StoreError)
    with pytest.raises(CodecError):
        records.pack({"n": 2**70})
    with pytest.raises(CodecError):
        records.pack({"o": object()})


def test_decompression_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MAX_DECODED_BYTES", 1000)
    data = records.pack("x" * 5000)
    with pytest.raises(CodecError):
        records.unpack(data)


@pytest.mark.parametrize("size", [1500, 4000, 20_000, 200_000])
def test_compressed_payloads_use_a_window_no_larger_than_they_need(size: int) -> None:
    """A small record is deflated with a small window (setting up zlib's 32 KiB default cost more than the
    compressing), which loses nothing: no match can reach further back than the payload's start. Any zlib
    reader reads it; the window is in the stream's header (CINFO, the high nibble of its first byte)."""
    words = "the parser reads the tool result and finds the off by one error in line".split()
    text = " ".join(words[k % len(words)] + str(k % 7) for k in range(size // 5))[:size]
    data = records.pack(text)
    assert data[0] == records.VERSION_ZLIB and records.unpack(data) == text
    window = 1 << ((data[1] >> 4) + 8)
    assert min(size, 32768) <= window <= max(512, 2 * size)
    assert len(data) <= len(zlib.compress(text.encode(), 1)) + 16  # the ratio of the default window, or near it

from __future__ import annotations

import base64

import pytest

from thinkgate_sim.signing import Binding, Minter, MintInfo, model_family

MODEL = "claude-sonnet-4-5-20250929"
TEXT = "  Let me think.  \r\n\r\nStep 1: café — 思考 🤔   \r\n   done \n"
RID = "msg_01AbCdEfGhIjKlMnOpQrStUv"


def test_mint_verify_roundtrip_carries_position() -> None:
    m = Minter(b"s")
    sig = m.mint_thinking(MODEL, TEXT, RID, 0)
    assert sig.startswith("Eq")
    base64.b64decode(sig, validate=True)
    assert m.verify_thinking(MODEL, TEXT, sig) == MintInfo(RID, 0, 0, 1)
    sig2 = m.mint_thinking(MODEL, TEXT, RID, 0, run_pos=0, run_len=2)
    assert m.verify_thinking(MODEL, TEXT, sig2) == MintInfo(RID, 0, 0, 2)


@pytest.mark.parametrize("change", [
    lambda t: t.replace("\r\n", "\n"),
    str.rstrip,
    str.strip,
    str.lstrip,
    lambda t: t[:-1],
    lambda t: t[: len(t) // 2],
    lambda t: t.replace("é", "e\u0301"),  # same glyph, other bytes
    lambda t: t + " ",
    lambda t: "",
], ids=["crlf_to_lf", "rstrip", "strip", "lstrip", "drop_last", "truncate", "nfd", "append_space", "empty"])
def test_any_byte_change_of_the_text_invalidates(change: object) -> None:
    m = Minter(b"s")
    sig = m.mint_thinking(MODEL, TEXT, RID, 0)
    assert callable(change)
    changed = change(TEXT)
    assert changed != TEXT
    assert m.verify_thinking(MODEL, changed, sig) is None


def test_signature_edits_and_garbage_are_rejected() -> None:
    m = Minter(b"s")
    sig = m.mint_thinking(MODEL, TEXT, RID, 0)
    for bad in (sig[: len(sig) // 2], sig[:-4], sig + "AAAA", sig.replace("E", "F", 1), "", "not base64!",
                base64.b64encode(b"\x12\x05hello").decode(), None, 42):
        assert m.verify_thinking(MODEL, TEXT, bad) is None


def test_bound_to_secret_model_family_and_kind() -> None:
    m = Minter(b"s")
    sig = m.mint_thinking(MODEL, TEXT, RID, 0)
    assert Minter(b"other").verify_thinking(MODEL, TEXT, sig) is None
    assert m.verify_thinking("claude-opus-4-1-20250805", TEXT, sig) is None
    assert m.verify_thinking("claude-sonnet-4-5", TEXT, sig) is not None  # same family without date
    assert model_family("claude-sonnet-4-5@20250929") == "claude-sonnet-4-5"
    assert m.verify_redacted(MODEL, sig) is None  # a thinking signature is not redacted data


def test_swapped_signatures_fail_both_ways() -> None:
    m = Minter(b"s")
    a, b = TEXT, TEXT.replace("Step 1", "Step 2")
    sa, sb = m.mint_thinking(MODEL, a, RID, 0), m.mint_thinking(MODEL, b, "msg_01Other0000000000000000", 0)
    assert m.verify_thinking(MODEL, a, sb) is None
    assert m.verify_thinking(MODEL, b, sa) is None


def test_empty_text_is_mintable_and_verifiable() -> None:
    m = Minter(b"s")
    sig = m.mint_thinking(MODEL, "", RID, 0)
    assert m.verify_thinking(MODEL, "", sig) == MintInfo(RID, 0)
    assert m.verify_thinking(MODEL, " ", sig) is None


def test_redacted_data_roundtrip() -> None:
    m = Minter(b"s")
    data = m.mint_redacted(MODEL, RID, 1, run_pos=1, run_len=2)
    assert data.startswith("Eq") and len(data) > 300
    assert m.verify_redacted(MODEL, data) == MintInfo(RID, 1, 1, 2)
    assert m.verify_redacted(MODEL, data[:-8] + "AAAAAAA=") is None
    assert m.verify_thinking(MODEL, "", data) is None


def test_bad_positions_are_refused() -> None:
    m = Minter(b"s")
    with pytest.raises(ValueError):
        m.mint_thinking(MODEL, TEXT, RID, 0, run_pos=2, run_len=2)
    with pytest.raises(ValueError):
        m.mint_thinking(MODEL, TEXT, "", 0)
    assert repr(m) == "Minter(<secret>)"


BINDING = Binding(b"s" * 12, b"t" * 12, b"m" * 12, bytes(12))


def test_bound_signature_commits_to_producer_and_prefix_record() -> None:
    m = Minter(b"s")
    bound = "claude-opus-5-5"
    sig = m.mint_thinking(bound, TEXT, RID, 0, binding=BINDING)
    assert sig.startswith("Eq") and sig != m.mint_thinking(bound, TEXT, RID, 0)
    info = m.verify_thinking(bound, TEXT, sig)
    assert info == MintInfo(RID, 0, 0, 1, "claude-opus-5-5", BINDING)
    assert m.verify_thinking("claude-fable-5-1", TEXT, sig) is None  # another model: not its own block
    assert m.inspect_thinking(TEXT, sig) == info  # but authentic, under the producer it names
    assert m.inspect_thinking(TEXT + " ", sig) is None
    assert m.inspect_thinking(TEXT, m.mint_thinking(MODEL, TEXT, RID, 0)) is None  # unbound: names no producer
    data = m.mint_redacted(bound, RID, 1, run_pos=1, run_len=2, binding=BINDING)
    assert data.startswith("Eq") and m.inspect_redacted(data) == MintInfo(RID, 1, 1, 2, "claude-opus-5-5", BINDING)


def test_a_rewritten_prefix_record_is_not_authentic() -> None:
    """The record is under the MAC: a client cannot re-bind a block by editing its envelope."""
    m = Minter(b"s")
    sig = m.mint_thinking("claude-opus-5-5", TEXT, RID, 0, binding=BINDING)
    raw = bytearray(base64.b64decode(sig))
    at = bytes(raw).index(b"s" * 12)
    raw[at:at + 12] = b"x" * 12
    forged = base64.b64encode(bytes(raw)).decode()
    assert m.verify_thinking("claude-opus-5-5", TEXT, forged) is None
    assert m.inspect_thinking(TEXT, forged) is None


def test_unbound_signatures_are_byte_identical_to_before() -> None:
    """The pre-binding wire format: no producer field, the 164-byte inner envelope ("EqQB")."""
    sig = Minter(b"s").mint_thinking(MODEL, TEXT, RID, 0)
    raw = base64.b64decode(sig)
    assert sig.startswith("EqQB") and len(raw) == 167 and b"claude" not in raw

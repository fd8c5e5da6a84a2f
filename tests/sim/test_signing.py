from __future__ import annotations

import base64

import pytest

from gateway.sim.signing import Minter, MintInfo, model_family

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

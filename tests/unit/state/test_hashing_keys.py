"""Pure helpers: hashing/normalisation, turn ids, index entries, key scheme and hash slots."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from state import keys
from state.records import TurnRecord, VerifiedPair


def test_exact_hash_is_sha256_of_exact_bytes() -> None:
    assert keys.exact_hash("a\r\nb") == hashlib.sha256(b"a\r\nb").hexdigest()
    assert keys.exact_hash("a\nb") != keys.exact_hash("a\r\nb")
    assert keys.exact_hash("x ") != keys.exact_hash("x")


@pytest.mark.parametrize("variant", ["a b c", " a b c ", "a\r\nb\tc", "\n\na  b\u00a0c\r\n", "a\u3000b\u2028c"])
def test_norm_hash_is_whitespace_crlf_and_trim_insensitive(variant: str) -> None:
    assert keys.normalize_text(variant) == "a b c"
    assert keys.norm_hash(variant) == keys.norm_hash("a b c")
    assert keys.norm_hash("abc") != keys.norm_hash("a b c")


@given(st.text())
def test_normalisation_is_idempotent(text: str) -> None:
    once = keys.normalize_text(text)
    assert keys.normalize_text(once) == once
    assert keys.norm_hash(text) == keys.norm_hash(once)


def test_turn_id_is_canonical_and_covers_fingerprint() -> None:
    a = [{"type": "tool_use", "id": "t1", "name": "n", "input": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}]
    b = [{"input": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "name": "n", "id": "t1", "type": "tool_use"}]
    assert keys.compute_turn_id(a) == keys.compute_turn_id(b)
    assert keys.compute_turn_id(a) != keys.compute_turn_id(a, "fp")
    assert keys.compute_turn_id(a, "") != keys.compute_turn_id(a, None)
    assert keys.compute_turn_id([{"type": "text", "text": "a"}]) != keys.compute_turn_id(
        [{"type": "text", "text": "a "}])
    rec = TurnRecord(content=a, prefix_fingerprint="fp", provider={"ignored": True})
    assert rec.turn_id == keys.compute_turn_id(a, "fp") and keys.is_valid_turn_id(rec.turn_id)


def test_turn_ids_stay_what_earlier_versions_computed() -> None:
    """A turn id is the record's idempotency key across replicas and versions (a retried write during a
    rolling upgrade must find the turn the other version wrote): pinned values, mixed key types included."""
    a = [{"type": "tool_use", "id": "t1", "name": "n",
          "input": {"x": 1, "y": [1, {"b": 2, "a": 1}], 2: "int key", "z": (True, None, 1.5)}}]
    assert keys.compute_turn_id(a, "fp") == "feafb2b8313b13b905210e07901ae219159c8d7c7a392a1a5a13de9d3a98e2e0"
    assert keys.compute_turn_id([{"type": "thinking", "thinking": "x\ud800", "signature": "s"}]) == \
        "660f80f8e9d489dc99b0b4a3778b04d9b851b01dbc24330905e5865beb84d872"


def _reference_canonical(obj: object) -> object:
    """The canonical form as first written (every key sorted by its type's name, then itself)."""
    if isinstance(obj, dict):
        items = [(k, _reference_canonical(v)) for k, v in obj.items()]
        items.sort(key=lambda kv: (type(kv[0]).__name__, kv[0]))
        return dict(items)
    if isinstance(obj, list | tuple):
        return [_reference_canonical(v) for v in obj]
    return obj


_json = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                     | st.dictionaries(st.text(max_size=2) | st.integers(0, 3), inner, max_size=3), max_leaves=12)


@given(_json)
def test_the_canonical_form_is_the_first_one(obj: object) -> None:
    assert keys.canonical_packb(obj) == keys.msgpack.packb(_reference_canonical(obj), use_bin_type=True,
                                                                 unicode_errors="surrogatepass")


def test_index_entries_and_pairs() -> None:
    content = [
        {"type": "thinking", "thinking": "", "signature": "omitted-sig"},
        {"type": "thinking", "thinking": "t1", "signature": "s1"},
        {"type": "thinking", "thinking": "unsigned"},
        {"type": "redacted_thinking", "data": "zzz"},
        {"type": "text", "text": "   "},
        {"type": "text", "text": "hello  world"},
        {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}},
        {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}},
    ]
    entries = keys.index_entries(content)
    assert entries.tool_ids == ("toolu_1",)
    assert entries.exact == ((keys.exact_hash("t1"), "s1"),)  # empty text is not indexed
    assert TurnRecord(content=content).verified_pair() == VerifiedPair("t1", "s1")
    assert TurnRecord(content=content[:1]).verified_pair() == VerifiedPair("", "omitted-sig")


def test_record_validation() -> None:
    with pytest.raises(TypeError):
        TurnRecord(content={"type": "text"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        TurnRecord(content=[], turn_id="not-hex")


def test_tenant_prefix_is_hmac_truncated() -> None:
    import hmac

    prefix = keys.tenant_prefix(b"secret", "sk-ant-api03-xyz")
    assert prefix == hmac.new(b"secret", b"sk-ant-api03-xyz", hashlib.sha256).hexdigest()[:32]
    assert "sk-ant" not in prefix and keys.is_valid_tenant(prefix)
    assert keys.tenant_prefix(b"other", "sk-ant-api03-xyz") != prefix


def test_scids() -> None:
    ids = {keys.new_scid() for _ in range(1000)}
    assert len(ids) == 1000 and all(keys.is_valid_scid(s) and len(s) == 22 for s in ids)
    fork = keys.fork_scid("a" * 22, 3, "0" * 64)
    assert keys.is_valid_scid(fork) and fork == keys.fork_scid("a" * 22, 3, "0" * 64)
    assert fork != keys.fork_scid("a" * 22, 4, "0" * 64)
    for bad in ("", "short", "has{brace}xxxxxxxxx", "x" * 65, "spaces are bad here", None, 42):
        assert not keys.is_valid_scid(bad)


def test_conversation_keys_share_one_slot_and_index_keys_spread() -> None:
    tenant = keys.tenant_prefix(b"s", "c")
    slots = set()
    for _ in range(50):
        ck = keys.conversation_keys(tenant, keys.new_scid())
        assert len({key_slot(k.encode()) for k in ck.all()}) == 1
        slots.add(key_slot(ck.meta.encode()))
    assert len(slots) > 40  # conversations spread over the cluster
    # a tenant's index entries fall in INDEX_BUCKETS hash tags: spread over 16 slots (no hot slot),
    # yet few enough that a load reads them with one script call per bucket
    index_keys = [keys.tool_key(tenant, f"toolu_{i}") for i in range(500)]
    index_keys += [keys.exact_key(tenant, f"{i:064x}") for i in range(500)]
    assert len({key_slot(k.encode()) for k in index_keys}) == keys.INDEX_BUCKETS
    assert len({keys.hash_tag(k) for k in index_keys}) == keys.INDEX_BUCKETS
    other = keys.tenant_prefix(b"s", "other")
    assert {keys.hash_tag(k) for k in index_keys}.isdisjoint({keys.hash_tag(keys.tool_key(other, "toolu_1"))})


def test_client_identifiers_cannot_inject_hash_tags_or_collide() -> None:
    tenant = "t" * 32
    assert keys.tool_key(tenant, "toolu_01ABC").endswith(":tool:toolu_01ABC")
    weird = keys.tool_key(tenant, "a{b}c d")
    tag = keys.hash_tag(weird)
    assert weird.startswith(f"tg:{tag}:tool:h.") and tag.startswith("{" + tenant + ":i")
    assert weird.count("{") == 1 and weird.count("}") == 1 and " " not in weird
    assert keys.tool_key(tenant, "h.abc") != keys.tool_key(tenant, "abc")
    assert keys.fingerprint_key(tenant, "x" * 500).count("x") < 10
    with pytest.raises(ValueError):
        keys.tool_key("bad:tenant", "x")
    with pytest.raises(ValueError):
        keys.conversation_keys(tenant, "bad}scid")


_SPACES = [chr(c) for c in range(0x110000) if chr(c).isspace()]


@given(st.text(alphabet=st.sampled_from([*_SPACES, "a", "b", "é", " ", "\ud800"]), max_size=120)
       | st.text(alphabet=st.sampled_from([c for c in _SPACES if c.isascii()] + ["a", "b", " "]), max_size=120))
def test_normalization_is_split_join_whatever_the_text(text: str) -> None:
    """The ASCII fast path (bytes, no list of words) and the general one normalize exactly as ``str.split`` does:
    the hashes stored before it stay the same."""
    expected = " ".join(text.split())
    assert keys.normalize_text(text) == expected
    assert keys.normalized_bytes(text) == expected.encode("utf-8", "surrogatepass")

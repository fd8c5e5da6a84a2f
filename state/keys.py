"""Every Redis key, id format and default bound of the store, and every hash and normalisation the store indexes
by. No other module builds a key or computes what one is made of.

Key scheme (``<t>`` = tenant prefix, ``<scid>`` = conversation id)::

    tg:{<t>:<scid>}:meta    HASH  created, updated (ms), version, start, next, pair, parent, forked_at
    tg:{<t>:<scid>}:turns   LIST  encoded TurnRecords, index i = position start+i ("" = gap)
    tg:{<t>:<scid>}:tids    LIST  turn ids, parallel to :turns ("" = gap)
    tg:{<t>:i<b>}:tool:<tool id>   STRING  Location(scid, turn_id, position)     (Layer 1)
    tg:{<t>:i<b>}:x:<exact hash>   STRING  signature issued for that exact text  (Layer 2)
    tg:{<t>:i<b>}:fp:<fingerprint> STRING  scid
    tg:{<scid>}:seen               STRING  "1": some tenant holds this SCID (no tenant in it)

A conversation's three keys share the hash tag ``{<t>:<scid>}``, so they live in one Redis Cluster slot
and one Lua script updates them atomically. Index keys live elsewhere: each falls in one of
``INDEX_BUCKETS`` buckets per tenant (``<b>`` = CRC32 of the key's kind and id, mod 16), and a bucket is
one hash tag. So a tenant's index spreads over 16 slots (no hot slot), while a load reads and refreshes
all its lookups with one ``GETEX_MANY`` script call per bucket (at most 16 commands instead of
thousands) in the same pipeline. Writes are idempotent ``SET EX``. Every key embeds the tenant prefix,
so no lookup can cross tenants. Identifiers from clients (tool ids, fingerprints) are embedded
verbatim only when short and made of safe characters; otherwise their SHA-256 is used.

The one exception is the SCID marker ``tg:{<scid>}:seen``: tenant-less by design, it says only that
*some* tenant recorded a turn under this SCID within the TTL (written with every recorded turn, same
TTL). A load that names a SCID reads it in the same round trip, so a header naming a conversation of
another tenant can be counted as "foreign" rather than "miss"; the client still just gets a miss. Its
hash tag is the bare SCID (no ``:``), so it cannot collide with a tenant-tagged key.

The hashes: the gateway calls the same functions to look up as the store does to index. One module on purpose:
a lookup only hits if the writer and the reader computed the key the same way.

- ``exact_hash(text)``: SHA-256 (hex) of the exact UTF-8 bytes of a thinking text (Layer 2, strict).
  Lone surrogates (possible in JSON-decoded text) are encoded with ``surrogatepass`` so nothing is lost.
- ``normalize_text(text)`` / ``norm_hash(text)``: whitespace-insensitive matching. All runs of Unicode
  whitespace (spaces, tabs, CR, LF, CRLF, NBSP...) collapse to one space, then both ends are stripped;
  ``norm_hash`` is SHA-256 (hex) of the normalised text. The gateway compares a replayed message's text
  with a recorded turn's by it; it is no index (text never names a turn or a conversation).
- ``compute_turn_id(content, prefix_fingerprint)``: SHA-256 (hex) over the canonical msgpack (map keys
  sorted recursively) of the assistant content plus the prefix fingerprint the turn answered. Same
  content answering the same prefix = same id, so recording is idempotent; an identical short reply
  ("Done.") answering a different prefix is a different turn.
- ``replay_digest(content)``: BLAKE2b-128 over the JSON of an assistant message's content with keys
  sorted (key order and whitespace insensitive, every value exact). A replay whose digest equals a
  turn's recorded one is that turn, verbatim: repair accepts it without decoding the record.
- ``index_entries(content)``: the lookup entries a turn contributes (tool ids, exact-text hashes with
  their signatures).
  Empty thinking texts (``display: omitted``) get no exact-hash entry: every such block has the same
  hash, so it would map to an arbitrary other turn's signature (a signature-only fallback).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import orjson

KEY_PREFIX = "tg"
DEFAULT_TTL_SECONDS = 86_400
DEFAULT_MAX_TURNS = 1_000
TENANT_BYTES = 16
SCID_BYTES = 16  # 128 bits
INDEX_BUCKETS = 16

_SCID_RE = re.compile(r"[A-Za-z0-9_-]{16,64}")
_TENANT_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SAFE_PART_RE = re.compile(r"[A-Za-z0-9_.:@+=-]{1,128}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")


def tenant_prefix(secret: bytes, credential: str) -> str:
    """HMAC-SHA256(secret, credential), first 16 bytes as 32 hex chars. The credential is never stored."""
    digest = hmac.new(secret, credential.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return digest[:TENANT_BYTES].hex()


def new_scid() -> str:
    """A fresh conversation id: 128 random bits, URL-safe base64 without padding (22 chars)."""
    return secrets.token_urlsafe(SCID_BYTES)


def is_valid_scid(scid: object) -> bool:
    """True for 16-64 URL-safe base64 characters (what ``new_scid``/``fork_scid`` produce)."""
    return isinstance(scid, str) and _SCID_RE.fullmatch(scid) is not None


def _tenant_ok(tenant: str) -> bool:
    return _TENANT_RE.fullmatch(tenant) is not None


def is_valid_tenant(tenant: object) -> bool:
    return isinstance(tenant, str) and _tenant_ok(tenant)


def is_valid_turn_id(turn_id: object) -> bool:
    return isinstance(turn_id, str) and _HEX64_RE.fullmatch(turn_id) is not None


def check_tenant(tenant: str) -> str:
    if not is_valid_tenant(tenant):
        raise ValueError("tenant must be 1-64 URL-safe characters (use tenant_prefix())")
    return tenant


def check_scid(scid: str) -> str:
    if not is_valid_scid(scid):
        raise ValueError("scid must be 16-64 URL-safe base64 characters (use new_scid())")
    return scid


def fork_scid(scid: str, position: int, turn_id: str) -> str:
    """The deterministic SCID of the fork of ``scid`` at ``position`` with turn ``turn_id``.

    Deterministic so that a retried forking write lands on the same fork instead of creating another.
    Only reachable inside the same tenant, like every key.
    """
    digest = hashlib.sha256(f"tg-fork/1\0{scid}\0{position}\0{turn_id}".encode()).digest()
    return base64.urlsafe_b64encode(digest[:SCID_BYTES]).rstrip(b"=").decode()


def _part(value: str) -> str:
    if _SAFE_PART_RE.fullmatch(value) and not value.startswith("h."):
        return value
    return "h." + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """The three keys of one conversation (one hash slot). Order = the scripts' KEYS order."""

    meta: str
    turns: str
    tids: str

    def all(self) -> tuple[str, str, str]:
        return (self.meta, self.turns, self.tids)


def conversation_keys(tenant: str, scid: str) -> ConversationKeys:
    tag = f"{KEY_PREFIX}:{{{check_tenant(tenant)}:{check_scid(scid)}}}"
    return ConversationKeys(f"{tag}:meta", f"{tag}:turns", f"{tag}:tids")


def _index_key(tenant: str, kind: str, ident: str) -> str:
    rest = f"{kind}:{_part(ident)}"
    bucket = zlib.crc32(rest.encode()) % INDEX_BUCKETS
    return f"{KEY_PREFIX}:{{{check_tenant(tenant)}:i{bucket}}}:{rest}"


def scid_marker_key(scid: str) -> str:
    """The tenant-less existence marker of a SCID (see the module docstring). Its value is ``b"1"``."""
    return f"{KEY_PREFIX}:{{{check_scid(scid)}}}:seen"


SCID_MARKER_VALUE = b"1"


def tenant_bytes_key(tenant: str) -> str:
    """The tenant's storage counter: bytes of turns recorded in the current window (``TENANT_BYTES``)."""
    return f"{KEY_PREFIX}:{{{check_tenant(tenant)}:bytes}}"


def hash_tag(key: str) -> str:
    """The ``{...}`` hash tag of a key built here (keys sharing it share a cluster slot)."""
    return key[key.index("{"): key.index("}") + 1]


def tool_key(tenant: str, tool_id: str) -> str:
    return _index_key(tenant, "tool", tool_id)


def exact_key(tenant: str, exact_hash: str) -> str:
    return _index_key(tenant, "x", exact_hash)


def fingerprint_key(tenant: str, fingerprint: str) -> str:
    return _index_key(tenant, "fp", fingerprint)


# Gateway keys (``state.gateway_keys``): every key of them shares the hash tag ``{gk}`` (one Cluster slot), so
# one script admits a request (the key's record, its rate and concurrency counters) atomically:
#
#     tg:{gk}:names          HASH    key name -> key id
#     tg:{gk}:rec:<id>       HASH    the key's record (``state.gateway_keys.FIELDS``; its secret only as a hash)
#     tg:{gk}:rpm:<id>       STRING  the requests-per-minute limit's theoretical arrival time (GCRA, ms)
#     tg:{gk}:cc:<id>        STRING  requests in flight
#     tg:{gk}:tpm:<id>:<m>   STRING  tokens counted in minute <m> (ms since the epoch // 60000)
#     tg:{gk}:spend:<id>:<p> STRING  micro-dollars spent in period <p> (d<YYYYMMDD>, w<YYYYWW> ISO, m<YYYYMM>, UTC)
#     tg:{gk}:usage:<id>:<d> HASH    "<model> <kind>" -> tokens, "<model> cost" -> micro-dollars, of day <d>
GATEWAY_KEY_TAG = "{gk}"
_KEY_ID_RE = re.compile(r"[0-9a-f]{12}")


def is_valid_key_id(key_id: object) -> bool:
    return isinstance(key_id, str) and _KEY_ID_RE.fullmatch(key_id) is not None


def gateway_key_spend(key_id: str, periods: tuple[str, str, str]) -> tuple[str, str, str]:
    """The spend counters of one gateway key for its (day, week, month) periods."""
    if not is_valid_key_id(key_id):
        raise ValueError("invalid gateway key id")
    return tuple(f"{KEY_PREFIX}:{GATEWAY_KEY_TAG}:spend:{key_id}:{p}" for p in periods)  # type: ignore[return-value]


def gateway_key_usage(key_id: str, day: str) -> str:
    """One gateway key's usage of one day (``YYYYMMDD``, UTC)."""
    if not is_valid_key_id(key_id):
        raise ValueError("invalid gateway key id")
    return f"{KEY_PREFIX}:{GATEWAY_KEY_TAG}:usage:{key_id}:{day}"


def gateway_key_names() -> str:
    return f"{KEY_PREFIX}:{GATEWAY_KEY_TAG}:names"


def gateway_key_keys(key_id: str, minute: int) -> tuple[str, str, str, str]:
    """(record, rate, concurrency, tokens of ``minute``) of one gateway key."""
    if not is_valid_key_id(key_id):
        raise ValueError("invalid gateway key id")
    base = f"{KEY_PREFIX}:{GATEWAY_KEY_TAG}"
    return (f"{base}:rec:{key_id}", f"{base}:rpm:{key_id}", f"{base}:cc:{key_id}",
            f"{base}:tpm:{key_id}:{minute}")


TURN_ID_SCHEME = "tg-turn/1"


def text_bytes(text: str) -> bytes:
    """The exact bytes a text hashes as (UTF-8, lone surrogates kept)."""
    return text.encode("utf-8", "surrogatepass")


def exact_hash(text: str) -> str:
    """SHA-256 hex of the exact thinking text bytes (no normalisation at all)."""
    return hashlib.sha256(text_bytes(text)).hexdigest()


# ASCII whitespace as ``str.split`` sees it (``str.isspace``), each byte to a space
_ASCII_SPACES = bytes.maketrans(b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f", b" " * 9)


def normalize_text(text: str) -> str:
    """Collapse every run of whitespace to a single space and strip both ends."""
    if text.isascii():
        return normalized_bytes(text).decode("ascii")
    return " ".join(text.split())


def normalized_bytes(text: str) -> bytes:
    """``text_bytes(normalize_text(text))``, in time linear in the text and within a few copies of it: an ASCII
    text is normalized as bytes (whitespace translated, runs of spaces halved until none is left), never split
    into a list of its words (24 MB of short words would be five million strings)."""
    if not text.isascii():
        return text_bytes(" ".join(text.split()))
    raw = text.encode("ascii").translate(_ASCII_SPACES)
    while b"  " in raw:
        raw = raw.replace(b"  ", b" ")
    return raw.strip(b" ")


def norm_hash(text: str) -> str:
    """SHA-256 hex of ``normalize_text(text)``; insensitive to whitespace, CRLF/LF and trimming."""
    return hashlib.sha256(normalized_bytes(text)).hexdigest()


_NESTED = (Mapping, list, tuple)


def _canonical(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        keys = list(obj)
        if all(type(k) is str for k in keys):  # (every stored dict: the sort below, without a key function)
            keys.sort()
            return {k: _canonical(v) if isinstance(v := obj[k], _NESTED) else v for k in keys}
        items = [(k, _canonical(v)) for k, v in obj.items()]
        items.sort(key=lambda kv: (type(kv[0]).__name__, kv[0]))
        return dict(items)
    if isinstance(obj, list | tuple):
        return [_canonical(v) if isinstance(v, _NESTED) else v for v in obj]
    return obj


def canonical_packb(obj: Any) -> bytes:
    """Deterministic msgpack: map keys sorted recursively, tuples as arrays, strings surrogate-safe."""
    packed: bytes = msgpack.packb(_canonical(obj), use_bin_type=True, unicode_errors="surrogatepass")
    return packed


def compute_turn_id(content: Sequence[Mapping[str, Any]], prefix_fingerprint: str | None = None) -> str:
    """The idempotency id of a turn (64 hex chars). Provider-opaque fields are not part of it."""
    return hashlib.sha256(canonical_packb([TURN_ID_SCHEME, content, prefix_fingerprint])).hexdigest()


REPLAY_DIGEST_BYTES = 16


def replay_digest(content: Any) -> bytes | None:
    """The digest of an assistant message's content as JSON (keys sorted); None if it is not a list
    or not representable as JSON (lone surrogates, non-string keys). SHA-256, truncated: computed for
    every replayed assistant message of every request, and with the CPU's SHA extensions it hashes
    about twice as fast as BLAKE2b here (a digest of the earlier BLAKE2b scheme simply never matches:
    such a turn is matched and compared block by block instead)."""
    if not isinstance(content, list):
        return None
    try:
        data = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return None
    return hashlib.sha256(data).digest()[:REPLAY_DIGEST_BYTES]


def thinking_pairs(content: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """``(thinking, signature)`` of every thinking block that has both (signature non-empty)."""
    for block in content:
        if block.get("type") != "thinking":
            continue
        text, sig = block.get("thinking"), block.get("signature")
        if isinstance(text, str) and isinstance(sig, str) and sig:
            yield text, sig


def last_thinking_pair(content: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """The last verified ``(thinking, signature)`` pair of a turn, or ``None``."""
    last = None
    for pair in thinking_pairs(content):
        last = pair
    return last


@dataclass(frozen=True, slots=True)
class IndexEntries:
    """What one turn contributes to the indexes (duplicates removed, first occurrence order)."""

    tool_ids: tuple[str, ...]
    exact: tuple[tuple[str, str], ...]  # (exact_hash of a thinking text, its signature)


def tool_use_ids(content: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The tool_use ids of one turn's content, in order, duplicates and empty ids left out."""
    ids: dict[str, None] = {}
    for block in content:
        if block.get("type") == "tool_use":
            tid = block.get("id")
            if isinstance(tid, str) and tid:
                ids[tid] = None
    return tuple(ids)


def index_entries(content: Sequence[Mapping[str, Any]]) -> IndexEntries:
    """Tool-use ids and exact thinking-text hashes with their signatures of one turn."""
    exact: dict[str, tuple[str, str]] = {}
    for text, sig in thinking_pairs(content):
        if text:
            h = exact_hash(text)
            exact[h] = (h, sig)
    return IndexEntries(tool_use_ids(content), tuple(exact.values()))

"""Every Redis key, id format and default bound of the store. No other module builds a key.

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
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import zlib
from dataclasses import dataclass

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

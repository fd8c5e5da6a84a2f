"""The ``Store`` protocol the gateway is written against, its request/result types and its errors.

Backends (``state.factory.open_store`` picks one):

- ``MemoryStore``: embedded, in-process, the default when no Redis URL is configured.
- ``RedisStore``: a single Redis node (``redis://``, ``rediss://``) or a Redis Cluster
  (``redis+cluster://``). One pipelined round trip per phase; Lua for the atomic conversation update.

All backends give the same answers (one shared contract test suite). Round-trip guarantees:

=====================  ===========================================================================
call                   round trips
=====================  ===========================================================================
``load``               1 when ``query.scid`` names a stored conversation that holds every index
                       hit's turn (the normal stateful path); at most 2 otherwise (a second
                       pipeline fetches at most ``max_fetch`` (default 2) further conversations, the
                       most referenced first). 0 for an empty query.
``record``             1 (Lua append + index SETs in one pipeline); 2 when it forks.
``get_conversation``   1
=====================  ===========================================================================

Failure model: each round trip must be answered within ``timeout_ms`` of its commands being written (a
round trip that is not is retried once, on a fresh connection); the whole call, queueing in the worker
included, within a larger budget (``RedisStore``). Any backend trouble raises ``StoreUnavailable``:
``StoreTimeout`` for a slow backend, ``CircuitOpen`` at once while the circuit breaker is open. Nothing a
backend does raises anything else, except ``ValueError`` for malformed arguments (a bad tenant, a
malformed SCID passed to ``record``) and ``CodecError`` for a ``TurnRecord`` that msgpack cannot
encode (checked before any I/O). Undecodable stored data never raises: it is skipped and counted in
``LoadResult.undecodable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from state.coherence import Head
from state.errors import CircuitOpen, CodecError, StoreError, StoreTimeout, StoreUnavailable, TenantOverBudget
from state.gateway_keys import Admission, KeyRecord
from state.records import ConversationState, Location, TurnRecord

__all__ = [
    "CircuitOpen", "CodecError", "LoadQuery", "LoadResult", "RecordResult", "Store", "StoreError", "StoreHealth",
    "StoreTimeout", "StoreUnavailable", "TenantOverBudget", "TurnWrite",
]

CircuitState = Literal["closed", "open", "half_open"]
RecordStatus = Literal["appended", "duplicate", "forked"]


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """For ``/readyz``. ``ok`` = the backend answered a PING just now (always true for memory)."""

    ok: bool
    backend: str  # "memory" | "redis" | "redis-cluster"
    circuit: CircuitState
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LoadQuery:
    """Everything a request can be matched by; compute hashes with ``state.keys``.

    - ``scid``: from the client's header; ignored (treated as absent) unless ``keys.is_valid_scid``.
    - ``tool_ids``: tool_use ids seen in the replayed history (Layer 1).
    - ``exact_hashes``: ``hashing.exact_hash(thinking_text)`` of replayed thinking blocks (Layer 2).
    - ``fingerprints``: gateway-computed fingerprints of the conversation prefix (opaque here).
    - ``hint_scid``: the conversation the caller expects the index hits to name (a per-process memory
      of earlier answers, never trusted): loaded speculatively in the first round trip, and kept only
      if an index hit names it, so a correct hint saves the second round trip and a wrong one costs
      nothing but the bytes read.
    """

    scid: str | None = None
    tool_ids: Sequence[str] = ()
    exact_hashes: Sequence[str] = ()
    fingerprints: Sequence[str] = ()
    hint_scid: str | None = None


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What ``Store.load`` found.

    - ``conversation``: the conversation named by ``query.scid``, if it exists.
    - ``conversations``: every conversation loaded, by SCID (includes ``conversation``).
    - ``tool_hits``: query key -> ``Location`` of the record holding it. Only hits whose
      record was loaded are reported, so ``record(location)`` never misses for them; when the same turn
      is in several loaded conversations (a fork copies its parent's prefix), the location points into
      ``conversation`` first. Hits pointing at conversations that were not loaded (beyond ``max_fetch``)
      or at records gone from their conversation (trimmed) are left out and counted in ``unresolved``.
    - ``exact_hits``: exact hash -> the signature issued for the thinking text with that SHA-256 (the
      text is not stored again: the caller hashed its own text to ask, so a hit is for exactly it).
    - ``fingerprint_hits``: fingerprint -> SCID, as indexed (that conversation may not be loaded).
    - ``foreign``: ``query.scid`` names no conversation of this tenant, but some tenant recorded a turn
      under it within the TTL (the tenant-less marker ``keys.scid_marker_key``, read in the first round
      trip). For metrics only: to the caller it is a miss like any other, nothing of it is returned.
    - ``round_trips``: how many pipelined round trips the load took (0, 1 or 2).
    - ``ambiguous``: lookups whose index entry was written for two different turns (or, for a fingerprint,
      conversations): no hit, since the evidence names no one thing (``scripts.INDEX_PUT``).
    """

    conversation: ConversationState | None = None
    conversations: Mapping[str, ConversationState] = field(default_factory=dict)
    tool_hits: Mapping[str, Location] = field(default_factory=dict)
    exact_hits: Mapping[str, str] = field(default_factory=dict)
    fingerprint_hits: Mapping[str, str] = field(default_factory=dict)
    foreign: bool = False
    round_trips: int = 0
    unresolved: int = 0
    undecodable: int = 0
    ambiguous: int = 0

    def record(self, location: Location) -> TurnRecord | None:
        """The loaded record at ``location`` (matched by turn id within its conversation)."""
        conv = self.conversations.get(location.scid)
        return conv.turn_by_id(location.turn_id) if conv else None

    def record_for_tool(self, tool_id: str) -> TurnRecord | None:
        loc = self.tool_hits.get(tool_id)
        return self.record(loc) if loc else None



@dataclass(frozen=True, slots=True)
class TurnWrite:
    """One turn to record.

    - ``scid``: the conversation; ``None`` creates a new one with ``keys.new_scid()``. A valid SCID that
      does not exist (never did, or expired) is created under that SCID; to make creating retry-safe,
      generate the SCID yourself with ``new_scid()`` and retry with the same one.
    - ``expected_position``: the absolute position the gateway believes this turn takes (the number of
      assistant turns before it). ``None`` appends at the end. If the conversation holds a different
      turn there, the store forks (see ``Store.record``). Beyond the end, the positions in between
      are left as a gap.
    - ``fingerprints``: extra prefix fingerprints to map to this conversation, in addition to
      ``record.prefix_fingerprint`` (e.g. the fingerprint of the prefix that now ends with this turn).
    - ``fork``: the caller knows this turn answers a path that left the conversation's (the client
      edited an earlier message): record it in the fork at ``expected_position`` (required) even if
      that position is free, exactly as on a position conflict. The same turn already at
      ``expected_position`` is still a duplicate (a retry), and a conversation that does not exist is
      created as without ``fork`` (there is nothing to fork from).
    - ``encoded``: ``codec.encode_turn(record)``, when the caller encoded it already (off its event loop: a
      turn with a huge prompt); None: the store encodes it.
    Index entries (tool ids, exact-text signatures, norm hashes) are always derived from
    ``record.content`` with ``state.keys.index_entries`` so writers and readers cannot disagree.
    """

    record: TurnRecord
    scid: str | None = None
    expected_position: int | None = None
    fingerprints: Sequence[str] = ()
    fork: bool = False
    encoded: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class RecordResult:
    """Outcome of ``Store.record``.

    ``status``: "appended" (stored now), "duplicate" (the same turn id was already there: nothing
    changed, ``position`` is the existing one) or "forked" (stored in a new fork). ``scid`` is the
    conversation holding the turn: give it back to the client. ``forked`` is true when the turn lives
    in a fork (also for a retried forking write, which reports "duplicate").
    """

    scid: str
    position: int
    turn_id: str
    status: RecordStatus
    version: int
    created: bool = False
    forked: bool = False
    forked_from: str | None = None
    round_trips: int = 1
    prompt_capped: bool = False  # stored without its prompt (``StorageLimits.max_prompt_bytes``)
    head: Head | None = None  # the conversation's head right after this append, when the reply says it exactly


@runtime_checkable
class Store(Protocol):
    """Conversation/turn store. ``tenant`` is always ``state.keys.tenant_prefix(secret, credential)``."""

    backend: str

    async def start(self) -> None:
        """Connect and register scripts. Never raises for an unreachable backend: check ``health()``."""
        ...

    async def close(self) -> None:
        """Release connections. Idempotent."""
        ...

    async def health(self) -> StoreHealth:
        """Ping the backend (through the breaker, bounded by the timeout). Never raises."""
        ...

    async def load(self, tenant: str, query: LoadQuery) -> LoadResult:
        """Fetch the SCID's conversation and every index hit in ONE pipelined round trip.

        If hits point at conversations not loaded by it (no/unknown SCID, or turns that are not in the
        SCID's conversation), ONE more pipelined round trip fetches at most ``max_fetch`` of them, the
        most referenced first (fingerprint hits only count when no conversation was loaded). So: 1 round
        trip when the SCID is known and matches, at most 2 otherwise. Refreshes the TTL of every loaded
        conversation and of every index entry found (a lookup is a use). Always at least one round trip: what a
        worker holds of a conversation serves only as of the head this round trip reads (``state.coherence``).
        """
        ...

    async def record(self, tenant: str, write: TurnWrite) -> RecordResult:
        """Append one turn atomically and idempotently; write its index entries in the same pipeline.

        One round trip: a Lua script appends the turn and advances the conversation (version + 1,
        updated time, last verified pair if the turn has one, TTL refresh, trim to ``max_turns``);
        concurrent appends from any number of replicas are serialised by Redis and none is lost. The same
        ``turn_id`` already in the conversation (at ``expected_position``, or anywhere when it is
        ``None``) is a no-op returning the existing position.

        Fork: if ``expected_position`` is held by a different turn (or ``write.fork`` asks for it and the
        turn is not already there), nothing is overwritten; a second
        round trip creates a new conversation = the retained turns ``[first_position,
        expected_position)`` of the old one + this turn at ``expected_position``, and re-points this
        turn's index entries at it. The fork's SCID is derived from (old SCID, position, turn id),
        so a retried forking write lands on the same fork (status "duplicate").
        """
        ...

    async def get_conversation(self, tenant: str, scid: str) -> ConversationState | None:
        """The conversation (meta + retained turns in position order), or ``None``. One round trip.
        Refreshes its TTL. An invalid SCID returns ``None``."""
        ...

    async def key_put(self, record: KeyRecord, *, create: bool) -> str:
        """Create a gateway key (its name not taken: else "exists") or update one (else "missing")."""
        ...

    async def key_records(self) -> list[KeyRecord]:
        """Every gateway key, by name (two round trips)."""
        ...

    async def admit(self, key_id: str, secret_hash: str, now_ms: int) -> Admission:
        """One request under a gateway key: known, not revoked or expired, within its limits (one round trip)."""
        ...

    async def release(self, key_id: str, held: bool, tokens: int, now_ms: int, cost_micros: int = 0,
                      usage: Mapping[str, int] | None = None) -> None:
        """After a request under a gateway key: its concurrency slot back, its tokens and cost counted, its usage
        added to the day's."""
        ...

    async def key_usage(self, key_ids: Sequence[str], days: Sequence[str]) -> dict[str, dict[str, dict[str, int]]]:
        """Key id -> day (``YYYYMMDD``) -> the day's usage fields."""
        ...

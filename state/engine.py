"""The load/record algorithm, written once for every backend.

A backend supplies one primitive, ``_roundtrip(ops)``: execute a batch of ``Op`` (Lua script calls,
SET EX and EXISTS) in ONE round trip (a Redis pipeline; a plain loop in memory) and return one reply per op,
Redis-shaped (bytes, ints, nested lists, ``None``). And ``_guarded(fn, *args)``: run a whole store call
under the backend's failure policy (timeout + circuit breaker for Redis). Everything else (key building,
encoding, resolving index hits, forking) lives here, so all backends behave the same. So does the
worker's cache of the conversations it loaded (``state.convcache``): a LOAD transfers only the turns
added since, in the same round trip.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from state import keys, records
from state.coherence import Head, Lru, continues
from state.convcache import DEFAULT_MAX_BYTES, CachedConversation, ConversationCache, appended, load_args
from state.errors import CodecError, TenantOverBudget
from state.gateway_keys import Admission, KeyRecord, Periods, pairs
from state.records import ConversationState, Location, TurnRecord, VerifiedPair
from state.scripts import (
    ADMIT,
    FORK,
    GETEX_MANY,
    INDEX_PUT,
    KEY_PUT,
    KEY_READ,
    LOAD,
    RECORD,
    RELEASE,
    TENANT_BYTES,
    TENANT_TOTAL,
    LuaScript,
)
from state.store import LoadQuery, LoadResult, RecordResult, TurnWrite

T = TypeVar("T")
BUDGET_RECHECK_S = 30.0  # how long a worker refuses an over-budget tenant's records before it records one to check
Arg = bytes | str | int


@dataclass(frozen=True, slots=True)
class StorageLimits:
    """What one tenant may store. ``tenant_budget_bytes``: stored bytes of the turns a tenant records per window of
    the records' TTL (past it, its turns are not recorded: ``TenantOverBudget``; 0 = no budget).
    ``max_prompt_bytes``: a record whose stored form is larger is stored without its prompt (0 = no cap)."""

    tenant_budget_bytes: int = 0
    max_prompt_bytes: int = 0


NO_LIMITS = StorageLimits()


@dataclass(frozen=True, slots=True)
class SetEx:
    key: str
    value: bytes
    ttl: int


@dataclass(frozen=True, slots=True)
class Eval:
    script: LuaScript
    keys: tuple[str, ...]
    args: tuple[Arg, ...]


@dataclass(frozen=True, slots=True)
class Exists:
    """EXISTS of one key (reply 0/1); reads without refreshing the TTL."""

    key: str


Op = SetEx | Eval | Exists


def _lookup_value(v: object) -> bool:
    """A value a load query may look up (a non-empty string; anything else in a query is ignored)."""
    return isinstance(v, str) and bool(v)


def _dedupe(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if _lookup_value(v)))


def _first_read(query: LoadQuery) -> tuple[str | None, bool]:
    """The conversation a load reads first, and whether it is only a hint: the query's SCID, else its hinted
    SCID when the query has index lookups (a hint is taken only where an index hit names it)."""
    if keys.is_valid_scid(query.scid):
        return query.scid, False
    lookups = any(_lookup_value(v) for values in (query.tool_ids, query.exact_hashes, query.fingerprints)
                  for v in values)
    return (query.hint_scid, True) if lookups and keys.is_valid_scid(query.hint_scid) else (None, False)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class EngineStore:
    """Base class of the backends; implements the ``Store`` protocol's data methods."""

    backend = "abstract"
    # A script may touch keys of one cluster slot only (Redis Cluster): the index keys one call reads or writes are
    # grouped by hash tag, one call per group. Elsewhere one call takes them all (a tool loop's turn: about a dozen
    # script calls a request become four or five).
    one_slot_per_script = False

    def __init__(self, *, ttl_seconds: int = keys.DEFAULT_TTL_SECONDS,
                 max_turns: int = keys.DEFAULT_MAX_TURNS, max_fetch: int = 2,
                 wall_clock: Callable[[], float] = time.time, load_cache_bytes: int = DEFAULT_MAX_BYTES,
                 decoded_turns: int = records.DEFAULT_TURN_CACHE_ENTRIES, limits: StorageLimits = NO_LIMITS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``load_cache_bytes``: bound of this worker's cache of loaded conversations (``state.convcache``;
        the memory its decoded turns hold, ``codec.turn_cost``; 0 = off, every load transfers the whole turn list).
        ``decoded_turns``: how many decoded turns it keeps by their stored bytes (``codec.decode_turn``; 0 = off),
        holding at most ``codec.TURN_CACHE_BYTES``. ``limits``: the per-tenant storage budget and the prompt cap
        (``StorageLimits``)."""
        if ttl_seconds < 1 or max_turns < 1 or max_fetch < 0:
            raise ValueError("ttl_seconds and max_turns must be >= 1, max_fetch >= 0")
        self.ttl_seconds = int(ttl_seconds)
        self.max_turns = int(max_turns)
        self.max_fetch = int(max_fetch)
        self._wall = wall_clock
        self.conversation_cache = ConversationCache(load_cache_bytes)
        self.decoded_turns: records.TurnCache = records.turn_cache(decoded_turns, records.TURN_CACHE_BYTES)
        self.tenant_budget_bytes = max(0, limits.tenant_budget_bytes)
        self.max_prompt_bytes = max(0, limits.max_prompt_bytes)
        self._clock = clock
        # tenant -> until when its records are refused: learnt from the counter a record of this worker returned
        self._over_budget: Lru[str, float] = Lru(1024)

    def _bucket(self, key: str) -> str:
        """The group of index keys ``key`` is read or written with in one script call (``one_slot_per_script``)."""
        return keys.hash_tag(key) if self.one_slot_per_script else ""

    # -- backend hooks -------------------------------------------------------------------------
    async def _roundtrip(self, ops: Sequence[Op]) -> list[Any]:
        raise NotImplementedError

    async def _guarded(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run one whole store call ``fn(*args)`` under the backend's failure policy."""
        return await fn(*args)

    # -- Gateway keys (``state.gateway_keys``) ----------------------------------------------------
    async def key_put(self, record: KeyRecord, *, create: bool) -> str:
        """Create a key (its name not taken: else "exists") or update one (by its name and id: else "missing")."""
        rec = keys.gateway_key_keys(record.key_id, 0)[0]
        args = ["create" if create else "update", record.name, record.key_id,
                *(x for kv in record.fields().items() for x in kv)]
        reply = await self._guarded(self._roundtrip, [Eval(KEY_PUT, (keys.gateway_key_names(), rec), tuple(args))])
        return _text(reply[0])

    async def key_records(self) -> list[KeyRecord]:
        """Every gateway key, by name."""
        names = keys.gateway_key_names()
        first = await self._guarded(self._roundtrip, [Eval(KEY_READ, (names,), ())])
        ids = sorted(pairs(first[0][0]).items())
        recs = tuple(keys.gateway_key_keys(key_id, 0)[0] for _, key_id in ids if keys.is_valid_key_id(key_id))
        if not recs:
            return []
        reply = await self._guarded(self._roundtrip, [Eval(KEY_READ, (names, *recs), ())])
        return [KeyRecord.parse(r.rsplit(":", 1)[1], pairs(flat)) for r, flat in zip(recs, reply[0][1:], strict=True)
                if flat]

    async def admit(self, key_id: str, secret_hash: str, now_ms: int) -> Admission:
        """One request under a gateway key (``scripts.ADMIT``), in one round trip."""
        p = Periods.at(now_ms)
        names = (*keys.gateway_key_keys(key_id, now_ms // 60000), *keys.gateway_key_spend(key_id, (p.day, p.week,
                                                                                                  p.month)))
        args = (secret_hash, now_ms, p.day_left_ms, p.week_left_ms, p.month_left_ms)
        reply = await self._guarded(self._roundtrip, [Eval(ADMIT, names, args)])
        return Admission.parse(list(reply[0]))

    async def release(self, key_id: str, held: bool, tokens: int, now_ms: int, cost_micros: int = 0,
                      usage: Mapping[str, int] | None = None) -> None:
        """After a request under a gateway key: its concurrency slot back, its tokens and cost counted, its usage
        added to the day's (``usage``: field -> amount; ``scripts.RELEASE``)."""
        p = Periods.at(now_ms)
        _, _, cc, tpm = keys.gateway_key_keys(key_id, now_ms // 60000)
        names = (cc, tpm, *keys.gateway_key_spend(key_id, (p.day, p.week, p.month)),
                 keys.gateway_key_usage(key_id, p.day[1:]))
        args = ("1" if held else "0", max(0, tokens), max(0, cost_micros),
                *(x for field, n in (usage or {}).items() if n for x in (field, n)))
        await self._guarded(self._roundtrip, [Eval(RELEASE, names, args)])

    async def key_usage(self, key_ids: Sequence[str], days: Sequence[str]) -> dict[str, dict[str, dict[str, int]]]:
        """Key id -> day (``YYYYMMDD``) -> the day's usage fields (days without usage left out)."""
        wanted = [(k, d) for k in key_ids if keys.is_valid_key_id(k) for d in days]
        if not wanted:
            return {}
        reply = await self._guarded(self._roundtrip, [Eval(KEY_READ, (keys.gateway_key_names(), *(
            keys.gateway_key_usage(k, d) for k, d in wanted)), ())])
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (key_id, day), flat in zip(wanted, reply[0][1:], strict=True):
            if flat:
                out.setdefault(key_id, {})[day] = {f: int(v) for f, v in pairs(flat).items()}
        return out

    # -- Store API -----------------------------------------------------------------------------
    async def get_conversation(self, tenant: str, scid: str) -> ConversationState | None:
        keys.check_tenant(tenant)
        if not keys.is_valid_scid(scid):
            return None
        return await self._guarded(self._get_conversation, tenant, scid)

    async def load(self, tenant: str, query: LoadQuery) -> LoadResult:
        keys.check_tenant(tenant)
        return await self._guarded(self._load, tenant, query)

    async def record(self, tenant: str, write: TurnWrite) -> RecordResult:
        keys.check_tenant(tenant)
        scid = keys.check_scid(write.scid) if write.scid is not None else keys.new_scid()
        if write.expected_position is not None and write.expected_position < 0:
            raise ValueError("expected_position must be >= 0")
        if write.fork and write.expected_position is None:
            raise ValueError("fork needs expected_position")
        if self.tenant_budget_bytes and self._clock() < (self._over_budget.get(tenant) or 0.0):
            raise TenantOverBudget(f"the tenant recorded more than {self.tenant_budget_bytes} bytes in this window")
        # (a CodecError before any I/O)
        blob = write.encoded if write.encoded is not None else records.encode_turn(write.record)
        if self.max_prompt_bytes and len(blob) > self.max_prompt_bytes and write.record.prompt:
            # A huge prompt (a 29 MB pasted text) is not kept: the turn is. A history rebuilt for a client that
            # replays none needs every prompt, so such a conversation is not rebuilt (``repair.rebuild_history``).
            write = dataclasses.replace(write, record=dataclasses.replace(write.record, prompt=[]))
            blob = records.encode_turn(write.record)
            result = await self._guarded(self._record, tenant, scid, write, blob)
            return dataclasses.replace(result, prompt_capped=True)
        return await self._guarded(self._record, tenant, scid, write, blob)

    def _counted(self, tenant: str, blob: bytes) -> list[Op]:
        """The tenant's storage counter, as one more op of the record's round trip (none without a budget)."""
        if not self.tenant_budget_bytes:
            return []
        return [Eval(TENANT_BYTES, (keys.tenant_bytes_key(tenant),), (len(blob), self.ttl_seconds))]

    def _check_budget(self, tenant: str, total: Any, *, read: bool = False) -> None:
        """Past its budget, the tenant's next records on this worker are refused for ``BUDGET_RECHECK_S`` (then one
        is recorded, and its counter reply says again). Every load reads the counter too (``read``: in its own round
        trip), so a worker knows what every replica recorded before it records this request's turn, and a counter
        under the budget again (a new window) lifts the refusal at once."""
        if not self.tenant_budget_bytes or not isinstance(total, int):
            return
        if total > self.tenant_budget_bytes:
            self._over_budget.put(tenant, self._clock() + BUDGET_RECHECK_S)
        elif read and self._over_budget.get(tenant):
            self._over_budget.put(tenant, 0.0)

    # -- implementation ------------------------------------------------------------------------
    def _load_op(self, tenant: str, scid: str) -> tuple[Eval, CachedConversation | None]:
        """The LOAD call for one conversation, and the cache entry its ARGV name (see ``state.convcache``)."""
        known = self.conversation_cache.get(tenant, scid)
        args = (self.ttl_seconds, *load_args(known))
        return Eval(LOAD, keys.conversation_keys(tenant, scid).all(), args), known

    def _parse_load(self, tenant: str, scid: str, known: CachedConversation | None,
                    reply: Any) -> tuple[ConversationState | None, int]:
        """LOAD reply -> (conversation or None, undecodable items); keeps the cache in step."""
        try:
            conv, bad, entry = _parse_conversation(scid, reply, known, self.decoded_turns)
        except Exception:
            self.conversation_cache.put(tenant, scid, None)
            raise
        self.conversation_cache.put(tenant, scid, entry)
        return conv, bad

    async def _get_conversation(self, tenant: str, scid: str) -> ConversationState | None:
        op, known = self._load_op(tenant, scid)
        (reply,) = await self._roundtrip([op])
        return self._parse_load(tenant, scid, known, reply)[0]

    async def _load(self, tenant: str, query: LoadQuery) -> LoadResult:
        first, hinted = _first_read(query)
        scid, hint = (None, first) if hinted else (first, None)
        tool_ids, exact = _dedupe(query.tool_ids), _dedupe(query.exact_hashes)
        fps = _dedupe(query.fingerprints)
        lookups = [keys.tool_key(tenant, t) for t in tool_ids]
        lookups += [keys.exact_key(tenant, h) for h in exact]
        lookups += [keys.fingerprint_key(tenant, f) for f in fps]
        buckets: dict[str, list[int]] = {}
        for i, key in enumerate(lookups):
            buckets.setdefault(self._bucket(key), []).append(i)
        ops: list[Op] = []
        known: CachedConversation | None = None
        if first:
            op, known = self._load_op(tenant, first)
            ops.append(op)
        ops += [Eval(GETEX_MANY, tuple(lookups[i] for i in idx), (self.ttl_seconds,)) for idx in buckets.values()]
        if scid:  # same round trip: does any tenant hold this SCID? (read only, never refreshed)
            ops.append(Exists(keys.scid_marker_key(scid)))
        if not ops:
            return LoadResult()
        if self.tenant_budget_bytes:  # same round trip: what the tenant stored so far (read only)
            ops.append(Eval(TENANT_TOTAL, (keys.tenant_bytes_key(tenant),), ()))
        replies = await self._roundtrip(ops)
        if self.tenant_budget_bytes:
            self._check_budget(tenant, replies.pop(), read=True)
        marked = bool(replies.pop()) if scid else False
        bad = 0
        convs: dict[str, ConversationState] = {}
        guessed: ConversationState | None = None
        if first:
            conv, n = self._parse_load(tenant, first, known, replies[0])
            bad += n
            if conv and scid:
                convs[scid] = conv
            guessed = conv if hint else None
        found: list[bytes | None] = [None] * len(lookups)
        for idx, reply in zip(buckets.values(), replies[1 if first else 0:], strict=True):
            for i, value in zip(idx, reply, strict=True):
                found[i] = value
        values = iter(found)
        raw_tool, n1, a1 = _decode_hits(tool_ids, values, records.decode_location)
        exact_hits, n2, a2 = _decode_hits(exact, values, records.decode_signature)
        fp_hits, n4, a4 = _decode_hits(fps, values, records.decode_scid)
        bad += n1 + n2 + n4
        fp_hits = {f: s for f, s in fp_hits.items() if keys.is_valid_scid(s)}
        if guessed is not None and hint is not None and (
                any(loc.scid == hint for loc in raw_tool.values())
                or hint in fp_hits.values()):
            convs[hint] = guessed  # the index names the hinted conversation: as if fetched for it

        tool_hits, pend_tool = _resolve(raw_tool, convs, scid)
        refs = Counter(loc.scid for loc in pend_tool.values())
        if not convs:
            refs.update(fp_hits.values())
        wanted = [s for s, _ in refs.most_common() if s not in convs and keys.is_valid_scid(s)]
        wanted = wanted[: self.max_fetch]
        round_trips = 1
        if wanted:
            round_trips = 2
            loads = [self._load_op(tenant, s) for s in wanted]
            more = await self._roundtrip([op for op, _ in loads])
            for s, (_, known_s), reply in zip(wanted, loads, more, strict=True):
                conv, n = self._parse_load(tenant, s, known_s, reply)
                bad += n
                if conv:
                    convs[s] = conv
            extra_tool, pend_tool = _resolve(pend_tool, convs, scid)
            tool_hits.update(extra_tool)
        conversation = convs.get(scid) if scid else None
        return LoadResult(
            conversation=conversation, conversations=convs, foreign=marked and conversation is None,
            tool_hits=tool_hits, exact_hits=exact_hits, fingerprint_hits=fp_hits,
            round_trips=round_trips,
            unresolved=len(raw_tool) - len(tool_hits), undecodable=bad, ambiguous=a1 + a2 + a4,
        )

    def _remember(self, tenant: str, scid: str, rec: TurnRecord, size: int, now_ms: int, reply: Any) -> None:
        """Keep the turn this worker just appended in its cache entry of the conversation (see
        ``state.convcache.appended``)."""
        if len(reply) < 6:
            return
        cache = self.conversation_cache
        entry = appended(cache.get(tenant, scid), scid, rec, size, position=int(reply[1]), start=int(reply[4]),
                         created=_text(reply[5]), version=int(reply[2]), updated=now_ms / 1000,
                         is_new=bool(int(reply[3])))
        if entry is not None:
            cache.put(tenant, scid, entry)

    def _index_ops(self, tenant: str, scid: str, write: TurnWrite, hint: int | None) -> list[Op]:
        """The record's index entries, one ``INDEX_PUT`` per bucket: an entry another turn (or, for a
        fingerprint, another conversation) wrote already becomes ambiguous instead of being taken over."""
        rec, ttl = write.record, self.ttl_seconds
        entries = rec.index_entries()
        loc = records.encode_location(Location(scid, rec.turn_id, hint))
        turn = bytes.fromhex(rec.turn_id)  # as ``encode_location`` packs it: a location naming this turn holds it
        puts: list[tuple[str, bytes, bytes]] = [(keys.tool_key(tenant, t), loc, turn) for t in entries.tool_ids]
        for h, sig in entries.exact:
            value = records.encode_signature(sig)
            puts.append((keys.exact_key(tenant, h), value, value))
        sc = records.encode_scid(scid)
        fps = _dedupe([rec.prefix_fingerprint or "", *write.fingerprints])
        puts += [(keys.fingerprint_key(tenant, f), sc, sc) for f in fps]
        buckets: dict[str, list[tuple[str, bytes, bytes]]] = {}
        for put in puts:
            buckets.setdefault(self._bucket(put[0]), []).append(put)
        ops: list[Op] = [Eval(INDEX_PUT, tuple(k for k, _, _ in group),
                              (ttl, records.AMBIGUOUS, *(a for _, value, ident in group for a in (value, ident))))
                         for group in buckets.values()]
        ops.append(SetEx(keys.scid_marker_key(scid), keys.SCID_MARKER_VALUE, ttl))  # refreshed per turn
        return ops

    async def _record(self, tenant: str, scid: str, write: TurnWrite, blob: bytes) -> RecordResult:
        rec, expected = write.record, write.expected_position
        pair = rec.verified_pair()
        pair_blob = records.encode_pair(pair) if pair else b""
        now_ms = int(self._wall() * 1000)
        args: tuple[Arg, ...] = (rec.turn_id, blob, "" if expected is None else expected, now_ms,
                                 self.ttl_seconds, self.max_turns, pair_blob, "1" if write.fork else "")
        ops: list[Op] = [Eval(RECORD, keys.conversation_keys(tenant, scid).all(), args)]
        # A write that asks for a fork is indexed where it lands (the fork, almost always): indexed here first,
        # its path fingerprint would name this conversation and then the fork, i.e. be ambiguous.
        index = [] if write.fork else self._index_ops(tenant, scid, write, expected)
        counted = self._counted(tenant, blob)
        replies = await self._roundtrip(ops + index + counted)
        reply = replies[0]
        if counted:
            self._check_budget(tenant, replies[-1])
        status = _text(reply[0])
        if status == "ok":
            self._remember(tenant, scid, rec, records.turn_cost(rec), now_ms, reply)
        elif status == "filled":  # a gap filled below the head: a new incarnation, whatever this worker held
            self.conversation_cache.put(tenant, scid, None)
            return RecordResult(scid=scid, position=int(reply[1]), turn_id=rec.turn_id, status="appended",
                                version=int(reply[2]), created=False, round_trips=1,
                                head=Head(scid, int(_text(reply[5])), int(reply[2]), int(reply[6])))
        if status != "conflict":
            rounds = 1
            if write.fork:  # (the conversation did not exist: created, not forked)
                await self._roundtrip(self._index_ops(tenant, scid, write, expected))
                rounds = 2
            return RecordResult(scid=scid, position=int(reply[1]), turn_id=rec.turn_id,
                                status="duplicate" if status == "dup" else "appended",
                                version=int(reply[2]), created=bool(int(reply[3])), round_trips=rounds,
                                head=_head_after(scid, reply) if status == "ok" else None)
        # Another turn holds ``expected`` (or ``write.fork``): fork = retained prefix [start, pos) + this turn.
        pos, start = int(reply[1]), int(reply[4])
        blobs, tids = list(reply[5]), list(reply[6])
        fork_start = start if pos >= start else pos
        gap = pos - fork_start - len(blobs)  # > 0 only for a forced fork beyond the end
        if gap >= self.max_turns:
            blobs, tids, fork_start = [], [], pos
        elif gap > 0:
            blobs += [b""] * gap
            tids += [b""] * gap
        new = keys.fork_scid(scid, pos, rec.turn_id)
        if not pair_blob:
            prefix_pair = _last_pair(blobs)
            pair_blob = records.encode_pair(prefix_pair) if prefix_pair else b""
        fork_args: tuple[Arg, ...] = (now_ms, self.ttl_seconds, self.max_turns, fork_start, pair_blob,
                                      scid, rec.turn_id, blob, len(blobs), *blobs, *tids)
        ops = [Eval(FORK, keys.conversation_keys(tenant, new).all(), fork_args)]
        replies = await self._roundtrip(ops + self._index_ops(tenant, new, write, pos))
        reply = replies[0]
        return RecordResult(scid=new, position=int(reply[1]), turn_id=rec.turn_id,
                            status="duplicate" if _text(reply[0]) == "dup" else "forked",
                            version=int(reply[2]), created=_text(reply[0]) != "dup", forked=True,
                            forked_from=scid, round_trips=2)


def _decode_hits(names: list[str], replies: Any, decode: Callable[[bytes], T]) -> tuple[dict[str, T], int, int]:
    """(hits, undecodable, ambiguous): an ambiguous entry (``codec.AMBIGUOUS``) is no hit."""
    hits: dict[str, T] = {}
    bad = ambiguous = 0
    for name in names:
        raw = next(replies)
        if raw is None:
            continue
        if raw == records.AMBIGUOUS:
            ambiguous += 1
            continue
        try:
            hits[name] = decode(raw)
        except CodecError:
            bad += 1
    return hits, bad, ambiguous


def _head_after(scid: str, reply: Any) -> Head | None:
    """The conversation's head after RECORD appended (its reply: position, version, ..., meta's created)."""
    if len(reply) < 6:
        return None
    return Head(scid, int(_text(reply[5])), int(reply[2]), int(reply[1]) + 1)


def _position(rec: TurnRecord) -> int:
    return -1 if rec.position is None else rec.position


def _parse_conversation(scid: str, reply: Any, known: CachedConversation | None, decoded: records.TurnCache,
                        ) -> tuple[ConversationState | None, int, CachedConversation | None]:
    """LOAD reply + the cache entry its ARGV named -> (conversation or None, number of undecodable items,
    the cache entry to keep or None).

    The conversation is the one the whole list gives: the cached turns still retained (position >= the
    new ``start``) followed by the returned ones. A reply that starts past list index 0 but does not
    continue ``known`` exactly raises ``CodecError`` (a malformed reply: the store call fails as any
    undecodable reply does, the gateway serves statelessly, and the entry is forgotten); it never yields
    partial turns.
    """
    if not reply:
        return None, 0, None
    flat, blobs = reply[0], reply[1]
    offset = reply[2] if len(reply) > 2 else 0  # an older script's two-element reply: the whole list
    meta = {_text(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}
    try:
        start, nxt, version = int(meta["start"]), int(meta["next"]), int(meta["version"])
        created_raw = _text(meta["created"])
        created, updated = int(created_raw) / 1000, int(meta["updated"]) / 1000
    except (KeyError, ValueError):
        return None, 1, None
    bad = 0
    pair = None
    if meta.get("pair"):
        try:
            pair = records.decode_pair(meta["pair"])
        except CodecError:
            bad += 1
    turns: list[TurnRecord] = []
    sizes: list[int] = []
    undecodable: list[int] = []
    if offset:
        if (type(offset) is not int or offset < 0 or known is None or known.next != start + offset
                or known.start > start or not continues(known.created, known.next, created_raw, start, nxt)):
            raise CodecError("LOAD replied from a list index that does not continue the cached turns")
        held = known.state
        if not blobs and known.start == start and known.next == nxt and held is not None and not bad and (
                held.version, held.updated_at, held.last_verified) == (version, updated, pair):
            # Redis says, in this round trip, that nothing was recorded since: the conversation is the very one this
            # worker holds (its lookups already built: a 500-turn loop does not rebuild them every request)
            return held, len(known.undecodable), known
        kept = bisect.bisect_left(known.turns, start, key=_position)
        turns += known.turns[kept:]
        sizes += known.sizes[kept:]
        undecodable += [p for p in known.undecodable if p >= start]
    first_new = start + offset
    for i, blob in enumerate(blobs):
        if not blob:
            continue  # a gap: a position the store never received
        try:
            turns.append(records.decode_turn(blob, first_new + i, decoded))
        except CodecError:
            undecodable.append(first_new + i)
            continue
        sizes.append(records.turn_cost(turns[-1]))
    bad += len(undecodable)
    parent = _text(meta["parent"]) if meta.get("parent") else None
    try:
        forked_at = int(meta["forked_at"]) if parent and meta.get("forked_at") is not None else None
    except ValueError:
        forked_at, bad = None, bad + 1
    conv = ConversationState(scid=scid, created_at=created, updated_at=updated, version=version,
                             turns=tuple(turns), last_verified=pair, first_position=start,
                             next_position=nxt, forked_from=parent, forked_at=forked_at)
    last = conv.turn_at(nxt - 1)
    entry = None
    if last is not None and start + offset + len(blobs) == nxt:  # the list ends at next - 1, as it must
        entry = CachedConversation(created=created_raw, start=start, next=nxt, last_turn_id=last.turn_id,
                                   turns=conv.turns, sizes=tuple(sizes), undecodable=tuple(undecodable),
                                   state=conv)
    return conv, bad, entry


def _resolve(raw: dict[str, Location], convs: dict[str, ConversationState],
             prefer: str | None) -> tuple[dict[str, Location], dict[str, Location]]:
    """Point each hit at a loaded record (the preferred conversation first). Returns (resolved,
    pending); pending = hits into conversations not loaded yet. Stale hits are dropped."""
    order = sorted(convs.values(), key=lambda c: c.scid != prefer)
    resolved: dict[str, Location] = {}
    pending: dict[str, Location] = {}
    for name, loc in raw.items():
        for conv in order:
            rec = conv.turn_by_id(loc.turn_id)
            if rec is not None:
                resolved[name] = Location(conv.scid, rec.turn_id, rec.position)
                break
        else:
            if loc.scid not in convs:
                pending[name] = loc
    return resolved, pending


def _last_pair(blobs: Sequence[bytes]) -> VerifiedPair | None:
    for blob in reversed(blobs):
        if not blob:
            continue
        try:
            pair = records.decode_turn(blob).verified_pair()
        except CodecError:
            continue
        if pair:
            return pair
    return None

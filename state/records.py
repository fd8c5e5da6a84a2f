"""The stored data model, one assistant turn (``TurnRecord``) and one conversation (``ConversationState``), and its
bytes (``encode_turn`` / ``decode_turn``, below); the hashes it is indexed by are ``state.keys``'.

The dataclasses are pure. Bytes on the wire: a one-byte format version followed by msgpack.

=========  =====================================================
version    payload
=========  =====================================================
``0x01``   msgpack
``0x02``   zlib-compressed msgpack (used when it saves >= 1/8 of a payload of >= 1 KiB;
           >= 4 KiB for the conversation's last verified pair; window sized to the payload)
``0x03``   ``AMBIGUOUS`` alone: an index entry that was written for two different things
           (``scripts.INDEX_PUT``); it decodes to nothing and is read as no evidence
=========  =====================================================

Strings are packed as UTF-8 with ``surrogatepass``, so every Python ``str`` (thinking text, signature,
unknown fields) round-trips exactly, byte for byte. Any failure raises ``CodecError``.
A stored turn is the array ``[turn_id, content, provider, model, upstream, dialect, created_at,
prefix_fingerprint, prompt, replay_digest, prefix]``; ``prompt``, ``replay_digest`` and ``prefix`` are optional when
decoding (older records lack them; ``prefix`` is written only when set) and decoders ignore further trailing
fields so newer writers stay readable.

Decoded turns can be cached (``decode_turn``'s ``cache``, a ``TurnCache`` the store owns), keyed by the stored
bytes and position: a conversation's older turns come back with every load, byte for byte the same, and decoding
them again (inflate, unpack, validate) was a third of a long conversation's load. Records are immutable by
contract, so every caller may share one decoded record; nobody mutates ``content`` or ``prompt``.

Index values are small and read by the hundred per load, so they are never compressed: a signature (the
exact-text index: its key is the SHA-256 of the text, so the text itself is not stored again; values of
the earlier ``[thinking, signature]`` form still decode), a location ``[scid, turn_id, position]`` whose
turn id is packed as its 32 bytes (64 hex characters in earlier values, still decoded), a SCID.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from state.coherence import Head, Lru, held
from state.errors import CodecError
from state.keys import IndexEntries, compute_turn_id, index_entries, is_valid_turn_id, last_thinking_pair, tool_use_ids

Block = dict[str, Any]


@dataclass(frozen=True, slots=True)
class VerifiedPair:
    """A thinking text and the signature it was relayed with. Always travels as a pair."""

    thinking: str
    signature: str


@dataclass(frozen=True, slots=True)
class Location:
    """Where an indexed block lives: conversation, turn id and absolute position.

    In ``LoadResult`` hits, ``position`` is the record's real position in the loaded conversation.
    """

    scid: str
    turn_id: str
    position: int | None


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One assistant turn exactly as relayed.

    ``content`` is the list of Anthropic-shaped block dicts (``thinking``, ``redacted_thinking``,
    ``tool_use``, ``text`` and anything else, with every field as given); thinking text and signatures
    round-trip byte-exact. ``provider`` holds provider-specific opaque fields. ``turn_id`` defaults to
    ``compute_turn_id(content, prefix_fingerprint)``; ``position`` is assigned by the store (``None``
    on a record that was not stored yet). ``prompt`` holds the request-side messages (Anthropic-shaped
    message dicts) that came after the previous assistant turn, so a conversation can be rebuilt for
    clients that replay no history (server-side thread state).
    """

    content: list[Block]
    model: str = ""
    upstream: str = ""
    dialect: str = ""
    provider: dict[str, Any] = field(default_factory=dict)
    prefix_fingerprint: str | None = None
    created_at: float = field(default_factory=time.time)
    turn_id: str = ""
    position: int | None = None
    prompt: list[dict[str, Any]] = field(default_factory=list)
    # ``hashing.replay_digest`` of the content as the client received it (b"" when the writer set none:
    # turns with provider data, whose client form differs from the stored one)
    replay_digest: bytes = b""
    # the prefix this turn was produced under, on models that bind thinking to it
    # (``gateway.pipeline.repair.prefix.Note``): small
    # (digests) except on a turn where the prefix sent changed or thinkgate inserted messages before the answer
    prefix: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.content, list) or not all(
                type(b) is dict or isinstance(b, Mapping) for b in self.content):
            raise TypeError("TurnRecord.content must be a list of block dicts")
        if not self.turn_id:
            object.__setattr__(self, "turn_id", compute_turn_id(self.content, self.prefix_fingerprint))
        elif not is_valid_turn_id(self.turn_id):
            raise ValueError("turn_id must be 64 lowercase hex chars (see hashing.compute_turn_id)")

    def verified_pair(self) -> VerifiedPair | None:
        """The last thinking block that has both text and a non-empty signature, as a pair."""
        pair = last_thinking_pair(self.content)
        return VerifiedPair(*pair) if pair else None

    def index_entries(self) -> IndexEntries:
        return index_entries(self.content)

    def tool_use_ids(self) -> tuple[str, ...]:
        return tool_use_ids(self.content)


@dataclass(frozen=True, slots=True)
class ConversationState:
    """One conversation: metadata plus its retained turns, ordered by absolute position.

    Positions are absolute: trimming to ``max_turns`` drops the oldest records and raises
    ``first_position``; positions never renumber. ``next_position`` is where an append lands.
    Positions the store never received (a gap) or could not decode are simply absent from ``turns``.
    ``version`` increases by one on every append. ``forked_from`` names the conversation this one was
    forked from (history edited by the client), if any, and ``forked_at`` the position where it left it.
    """

    scid: str
    created_at: float
    updated_at: float
    version: int
    turns: tuple[TurnRecord, ...]
    last_verified: VerifiedPair | None
    first_position: int
    next_position: int
    forked_from: str | None = None
    forked_at: int | None = None  # a fork's first own position: the turns before it are copies of its parent's
    # lookups built on first use (``_lookup``), or taken over from the state this one grew from (``grown_from``)
    _by_turn_id: dict[str, TurnRecord] | None = field(default=None, init=False, repr=False, compare=False)
    _by_position: dict[int, TurnRecord] | None = field(default=None, init=False, repr=False, compare=False)
    _by_digest: dict[bytes, TurnRecord] | None = field(default=None, init=False, repr=False, compare=False)
    _by_tool_id: dict[str, TurnRecord | None] | None = field(default=None, init=False, repr=False, compare=False)
    _by_tool_ids: dict[tuple[str, ...], TurnRecord] | None = field(default=None, init=False, repr=False,
                                                                  compare=False)
    _by_thinking: dict[str, TurnRecord | None] | None = field(default=None, init=False, repr=False, compare=False)

    def _lookup(self, name: str) -> dict[Any, TurnRecord]:
        found = getattr(self, name)
        if found is None:
            found = {}
            add = _LOOKUPS[name]
            for rec in self.turns:
                add(found, rec)
            object.__setattr__(self, name, found)
        return found  # type: ignore[no-any-return]

    @property
    def head(self) -> Head:
        """The head this state was read at (``state.coherence``)."""
        return Head(self.scid, round(self.created_at * 1000), self.version, self.next_position)

    def turn_at(self, position: int) -> TurnRecord | None:
        return (self._by_position or self._lookup("_by_position")).get(position)

    def turn_by_id(self, turn_id: str) -> TurnRecord | None:
        """The first retained record with this turn id."""
        return (self._by_turn_id or self._lookup("_by_turn_id")).get(turn_id)

    @property
    def by_position(self) -> Mapping[int, TurnRecord]:
        """The retained turns by position (callers must not change it)."""
        return self._by_position or self._lookup("_by_position")

    def turn_by_digest(self, digest: bytes) -> TurnRecord | None:
        """The latest retained turn recorded with this replay digest (``TurnRecord.replay_digest``)."""
        return (self._by_digest or self._lookup("_by_digest")).get(digest)

    def turns_by_digest(self, digests: Iterable[bytes]) -> list[TurnRecord | None]:
        """``turn_by_digest`` of each (a long replay's, every request: one C-level pass)."""
        return list(map((self._by_digest or self._lookup("_by_digest")).get, digests))

    def turn_by_tool_id(self, tool_id: str) -> TurnRecord | None:
        """The one retained turn with a tool_use of this id; None when none or several have it (an upstream that
        numbers its calls per answer): an id two turns share names neither."""
        return (self._by_tool_id or self._lookup("_by_tool_id")).get(tool_id)

    def turn_by_thinking(self, exact: str) -> TurnRecord | None:
        """The one retained turn with a signed thinking block of this exact text (``hashing.exact_hash``); None
        when none or several have it."""
        return (self._by_thinking or self._lookup("_by_thinking")).get(exact)

    def turns_by_tool_ids(self, ids: Iterable[Sequence[str]]) -> list[TurnRecord | None]:
        """For each turn's tool ids, ``turn_by_tool_id`` of its first when that turn has exactly these tool ids
        (a long mangled replay's, every request: its turns by tool ids, without reading each record's)."""
        by_ids = self._by_tool_ids or self._lookup("_by_tool_ids")
        by_tool = self._by_tool_id or self._lookup("_by_tool_id")
        keys = list(map(tuple, ids))
        return [r if r is not None and by_tool.get(k[0]) is r else None
                for r, k in zip(map(by_ids.get, keys), keys, strict=True)]

    def grown_from(self, prev: ConversationState) -> None:
        """Take over ``prev``'s lookups, those built already, when this state is ``prev`` with one turn appended
        (``turns == prev.turns + (turn,)``): a worker's own appends (``state.convcache.appended``) would
        otherwise rebuild them, over the whole conversation, on the next request."""
        if len(self.turns) != len(prev.turns) + 1:
            raise ValueError("grown_from: not one turn more")
        rec = self.turns[-1]
        for name, add in _LOOKUPS.items():
            known = getattr(prev, name)
            if known is not None:
                grown = dict(known)
                add(grown, rec)
                object.__setattr__(self, name, grown)


# How each of ``ConversationState``'s lookups takes a turn (its turns in position order): one rule each,
# for building a lookup and for growing it by an appended turn.
def _add_turn_id(found: dict[Any, TurnRecord], rec: TurnRecord) -> None:
    found.setdefault(rec.turn_id, rec)  # the first retained record with the id


def _add_position(found: dict[Any, TurnRecord], rec: TurnRecord) -> None:
    if rec.position is not None:
        found[rec.position] = rec


def _add_digest(found: dict[Any, TurnRecord], rec: TurnRecord) -> None:
    if rec.replay_digest and rec.position is not None:
        found[rec.replay_digest] = rec  # the latest turn wins


def _add_tool_ids(found: dict[Any, TurnRecord | None], rec: TurnRecord) -> None:
    if rec.position is not None:
        for tid in rec.tool_use_ids():
            found[tid] = None if found.get(tid, rec) is not rec else rec  # an id two turns have names neither


def _add_tool_id_set(found: dict[Any, TurnRecord], rec: TurnRecord) -> None:
    if rec.position is not None:
        ids = rec.tool_use_ids()
        if ids:
            found[ids] = rec  # the latest turn wins (``turns_by_tool_ids`` checks it is its first id's too)


def _add_thinking(found: dict[Any, TurnRecord | None], rec: TurnRecord) -> None:
    if rec.position is not None:
        for exact, _ in rec.index_entries().exact:
            found[exact] = None if found.get(exact, rec) is not rec else rec  # a text two turns have names neither


_LOOKUPS: dict[str, Callable[[dict[Any, Any], TurnRecord], None]] = {
    "_by_turn_id": _add_turn_id, "_by_position": _add_position, "_by_digest": _add_digest,
    "_by_tool_id": _add_tool_ids, "_by_tool_ids": _add_tool_id_set, "_by_thinking": _add_thinking}


VERSION_MSGPACK = 0x01
VERSION_ZLIB = 0x02
AMBIGUOUS = b"\x03ambiguous"  # the value of an index entry that named two things (see the table above)
COMPRESS_MIN_BYTES = 1024
PAIR_COMPRESS_MIN_BYTES = 4096
MAX_DECODED_BYTES = 64 * 1024 * 1024
_TURN_FIELDS = 8
DEFAULT_TURN_CACHE_ENTRIES = 2048  # decoded turns kept per process (also bounded by bytes: ``turn_cache``)
# a decoded record's own object, its turn id and the small fields, beside its content, prompt and provider
# dicts (``state.coherence.held``): an allowance, not yet checked against tracemalloc
TURN_OVERHEAD = 600
TURN_CACHE_BYTES = 16 << 20  # the most memory a worker's decoded turns hold (with the entries' bound)


def pack(obj: Any, *, compress_min: int | None = COMPRESS_MIN_BYTES) -> bytes:
    """Encode ``obj`` with a version byte; compress when large and worth it (``None`` = never)."""
    try:
        body: bytes = msgpack.packb(obj, use_bin_type=True, unicode_errors="surrogatepass")
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot encode: {exc}") from exc
    if compress_min is not None and len(body) >= compress_min:
        packed = _deflate(body)
        if len(packed) <= len(body) - len(body) // 8:
            return bytes((VERSION_ZLIB,)) + packed
    return bytes((VERSION_MSGPACK,)) + body


def _deflate(body: bytes) -> bytes:
    """zlib level 1 with a window no larger than the payload (a larger one finds no more matches): setting
    up zlib's default 32 KiB window cost three times the compressing of a 4 KiB turn. Any zlib reader
    (``unpack``'s included) reads every window size."""
    wbits = min(15, max(9, (len(body) - 1).bit_length()))
    deflater = zlib.compressobj(1, zlib.DEFLATED, wbits)
    return deflater.compress(body) + deflater.flush()


def unpack(data: bytes) -> Any:
    """Decode bytes produced by ``pack``; raise ``CodecError`` on anything else."""
    if not isinstance(data, bytes | bytearray) or len(data) < 2:
        raise CodecError("not an encoded value (too short or not bytes)")
    version = data[0]
    try:
        body: bytes | memoryview
        if version == VERSION_MSGPACK:
            body = memoryview(data)[1:]
        elif version == VERSION_ZLIB:
            inflater = zlib.decompressobj()
            body = inflater.decompress(memoryview(data)[1:], MAX_DECODED_BYTES)
            if inflater.unconsumed_tail or not inflater.eof:
                raise CodecError("compressed payload truncated or larger than the limit")
        else:
            raise CodecError(f"unknown codec version byte 0x{version:02x}")
        return msgpack.unpackb(body, raw=False, unicode_errors="surrogatepass", strict_map_key=False)
    except CodecError:
        raise
    except (ValueError, TypeError, zlib.error, msgpack.ExtraData, msgpack.FormatError,
            msgpack.StackError) as exc:
        raise CodecError(f"cannot decode: {exc}") from exc


def encode_turn(record: TurnRecord) -> bytes:
    return pack([
        record.turn_id, record.content, record.provider, record.model, record.upstream,
        record.dialect, record.created_at, record.prefix_fingerprint, record.prompt, record.replay_digest,
        *((record.prefix,) if record.prefix else ()),
    ])


TurnCache = Lru[tuple[bytes, int | None], TurnRecord]  # decoded turns by (stored bytes, position)


def turn_cost(record: TurnRecord) -> int:
    """The bytes a decoded turn holds in memory (measured: ``state.coherence``; not its stored size: a stored
    turn of many tiny blocks is small and compresses well, and its dicts take ten times that decoded)."""
    extra = (held(record.provider) if record.provider else 0) + (held(record.prefix) if record.prefix else 0)
    return TURN_OVERHEAD + held(record.content) + held(record.prompt) + extra


def turn_cache(entries: int, max_bytes: int) -> TurnCache:
    """A cache of decoded turns: at most ``entries``, holding at most ``max_bytes`` (the stored bytes of the
    key and the decoded turn, ``turn_cost``); a turn over 1/8 of that is decoded every time."""
    return Lru(entries, max_bytes, lambda key, rec: len(key[0]) + turn_cost(rec))


def decode_turn(data: bytes, position: int | None = None, cache: TurnCache | None = None) -> TurnRecord:
    """Decode a stored turn; ``position`` is supplied by the caller (it is not part of the bytes). Served from
    ``cache`` when the same bytes were decoded before at that position (see the module doc)."""
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if cache is None:
        return _decode_turn(data, position)
    key = (data, position)
    rec = cache.get(key)
    if rec is None:
        rec = _decode_turn(data, position)
        cache.put(key, rec)
    return rec


def _decode_turn(data: bytes, position: int | None) -> TurnRecord:
    obj = unpack(data)
    if not isinstance(obj, list) or len(obj) < _TURN_FIELDS:
        raise CodecError("stored turn is not a turn array")
    turn_id, content, provider, model, upstream, dialect, created_at, fingerprint = obj[:_TURN_FIELDS]
    if not (isinstance(turn_id, str) and isinstance(content, list) and isinstance(provider, dict)
            and isinstance(model, str) and isinstance(upstream, str) and isinstance(dialect, str)
            and isinstance(created_at, int | float) and (fingerprint is None or isinstance(fingerprint, str))):
        raise CodecError("stored turn has fields of the wrong type")
    prompt = obj[_TURN_FIELDS] if len(obj) > _TURN_FIELDS else []
    if not isinstance(prompt, list):
        raise CodecError("stored turn prompt is not a list")
    digest = obj[_TURN_FIELDS + 1] if len(obj) > _TURN_FIELDS + 1 else b""
    if not isinstance(digest, bytes):
        raise CodecError("stored turn replay digest is not bytes")
    prefix = obj[_TURN_FIELDS + 2] if len(obj) > _TURN_FIELDS + 2 else {}
    if not isinstance(prefix, dict):
        raise CodecError("stored turn prefix is not a map")
    try:
        return TurnRecord(content=content, model=model, upstream=upstream, dialect=dialect,
                          provider=provider, prefix_fingerprint=fingerprint,
                          created_at=float(created_at), turn_id=turn_id, position=position, prompt=prompt,
                          replay_digest=digest, prefix=prefix)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"stored turn is invalid: {exc}") from exc


def encode_pair(pair: VerifiedPair) -> bytes:
    # a conversation's last verified pair (meta): read with every load, so only long texts are compressed
    return pack([pair.thinking, pair.signature], compress_min=PAIR_COMPRESS_MIN_BYTES)


def decode_pair(data: bytes) -> VerifiedPair:
    obj = unpack(data)
    if not (isinstance(obj, list) and len(obj) >= 2 and isinstance(obj[0], str) and isinstance(obj[1], str)):
        raise CodecError("stored pair is not [thinking, signature]")
    return VerifiedPair(obj[0], obj[1])


def encode_signature(signature: str) -> bytes:
    """The exact-text index's value: the signature issued for the text whose hash is the key."""
    return pack(signature, compress_min=None)


def decode_signature(data: bytes) -> str:
    obj = unpack(data)
    if isinstance(obj, str) and obj:
        return obj
    if isinstance(obj, list) and len(obj) >= 2 and isinstance(obj[0], str) and isinstance(obj[1], str) and obj[1]:
        return obj[1]  # the earlier [thinking, signature] form
    raise CodecError("stored signature is not a non-empty string")


_TURN_ID_BYTES = 32


def encode_location(location: Location) -> bytes:
    tid = location.turn_id
    packed_id: str | bytes = bytes.fromhex(tid) if is_valid_turn_id(tid) else tid
    return pack([location.scid, packed_id, location.position], compress_min=None)


def decode_location(data: bytes) -> Location:
    obj = unpack(data)
    if not (isinstance(obj, list) and len(obj) >= 3 and isinstance(obj[0], str)
            and (obj[2] is None or isinstance(obj[2], int))):
        raise CodecError("stored location is not [scid, turn_id, position]")
    tid = obj[1]
    if isinstance(tid, bytes) and len(tid) == _TURN_ID_BYTES:
        tid = tid.hex()
    elif not isinstance(tid, str):
        raise CodecError("stored location's turn id is neither 32 bytes nor a string")
    return Location(obj[0], tid, obj[2])


def encode_scid(scid: str) -> bytes:
    return pack(scid, compress_min=None)


def decode_scid(data: bytes) -> str:
    obj = unpack(data)
    if not isinstance(obj, str):
        raise CodecError("stored scid is not a string")
    return obj

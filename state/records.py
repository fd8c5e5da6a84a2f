"""The stored data model: one assistant turn (``TurnRecord``) and one conversation (``ConversationState``).

Pure dataclasses; encoding lives in ``state.codec``, hashing in ``state.keys``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from state.coherence import Head
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

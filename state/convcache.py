"""Each worker's cache of the conversations it has loaded, so a load transfers only the turns it has not seen.

A turn blob at a position never changes during a conversation's lifetime: RECORD only appends (padding a
gap with ``''`` at positions >= ``next``), trims from the front (``start`` rises) or, for a jump of
``max_turns`` or more, empties the lists and restarts at a later ``start``; a fork is a new SCID, and a
conversation that expired and is recreated gets a new ``created`` in its meta hash. So once a worker has
read the turns ``[start, next)`` of one incarnation (``created``), they are final.

``ConversationCache`` keeps, per ``(tenant, scid)``, what was read: meta's ``created`` (as stored), the
``start`` and ``next`` it was read at, the turn id at ``next - 1`` and the decoded turns. The next LOAD
passes ``(created, next, turn id)`` (``load_args``), and the script (``state.scripts.LOAD``) returns only
the list from that ``next`` on, with the list index it starts at, when meta's ``created`` is the same,
``start < known next <= next`` and the turn ids list still holds the same turn id at ``known next - 1``
(which tells apart a recreation within the same millisecond, e.g. under an injected clock); otherwise
the whole list, from index 0. The engine (``state.engine``) merges the cached turns still retained
(position >= the new ``start``) with the returned ones: exactly the ``ConversationState`` (and the
undecodable count) the whole list gives.

A worker also keeps the turns it records itself (``appended``): when RECORD appended a turn right after
the turns this worker knew of the same incarnation, the entry grows by that turn (RECORD replies with the
new ``start`` and meta's ``created``), so its next load transfers nothing it wrote itself. ``state`` is the
conversation as this worker last knew it. It never serves a request by itself: every load goes to Redis, whose
LOAD script extends the entry with what was recorded since, by any replica, in the request's own round trip (the
coherence rule, ``state.coherence``; a worker that answered from its entry alone would serve a conversation whose
newest turn another replica had recorded as if it were current).

Bounded by the memory the cached turns hold (``codec.turn_cost``, measured: ``state.coherence``), least recently
used first out; a conversation over half the bound is not kept (it loads the full way). The default bound is
64 MiB here; the gateway passes ``GATEWAY_LOAD_CACHE_MB``. The records are shared with ``state.records``'s
decoded-turn cache, so the two together hold no more than the larger of their bounds plus the stored bytes.
Keys hold the tenant prefix, so one tenant's entry never
answers another's.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field

from state.records import ConversationState, TurnRecord

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
REFUSE_FRACTION = 2  # a conversation holding more than half the bound is not kept
NOTHING_KNOWN: tuple[str, str, str] = ("", "", "")


@dataclass(frozen=True, slots=True)
class CachedConversation:
    """What one load read of a conversation: its turns ``[start, next)``, final for this ``created``."""

    created: str  # meta's ``created`` exactly as stored (ms)
    start: int
    next: int
    last_turn_id: str  # the turn id at position ``next - 1`` (never a gap: RECORD/FORK end on a turn)
    turns: tuple[TurnRecord, ...]  # the decodable turns, by position
    sizes: tuple[int, ...]  # the memory each of ``turns`` holds (``codec.turn_cost``)
    undecodable: tuple[int, ...]  # positions whose blob could not be decoded
    state: ConversationState | None = field(default=None, compare=False)  # the conversation as known

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)


def appended(known: CachedConversation | None, scid: str, rec: TurnRecord, size: int, *, position: int,
             start: int, created: str, version: int, updated: float,
             is_new: bool) -> CachedConversation | None:
    """The entry after RECORD appended ``rec`` (holding ``size`` bytes) at ``position`` and replied with the
    conversation's ``start`` and ``created``; ``is_new``: RECORD created the conversation. None when this
    worker did not know the conversation exactly up to ``position`` (another writer appended first, a gap,
    another incarnation): the next load reads what it lacks."""
    rec = dataclasses.replace(rec, position=position)
    if is_new:
        turns: tuple[TurnRecord, ...] = ()
        sizes: tuple[int, ...] = ()
        bad: tuple[int, ...] = ()
        parent, pair, forked_at = None, None, None
    elif (known is None or known.state is None or known.created != created or known.next != position
          or start > position):
        return None
    else:
        kept = bisect.bisect_left(known.turns, start, key=lambda r: -1 if r.position is None else r.position)
        turns, sizes = known.turns[kept:], known.sizes[kept:]
        bad = tuple(p for p in known.undecodable if p >= start)
        parent, pair, forked_at = known.state.forked_from, known.state.last_verified, known.state.forked_at
    turns += (rec,)
    last = rec.verified_pair()
    state = ConversationState(scid=scid, created_at=int(created) / 1000, updated_at=updated, version=version,
                              turns=turns, last_verified=last if last is not None else pair,
                              first_position=start, next_position=position + 1, forked_from=parent,
                              forked_at=forked_at)
    entry = CachedConversation(created=created, start=start, next=position + 1, last_turn_id=rec.turn_id,
                               turns=turns, sizes=(*sizes, size), undecodable=bad, state=state)
    if known is not None and not is_new and len(turns) == len(known.turns) + 1:  # nothing trimmed: carry over
        if known.state is not None and known.state.turns is known.turns:
            state.grown_from(known.state)
    return entry


class ConversationCache:
    """LRU of ``CachedConversation`` by ``(tenant, scid)``, bounded by ``max_bytes`` (0 = off)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._items: OrderedDict[tuple[str, str], tuple[CachedConversation, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, tenant: str, scid: str) -> CachedConversation | None:
        item = self._items.get((tenant, scid))
        if item is None:
            return None
        self._items.move_to_end((tenant, scid))
        return item[0]

    def put(self, tenant: str, scid: str, entry: CachedConversation | None) -> None:
        """Remember ``entry`` (``None`` forgets the conversation); evict the least recently used past the bound."""
        old = self._items.pop((tenant, scid), None)
        if old is not None:
            self.nbytes -= old[1]
        if entry is None:
            return
        size = entry.nbytes
        if size > self.max_bytes // REFUSE_FRACTION:
            return
        self._items[(tenant, scid)] = (entry, size)
        self.nbytes += size
        while self.nbytes > self.max_bytes:
            _, (_, evicted) = self._items.popitem(last=False)
            self.nbytes -= evicted


def load_args(known: CachedConversation | None) -> tuple[str, str, str]:
    """LOAD's ARGV after the TTL: the known ``created``, ``next`` and turn id at ``next - 1``."""
    if known is None:
        return NOTHING_KNOWN
    return known.created, str(known.next), known.last_turn_id

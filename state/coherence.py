"""The one coherence rule for every per-worker cache (what a replica may trust, and when it reloads), and the bounded
map every such cache is built on (``Lru``, ``ObjectLru``, sized by ``held``).

Any replica may serve any request of a conversation, so the conversation's current state is what Redis holds,
never what one worker remembers of it. A worker may keep what it read or computed of a conversation, but an
entry serves a request only when it is provably the conversation's **current head in Redis**, read in that
request's own round trip (the load): the same incarnation (meta's ``created``) at the same ``version``
(every RECORD and FORK bumps it). A worker never decides by itself that what it holds is current: an entry
whose head differs from the one the request read is dropped, and what it stood for is read or computed
again.

Two ways an entry goes through the rule:

- **Held at a head** (``Head``, ``serves``): the entry was built at one head of one conversation and serves
  only a request whose load read exactly that head. The continuation priors a request hands the next one
  (``gateway.continuation.replay_memo.Carried``: repair's and sanitize's findings, the splice prior, the restorations)
  are
  stamped with the head the conversation had once this worker recorded the request's answer; another replica's
  record in between moves the head, and the next request starts afresh.
- **Extended in the round trip** (``load_args``, ``continues``): the conversation cache
  (``state.convcache``) hands its head to the LOAD script, which compares it with the stored meta inside Redis
  in the same round trip and returns what was recorded since (or everything, for another incarnation). The
  worker's turns are never used without that reply.

Everything else a worker keeps is not conversation state, and is registered as such in ``CACHES`` with the
reason: content-addressed (a function of immutable bytes or objects), a hint the store verifies in the round
trip, or not about conversations at all. ``tests/support/state/coherence_tests.py`` fails when a module builds a cache
(an ``OrderedDict``, ``Lru``, ``ObjectLru``, ``lru_cache``...) that is not registered here.

The map (``Lru``): a bounded map that forgets its least recently used entries first (0 entries keeps nothing),
and what a cached value really holds in memory.

The per-worker caches of decoded data (``state.records``'s decoded turns, ``gateway.pipeline.repair.records``' restored
blocks, ``gateway.continuation.splice``'s recorded JSON) are this map, bounded by a number of entries
(``GATEWAY_DECODED_TURN_CACHE``) and by the bytes of memory its entries hold: ``cost(key, value)``, a
measured size (``held``), summed up to ``max_cost``. An entry costing more than ``max_cost //
REFUSE_FRACTION`` is not kept at all, so one huge value never flushes a cache of many small ones.

``held(obj)`` sizes the bytes of a value's objects, not of the JSON it came from: it sums ``sys.getsizeof`` over a
tree of dicts, lists, tuples, strings, bytes and numbers (what JSON and msgpack decode to): for these CPython types
that is each object's own allocation (a dict's hash table, a list's pointer array, a string's characters), so the
sum is what the tree keeps alive, less objects it shares with others (interned keys, small ints), which makes it an
upper bound (pymalloc's rounding, up to 15 bytes an object, is not counted). It walks every node (about 0.15 us
each), so callers size an entry once, when they keep it. A 100,001-message body of
``{"role":"user","content":"a"}`` is 3.3 MB of JSON and about 40 MB of parsed dicts (a dict alone is 184 bytes):
sizing by request bytes undercounts such a body twelvefold.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from sys import getsizeof
from typing import Any, Generic, TypeVar


@dataclass(frozen=True, slots=True)
class Head:
    """A conversation's head as one read of Redis saw it."""

    scid: str
    created: int   # meta's ``created`` (ms): the incarnation (a conversation that expired and came back differs)
    version: int   # bumped by every RECORD and FORK of the conversation
    next: int      # the position the next append lands at

    def __post_init__(self) -> None:
        if self.version < 0 or self.next < 0:
            raise ValueError("a head's version and next are >= 0")


def serves(held: Head | None, now: Head | None) -> bool:
    """THE rule: what a worker holds as of ``held`` may serve a request whose load read ``now`` only when they are
    the same head of the same conversation. Unknown on either side never serves."""
    return held is not None and now is not None and held == now


def continues(held_created: str, held_next: int, now_created: str, now_start: int, now_next: int) -> bool:
    """The conversation cache's extension rule (applied by the LOAD script inside Redis and checked again on its
    reply): turns ``[.., held_next)`` read of one incarnation are still the conversation's when the stored meta
    is the same incarnation and ``start < held_next <= next`` (RECORD only appends and trims from the front)."""
    return held_created == now_created and now_start < held_next <= now_next


class Kind(Enum):
    HEAD = "serves only at the conversation head it was built at (serves)"
    EXTENDED = "extended by the load's own round trip, never used without its reply (continues)"
    CONTENT = "content-addressed: keyed by immutable bytes or objects, so it cannot be stale"
    VERIFIED_HINT = "a guess the store verifies against the index in the same round trip"
    NOT_CONVERSATION = "holds no conversation state"
    AUTHORITY = "the store itself, not a copy of it (the embedded default: one process, no replicas)"


# module -> (what it caches, how it keeps the rule). Every module that builds a per-worker cache is listed.
CACHES: dict[str, tuple[str, Kind]] = {
    "state/convcache.py": ("the conversations a worker loaded or recorded (delta loads)", Kind.EXTENDED),
    "gateway/continuation/replay_memo.py": (
        "the previous request's body, parsed values, messages and the stages' priors (Carried, stamped with the head "
        "after its record)", Kind.HEAD),
    "state/records.py": ("decoded turns by their stored bytes", Kind.CONTENT),
    "state/coherence.py": ("the bounded LRU the other caches are built on (``Lru``)", Kind.CONTENT),
    "gateway/pipeline/repair/records.py": ("a record's blocks and stored form, by the record object", Kind.CONTENT),
    "gateway/app/deps.py": ("a record's JSON, by the record object", Kind.CONTENT),
    "gateway/pipeline/identify.py": ("the conversation a tool id was last seen in", Kind.VERIFIED_HINT),
    "gateway/continuation/outage.py": (
        "the exact thinking a worker relayed, by its text's hash, with its signature (a faithful replay verified while "
        "the store is away)", Kind.CONTENT),
    "gateway/surfaces/model_lists.py": ("upstream model lists per tenant, with a TTL", Kind.NOT_CONVERSATION),
    "state/engine.py": ("tenants over their storage budget (a refusal window)", Kind.NOT_CONVERSATION),
    "state/memory_store.py": ("the embedded store's keyspace", Kind.AUTHORITY),
    "gateway/access/admission.py": ("the gateway keys a worker admitted, for admitting them with the store away "
                                    "(GATEWAY_LIMITS_FAIL_OPEN)", Kind.NOT_CONVERSATION),
}


K = TypeVar("K")
V = TypeVar("V")
O = TypeVar("O")  # noqa: E741

REFUSE_FRACTION = 8  # an entry over 1/8 of a cache's byte budget is not cached


class Lru(Generic[K, V]):
    def __init__(self, entries: int, max_cost: int | None = None,
                 cost: Callable[[K, V], int] | None = None) -> None:
        """``max_cost`` (with ``cost``): the most bytes the entries may hold together; None: entries only."""
        self.entries = max(0, entries)
        self.max_cost = max(0, max_cost) if max_cost is not None and cost is not None else None
        self._cost = cost
        self.total_cost = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        # each operation is atomic: a big request's stages run in a thread beside the loop (``pipeline.off_loop``);
        # uncontended, it costs ~0.1 us an operation
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V) -> None:
        if self.entries <= 0:
            return
        cost = 0
        if self.max_cost is not None and self._cost is not None:
            cost = self._cost(key, value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.total_cost -= old[1]
            if self.max_cost is not None and cost > self.max_cost // REFUSE_FRACTION:
                return
            self._items[key] = (value, cost)
            self.total_cost += cost
            self._trim()

    def pop(self, key: K) -> V | None:
        """Forget ``key``; its value, if it was held."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is None:
                return None
            self.total_cost -= old[1]
            return old[0]

    def resize(self, entries: int, max_cost: int | None = None) -> None:
        with self._lock:
            self.entries = max(0, entries)
            if max_cost is not None and self.max_cost is not None:
                self.max_cost = max(0, max_cost)
            self._trim()

    def values(self) -> list[V]:
        with self._lock:
            return [v for v, _ in self._items.values()]

    def _trim(self) -> None:
        limit = self.max_cost
        while len(self._items) > self.entries or (limit is not None and self.total_cost > limit):
            _, (_, cost) = self._items.popitem(last=False)
            self.total_cost -= cost


class ObjectLru(Generic[O, V]):
    """An ``Lru`` keyed by an object's identity (objects that may not be hashable, e.g. lists): what this
    worker derived from that very object. An entry holds its object, so no other object takes its ``id``
    while the entry lives. ``cost(obj, value)`` as ``Lru``'s."""

    def __init__(self, entries: int, max_cost: int | None = None,
                 cost: Callable[[O, V], int] | None = None) -> None:
        self._lru: Lru[int, tuple[O, V]] = Lru(entries, max_cost,
                                               None if cost is None else lambda _k, item: cost(*item))

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def total_cost(self) -> int:
        return self._lru.total_cost

    def get(self, obj: O) -> V | None:
        hit = self._lru.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: O, value: V) -> None:
        self._lru.put(id(obj), (obj, value))

    def resize(self, entries: int, max_cost: int | None = None) -> None:
        self._lru.resize(entries, max_cost)

    def items(self) -> list[tuple[O, V]]:
        """(object, value), least recently used first."""
        return self._lru.values()


# --- what a value holds ---

_CONTAINERS = (dict, list, tuple)


def held(obj: Any, over: int | None = None) -> int:
    """The bytes ``obj`` and everything it contains hold (see the module doc). ``over``: stop as soon as the sum
    passes it (a caller that only asks whether a value fits: a 100,000-message body it refuses is not walked
    whole); the sum returned is then more than ``over`` and less than the whole."""
    total = 0
    stack = [obj]
    pop, push = stack.pop, stack.extend
    while stack:
        o = pop()
        total += getsizeof(o)
        if over is not None and total > over:
            return total
        t = type(o)
        if t is dict:
            push(o.keys())
            push(o.values())
        elif t is list or t is tuple:
            push(o)
    return total

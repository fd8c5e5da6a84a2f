"""A bounded map that forgets its least recently used entries first (0 entries keeps nothing), and what a cached
value really holds in memory.

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
from sys import getsizeof
from typing import Any, Generic, TypeVar

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

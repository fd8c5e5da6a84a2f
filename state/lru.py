"""A bounded map that forgets its least recently used entries first; 0 entries keeps nothing.

The per-worker caches of decoded data (``state.codec``'s decoded turns, ``gateway.records``' restored
blocks) are this map under a size setting (``GATEWAY_DECODED_TURN_CACHE``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
O = TypeVar("O")  # noqa: E741


class Lru(Generic[K, V]):
    def __init__(self, entries: int) -> None:
        self.entries = max(0, entries)
        self._items: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        if self.entries <= 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        self._trim()

    def resize(self, entries: int) -> None:
        self.entries = max(0, entries)
        self._trim()

    def values(self) -> list[V]:
        return list(self._items.values())

    def _trim(self) -> None:
        while len(self._items) > self.entries:
            self._items.popitem(last=False)


class ObjectLru(Generic[O, V]):
    """An ``Lru`` keyed by an object's identity (objects that may not be hashable, e.g. lists): what this
    worker derived from that very object. An entry holds its object, so no other object takes its ``id``
    while the entry lives."""

    def __init__(self, entries: int) -> None:
        self._lru: Lru[int, tuple[O, V]] = Lru(entries)

    def __len__(self) -> int:
        return len(self._lru)

    def get(self, obj: O) -> V | None:
        hit = self._lru.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: O, value: V) -> None:
        self._lru.put(id(obj), (obj, value))

    def resize(self, entries: int) -> None:
        self._lru.resize(entries)

    def items(self) -> list[tuple[O, V]]:
        """(object, value), least recently used first."""
        return self._lru.values()

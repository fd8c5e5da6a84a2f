"""A bounded map that forgets its least recently used entries first; 0 entries keeps nothing.

The per-worker caches of decoded data (``state.codec``'s decoded turns, ``gateway.records``' restored
blocks) are this map under a size setting (``GATEWAY_DECODED_TURN_CACHE``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


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

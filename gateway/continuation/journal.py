"""``Journal``: the thinking this worker relayed, exactly, so that a client's faithful replay of it is verified while
the store is away (issue 32 item 4).

Without the store a replayed thinking block cannot be checked against its record, so sanitize degrades it; but a
block this very worker handed the client is authentic when its bytes are the same. The journal keeps, per tenant,
the SHA-256 of each relayed thinking text with the signature it came with (and of each redacted block's data), in a
bounded LRU (``ENTRIES``). It is content-addressed: an entry names exact bytes and the signature the upstream minted
for them, so it cannot be stale (``state.coherence``); it only vouches, while the store is away or has just come
back (``pipeline.OUTAGE_GRACE_S``), for blocks no record covers. A turn another replica relayed is not in it: that
one's thinking is degraded until its deferred record lands (``record_retry``).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.dialects.canonical import Block, RedactedThinkingBlock, ThinkingBlock
from state.hashing import exact_hash
from state.lru import Lru

ENTRIES = 100_000  # ~150 bytes each: about 15 MB at most per worker


class Journal:
    def __init__(self, entries: int = ENTRIES) -> None:
        self._seen: Lru[tuple[str, str], str] = Lru(entries)

    def __len__(self) -> int:
        return len(self._seen)

    def note(self, tenant: str, blocks: Iterable[Block]) -> None:
        """The blocks of a turn this worker relayed to ``tenant``."""
        for b in blocks:
            key = _key(b)
            if key is not None:
                self._seen.put((tenant, key[0]), key[1])

    def vouches(self, tenant: str, block: Block) -> bool:
        """``block`` is exactly a thinking block this worker relayed to ``tenant``, signature included."""
        key = _key(block)
        return key is not None and self._seen.get((tenant, key[0])) == key[1]


def _key(b: Block) -> tuple[str, str] | None:
    if isinstance(b, ThinkingBlock) and b.thinking is not None and b.signature:
        return "t" + exact_hash(b.thinking), b.signature
    if isinstance(b, RedactedThinkingBlock) and b.data:
        return "r" + exact_hash(b.data), ""
    return None

"""A per-process memory of which conversation a tool_use id belongs to: only a hint.

A client that sends no ``X-AG-Conversation-Id`` is recognised by the index entries of its replayed
turns; the conversation those entries name then takes a second store round trip to load. This
worker remembers, per tenant, the conversation of the tool ids it saw in the first and in the most
recent assistant turns of requests it served and of turns it recorded, and passes its guess to the
store as ``LoadQuery.hint_scid``: the store loads it in the first round trip and keeps it only if the
index agrees. Redis stays the authority: a wrong or stale guess costs the bytes read, never a wrong
answer, and any replica without the memory just takes the second round trip. Bounded (LRU).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from gateway.dialects.canonical import Message, assistant_indexes

MAX_ENTRIES = 16_384  # about 3 MB at most
EDGE_TURNS = 3  # assistant turns at each end of a replayed history whose tool ids are remembered


class ConversationHints:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._scids: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._scids)

    def learn(self, tenant: str, tool_ids: Iterable[str], scid: str) -> None:
        for tid in tool_ids:
            key = (tenant, tid)
            self._scids[key] = scid
            self._scids.move_to_end(key)
        while len(self._scids) > self.max_entries:
            self._scids.popitem(last=False)

    def guess(self, tenant: str, tool_ids: Iterable[str]) -> str | None:
        """The conversation most of these tool ids were last seen in (None when none is known)."""
        votes: dict[str, int] = {}
        for tid in tool_ids:
            scid = self._scids.get((tenant, tid))
            if scid is not None:
                votes[scid] = votes.get(scid, 0) + 1
        return max(votes, key=votes.__getitem__) if votes else None


def edge_tool_ids(msgs: list[Message]) -> list[str]:
    """Tool ids of the first and the last ``EDGE_TURNS`` replayed assistant turns: the first ones stay
    the same for a whole conversation (until the client trims its history), the last ones are new."""
    first = assistant_indexes(msgs, EDGE_TURNS)
    last = assistant_indexes(msgs, EDGE_TURNS, from_end=True)
    if not first or last[0] <= first[-1]:  # the two ends overlap: a short history, all of its assistant turns
        picked = sorted(set(first) | set(last))
    else:
        picked = first + last
    return [tid for i in picked for tid in msgs[i].tool_use_ids()]

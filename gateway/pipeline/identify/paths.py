"""The path of a conversation: the user side of its history, which clients replay faithfully far more often
than the assistant side. A recorded turn keeps the fingerprint of the path it answered
(``TurnRecord.prefix_fingerprint``); a replayed message's place in its conversation is where that path leads
(``repair``), and a conversation is found by the path before its latest answer (``identity``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from gateway.dialects.canonical import Message, TextBlock, ToolResultBlock
from state.hashing import normalized_bytes


class PathHash:
    """``path_fingerprint`` as a running hash: the state after some messages, continued over more."""

    __slots__ = ("_h", "seen")

    def __init__(self) -> None:
        self._h = hashlib.sha256(b"tg-path/2")
        self.seen = False

    def update(self, msgs: Iterable[Message]) -> PathHash:
        h = self._h
        for m in msgs:
            if m.role != "user":
                continue
            results = 0
            h.update(b"\x1eU")
            for b in m.content:
                if isinstance(b, TextBlock):
                    norm = normalized_bytes(b.text)
                    if norm:
                        self.seen = True
                        h.update(b"\x1f")
                        h.update(norm)
                elif isinstance(b, ToolResultBlock):
                    results += 1
            if results:
                self.seen = True
                h.update(b"\x1dR%d" % results)
        return self

    def copy(self) -> PathHash:
        out = PathHash.__new__(PathHash)
        out._h, out.seen = self._h.copy(), self.seen
        return out

    def hexdigest(self) -> str | None:
        return self._h.hexdigest() if self.seen else None


Known = tuple[int, PathHash]  # the running hash after a list's first n messages, known beforehand


def path_fingerprint(msgs: list[Message], known: Known | None = None) -> str | None:
    """Fingerprint of the user side of ``msgs``: each user message's text (normalized) and how many
    tool results it carried. Tool result bodies are left out: they are large and add nothing to
    telling conversations apart. ``known``: the hash after ``msgs[:n]`` (a replay's kept prefix), so
    only the messages after it are hashed."""
    if known is not None and known[0] <= len(msgs):
        return known[1].copy().update(msgs[known[0]:]).hexdigest()
    return PathHash().update(msgs).hexdigest()



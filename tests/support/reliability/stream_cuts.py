"""Where a relayed answer is cut into pieces, and what each cut splits (pure: no socket).

The recording proxy (``recording_proxy.py``) sends an upstream answer on in small pieces at seeded pseudo-random
byte boundaries, so the gateway reads every upstream stream split where a real network may split it. ``Cutter`` cuts
(deterministic per random generator), ``HardCutter`` at every hard place at once; ``cut_class`` names what a cut at
one offset splits, the classes a stream decoder must join correctly (``CUT_CLASSES``, most specific first):

- ``crlf``: between the ``\\r`` and the ``\\n`` of a CRLF line end (Gemini's SSE ends its lines with CRLF);
- ``utf8``: inside one multi-byte UTF-8 character;
- ``json_string``: inside a JSON string of a ``data:`` line;
- ``between_events``: just after an event's terminating blank line;
- ``event``: elsewhere inside an event (a field name, the JSON outside strings, between lines).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterable
from typing import Protocol

CUT_CLASSES = ("crlf", "utf8", "json_string", "between_events", "event")


class Cuts(Protocol):
    def cut(self, chunk: bytes) -> list[bytes]:
        """The pieces to write for one upstream read, in order (joined: the read)."""
        ...


class Cutter:
    """Cuts one answer, chunk by chunk as it arrives, into pieces at offsets drawn from ``rng``: about one piece in
    four of one to three bytes, the others of up to ``max_piece``, so both tight cuts and longer runs occur. The
    drawn offsets count from the answer's first byte, whatever the chunks: the same generator cuts the same answer
    at the same offsets (and at the chunk boundaries too, as a piece never waits for the next chunk)."""

    __slots__ = ("_max", "_next", "_rng")

    def __init__(self, rng: random.Random, max_piece: int) -> None:
        self._rng, self._max = rng, max_piece
        self._next = self._draw()

    def _draw(self) -> int:
        return self._rng.randint(1, 3) if self._rng.random() < 0.25 else self._rng.randint(1, self._max)

    def cut(self, chunk: bytes) -> list[bytes]:
        pieces: list[bytes] = []
        at = 0
        while at < len(chunk):
            take = min(self._next, len(chunk) - at)
            pieces.append(chunk[at:at + take])
            at += take
            self._next -= take
            if self._next == 0:
                self._next = self._draw()
        return pieces


class HardCutter:
    """Cuts every chunk at each of the hard places, all of them every time: between every ``\\r`` and ``\\n``, inside
    every multi-byte UTF-8 character (before each continuation byte), just after every backslash (inside a JSON
    escape) and after the second byte of every line (inside the field name: ``da|ta:``, ``ev|ent:``)."""

    __slots__ = ()

    def cut(self, chunk: bytes) -> list[bytes]:
        starts = [0, *(k + 1 for k, b in enumerate(chunk) if b == 0x0A)]
        cuts = {k for k in range(1, len(chunk))
                if (chunk[k - 1] == 0x0D and chunk[k] == 0x0A) or 0x80 <= chunk[k] <= 0xBF or chunk[k - 1] == 0x5C}
        cuts |= {s + 2 for s in starts if b"\n" not in chunk[s:s + 2] and b"\r" not in chunk[s:s + 2]}
        bounds = [0, *sorted(k for k in cuts if 0 < k < len(chunk)), len(chunk)]
        return [chunk[a:b] for a, b in itertools.pairwise(bounds)]


def _in_json_string(line: bytes) -> bool:
    """Whether the end of ``line`` (a ``data:`` line's start) lies inside a JSON string."""
    inside = escaped = False
    for b in line:
        if escaped:
            escaped = False
        elif inside and b == 0x5C:  # backslash
            escaped = True
        elif b == 0x22:  # quote
            inside = not inside
    return inside


def cut_class(data: bytes, pos: int) -> str:
    """What a cut of ``data`` before offset ``pos`` (0 < pos < len) splits (one of ``CUT_CLASSES``)."""
    if data[pos - 1:pos] == b"\r" and data[pos:pos + 1] == b"\n":
        return "crlf"
    if 0x80 <= data[pos] <= 0xBF:  # a continuation byte: the cut is inside a multi-byte character
        return "utf8"
    head = data[:pos]
    if head.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return "between_events"
    start = max(head.rfind(b"\n"), head.rfind(b"\r")) + 1
    line = head[start:]
    if line.startswith(b"data:") and _in_json_string(line[5:]):
        return "json_string"
    return "event"


def cut_classes(answers: Iterable[tuple[bytes, Iterable[int]]]) -> Counter[str]:
    """How many cuts of each class the (answer, cut offsets) pairs hold."""
    return Counter(cut_class(data, pos) for data, cuts in answers for pos in cuts if 0 < pos < len(data))

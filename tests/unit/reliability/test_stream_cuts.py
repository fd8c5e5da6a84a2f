"""``stream_cuts``: the seeded cutter and the names of what a cut splits."""

from __future__ import annotations

import random

import pytest

from tests.support.reliability.stream_cuts import CUT_CLASSES, Cutter, HardCutter, cut_class, cut_classes

# one Gemini-style event (CRLF line ends) with multi-byte characters and an escaped quote inside a JSON string
EVENT = 'data: {"text": "a \\" caf\u00e9 \U0001f914", "n": 1}\r\n\r\n'.encode()


def _offsets(pieces: list[bytes]) -> set[int]:
    out, at = set(), 0
    for p in pieces[:-1]:
        at += len(p)
        out.add(at)
    return out


def test_the_same_seed_draws_the_same_offsets_whatever_the_reads() -> None:
    data = EVENT * 20
    whole = Cutter(random.Random(5), 24).cut(data)
    reads = [data[:7], data[7:100], data[100:]]
    cutter = Cutter(random.Random(5), 24)
    split = [p for r in reads for p in cutter.cut(r)]
    assert b"".join(whole) == b"".join(split) == data
    assert _offsets(split) - {7, 100} == _offsets(whole) - {7, 100}
    assert all(1 <= len(p) <= 24 for p in whole)
    assert _offsets(Cutter(random.Random(6), 24).cut(data)) != _offsets(whole)


@pytest.mark.parametrize(("needle", "after", "expected"), [
    (b"\r\n\r\n", 1, "crlf"),                 # between the first \r and \n
    (b"\xc3\xa9", 1, "utf8"),                 # inside the e-acute
    (b"\xf0\x9f\xa4\x94", 3, "utf8"),         # inside the emoji
    (b"caf", 1, "json_string"),               # after the escaped quote: still inside the string
    (b'"n"', 0, "event"),                     # before a key's opening quote: outside any string
    (b"data:", 2, "event"),
])
def test_cut_class(needle: bytes, after: int, expected: str) -> None:
    assert cut_class(EVENT, EVENT.index(needle) + after) == expected


def test_between_events_and_the_counts() -> None:
    data = EVENT + EVENT
    assert cut_class(data, len(EVENT)) == "between_events"
    counts = cut_classes([(data, range(1, len(data)))])
    assert set(counts) == set(CUT_CLASSES) and sum(counts.values()) == len(data) - 1


def test_the_hard_cutter_cuts_at_every_hard_place() -> None:
    pieces = HardCutter().cut(EVENT + b"event: x\ndata: 1\n\n")
    assert pieces[:3] == [b"da", b'ta: {"text": "a \\', b'" caf\xc3']
    assert pieces[3:7] == [b"\xa9 \xf0", b"\x9f", b"\xa4", b'\x94", "n": 1}\r']
    assert pieces[7:] == [b"\n\r", b"\nev", b"ent: x\nda", b"ta: 1\n\n"]

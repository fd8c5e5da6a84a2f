"""SSE framing (``gateway.sse``): however a stream is split into reads, the same events come out. A
CRLF
whose CR ends one read and whose LF starts the next is one line end (issue 22, item 6)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sse import SSEDecoder


def events(chunks: list[bytes]) -> list[tuple[str | None, str]]:
    dec = SSEDecoder()
    out = [(e.event, e.data) for c in chunks for e in dec.feed(c)]
    return out + [(e.event, e.data) for e in dec.flush()]


def test_a_crlf_split_between_two_reads_is_one_line_end() -> None:
    whole = b"event: x\r\ndata: a\r\ndata: b\r\n\r\n"
    assert events([b"event: x\r", b"\ndata: a\r\ndata: b\r\n\r\n"]) == events([whole]) == [("x", "a\nb")]
    assert events([b"data: a\r", b"\n\r", b"\n"]) == [(None, "a")]
    assert events([b"data: a\r"]) == [(None, "a")]  # a stream ending in a CR: flushed, the CR a line end


_LINE = st.sampled_from([b"event: message_delta", b"data: {\"a\": 1}", b"data: two", b": comment", b"data:",
                         b"id: 7", b"event: ping"])
_END = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(_LINE, _END), min_size=1, max_size=4), _END), min_size=1, max_size=5),
       st.data())
def test_any_split_gives_the_same_events(stream: list[tuple[list[tuple[bytes, bytes]], bytes]],
                                         data: st.DataObject) -> None:
    raw = b"".join(b"".join(line + end for line, end in lines) + blank for lines, blank in stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert events(chunks) == events([raw])

"""What a replayed assistant message is looked up by (``lookup_hashes``): the normalized hashes of its thinking and
text blocks, ``<think>``-tagged text included (``block_hashes``: they confirm the text of a turn found by its place,
``gateway.pipeline.repair.matching``), and the exact hashes of its thinking texts (load query keys,
``gateway.pipeline.identify.identity``, and the
signed thinking that names a turn). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gateway.dialects.canonical import Block, Message, TextBlock, ThinkingBlock
from state.hashing import exact_hash, norm_hash

_TAGGED = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL)


def lookup_hashes(m: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``block_hashes``, exact hashes of its thinking texts) of a replayed assistant message: what the load
    query and repair look it up by. Read once per undecoded JSON (a replayed history's latest turns are
    looked up again on every request)."""
    known = m.raw_derived(_lookup_hashes)
    return known if known is not None else _lookup_hashes(m)


def _lookup_hashes(m: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    blocks = m.peek_content()
    return tuple(block_hashes(blocks)), tuple(exact_hash(b.thinking) for b in blocks
                                              if isinstance(b, ThinkingBlock) and b.thinking)


def block_hashes(blocks: Iterable[Block]) -> list[str]:
    """Normalized hashes of an assistant message's thinking and text blocks (``lookup_hashes``)."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, ThinkingBlock) and b.thinking:
            out.append(norm_hash(b.thinking))
        elif isinstance(b, TextBlock) and b.text.strip():
            out.append(norm_hash(b.text))
            for _, inner in _TAGGED.findall(b.text):
                out.append(norm_hash(inner))
            outer = _TAGGED.sub(" ", b.text)
            if outer.strip() and outer != b.text:
                out.append(norm_hash(outer))
    return out

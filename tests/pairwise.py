"""Pairwise sampling of the acceptance matrices' ``case x stream x header`` product.

Every row of a matrix (a mangling case, or a model and case) is played twice by default: once
non-streaming and once streaming, once with the SCID header and once without, alternating down the
rows which of the two pairings comes first. So every case meets both stream modes and both header
modes, and every (stream, header) pair is played by half of the cases: every pair of values of any
two axes is covered. The other two combinations of each row carry the ``slow`` marker (deselected by
the default ``-m 'not slow'``), so ``pytest -m slow`` plays exactly the rest of the full product and
``pytest -m ''`` all of it. The selection is fixed (no randomness): the same tests run every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


def default_pairs(k: int) -> set[tuple[bool, bool]]:
    """The two ``(stream, header)`` combinations row ``k`` plays by default."""
    return {(False, k % 2 == 0), (True, k % 2 == 1)}


def stream_header_params(rows: Sequence[tuple[Any, ...]], row_ids: Sequence[str], *, offset: int = 0,
                         stream_ids: tuple[str, str] = ("create", "stream"),
                         header_ids: tuple[str, str] = ("scid", "no-scid")) -> list[Any]:
    """``pytest.param(*row, stream, header)`` for every row and combination, ids ``<row>-<stream>-<header>``
    (as stacked ``parametrize`` decorators named them), the combinations outside the sample marked slow.

    ``offset=1`` samples the other two combinations of every row: two matrices over the same rows, one
    with each offset, play the whole product between them by default."""
    assert len(rows) == len(row_ids)
    out = []
    for k, (row, row_id) in enumerate(zip(rows, row_ids, strict=True)):
        sampled = default_pairs(k + offset)
        for header in (True, False):
            for stream in (False, True):
                marks = () if (stream, header) in sampled else (pytest.mark.slow,)
                out.append(pytest.param(*row, stream, header, marks=marks,
                                        id=f"{row_id}-{stream_ids[stream]}-{header_ids[not header]}"))
    return out


def run_label(stream: bool, header: bool) -> str:
    """Words that make a matrix cell's prompt its own: cells that share a prompt share a path, and a header-less
    client whose tool ids say nothing is then rightly not told apart from the other cell's conversation."""
    return f"({'stream' if stream else 'create'}, {'scid' if header else 'no-scid'})"

"""What a cached value really holds in memory: the bytes of its objects, not of the JSON it came from.

``held(obj)`` sums ``sys.getsizeof`` over a tree of dicts, lists, tuples, strings, bytes and numbers (what
JSON and msgpack decode to): for these CPython types that is each object's own allocation (a dict's hash
table, a list's pointer array, a string's characters), so the sum is what the tree keeps alive, less
objects it shares with others (interned keys, small ints), which makes it an upper bound (pymalloc's
rounding, up to 15 bytes an object, is not counted). It walks
every node (about 0.15 us each), so callers size an entry once, when they keep it.

A 100,001-message body of ``{"role":"user","content":"a"}`` is 3.3 MB of JSON and about 40 MB of parsed
dicts (a dict alone is 184 bytes): sizing by request bytes undercounts such a body twelvefold.
"""

from __future__ import annotations

from sys import getsizeof
from typing import Any

_CONTAINERS = (dict, list, tuple)


def held(obj: Any, over: int | None = None) -> int:
    """The bytes ``obj`` and everything it contains hold (see the module doc). ``over``: stop as soon as the sum
    passes it (a caller that only asks whether a value fits: a 100,000-message body it refuses is not walked
    whole); the sum returned is then more than ``over`` and less than the whole."""
    total = 0
    stack = [obj]
    pop, push = stack.pop, stack.extend
    while stack:
        o = pop()
        total += getsizeof(o)
        if over is not None and total > over:
            return total
        t = type(o)
        if t is dict:
            push(o.keys())
            push(o.values())
        elif t is list or t is tuple:
            push(o)
    return total

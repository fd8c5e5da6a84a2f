"""The coherence rule, as a unit (``state.coherence``): its semantics, every per-worker cache registered with the
way it keeps the rule (a new cache that is not fails here), and the continuation priors dropped at any other head.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gateway.continuation.replay_memo import Carried
from gateway.continuation.splice import SplicePrior
from state.coherence import CACHES, Head, Kind, continues, serves

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("gateway", "state")
SKIP = ("thinkgate_sim/",)  # the simulator is an upstream, not a replica: it holds what a real upstream holds
# what builds a cache: a bounded map, a memoising decorator, an LRU of ours
CACHE_CALLS = frozenset({"OrderedDict", "Lru", "ObjectLru", "turn_cache", "WeakValueDictionary",
                         "WeakKeyDictionary"})
CACHE_DECORATORS = frozenset({"lru_cache", "cache", "cached_property"})


def cache_sites(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in CACHE_CALLS:
                found.append(f"{name}() at line {node.lineno}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                name = target.id if isinstance(target, ast.Name) else \
                    target.attr if isinstance(target, ast.Attribute) else ""
                if name in CACHE_DECORATORS:
                    found.append(f"@{name} on {node.name}")
    return found


def modules() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(SKIP):
                out[rel] = path.read_text()
    return out


def test_every_module_that_builds_a_cache_is_registered_with_how_it_keeps_the_rule() -> None:
    sites = {rel: found for rel, src in modules().items() if (found := cache_sites(src))}
    unregistered = {rel: found for rel, found in sites.items() if rel not in CACHES}
    assert not unregistered, (
        f"per-worker caches that do not say how they keep the coherence rule (state/coherence.py CACHES): "
        f"{unregistered}")
    stale = sorted(set(CACHES) - set(sites))
    assert not stale, f"registered in state.coherence.CACHES but building no cache any more: {stale}"


def test_the_scan_sees_a_new_cache() -> None:
    """The scan is not blind: each kind of cache it looks for is found."""
    assert cache_sites("from collections import OrderedDict\nx = OrderedDict()\n")
    assert cache_sites("import functools\n@functools.lru_cache(maxsize=8)\ndef f(): pass\n")
    assert cache_sites("from functools import cache\n@cache\ndef f(): pass\n")
    assert cache_sites("from state.coherence import Lru\nx = Lru(10)\n")
    assert not cache_sites("x = dict()\n")


def test_conversation_state_caches_are_the_head_or_extended_kinds() -> None:
    assert CACHES["state/convcache.py"][1] is Kind.EXTENDED
    assert CACHES["gateway/continuation/replay_memo.py"][1] is Kind.HEAD


H = Head("scid-a", 1_700_000_000_000, 3, 3)


@pytest.mark.parametrize("now", [
    Head("scid-b", H.created, H.version, H.next),           # another conversation
    Head(H.scid, H.created + 1, H.version, H.next),         # another incarnation (expired, recreated)
    Head(H.scid, H.created, H.version + 1, H.next + 1),     # another replica recorded since
    Head(H.scid, H.created, H.version + 1, H.next),         # a fork point or trim moved it
    None,                                                   # the store was not read
])
def test_any_other_head_does_not_serve(now: Head | None) -> None:
    assert not serves(H, now)
    assert not serves(None, H)


def test_the_same_head_serves() -> None:
    assert serves(H, Head(H.scid, H.created, H.version, H.next))


def test_the_conversation_cache_extends_only_the_same_incarnation_within_the_list() -> None:
    assert continues("100", 3, "100", 0, 3) and continues("100", 3, "100", 2, 5)
    assert not continues("100", 3, "101", 0, 5)   # another incarnation
    assert not continues("100", 3, "100", 3, 5)   # trimmed past what was held
    assert not continues("100", 6, "100", 0, 5)   # held more than there is: not the same list


def test_carried_priors_serve_only_at_their_head() -> None:
    prior = SplicePrior(json={}, prefix=None)
    carried = Carried(H, repaired=None, sanitized=None, encoded=prior, restorations={1: object()})  # type: ignore[dict-item]
    assert carried.at(Head(H.scid, H.created, H.version, H.next)) is carried
    moved = carried.at(Head(H.scid, H.created, H.version + 1, H.next + 1))
    assert moved.head is None and moved.restorations == {} and moved.repaired is None and moved.sanitized is None
    assert moved.encoded is not None and moved.encoded.prefix is None  # each message's own JSON stays
    assert carried.at(None).restorations == {}

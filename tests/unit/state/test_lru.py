"""``state.coherence.Lru``: the bound of the per-worker decoded-data caches."""

from __future__ import annotations

from state.coherence import Lru, ObjectLru


def test_forgets_the_least_recently_used_first() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "a" is now the most recent
    lru.put("c", 3)
    assert (lru.get("b"), lru.get("a"), lru.get("c"), len(lru)) == (None, 1, 3, 2)
    lru.put("a", 10)  # put again: most recent
    lru.put("d", 4)
    assert lru.values() == [10, 4]


def test_resized_down_keeps_the_most_recent_and_zero_keeps_nothing() -> None:
    lru: Lru[int, int] = Lru(5)
    for i in range(5):
        lru.put(i, i)
    lru.resize(2)
    assert lru.values() == [3, 4]
    lru.resize(0)
    lru.put(9, 9)
    assert len(lru) == 0 and lru.get(9) is None


def test_an_object_lru_is_keyed_by_identity_and_holds_its_objects() -> None:
    lru: ObjectLru[list[int], str] = ObjectLru(2)
    a, b = [1], [1]  # equal, not the same
    lru.put(a, "a")
    assert lru.get(a) == "a" and lru.get(b) is None
    lru.put(b, "b")
    lru.put([2], "c")  # a third: the least recently used (a) goes
    assert lru.get(a) is None and lru.get(b) == "b" and len(lru) == 2
    assert [v for _, v in lru.items()] == ["c", "b"]
    lru.resize(0)
    lru.put(a, "a")
    assert lru.get(a) is None and len(lru) == 0


def test_a_popped_entry_is_forgotten_and_its_cost_given_back() -> None:
    lru: Lru[str, bytes] = Lru(4, 10_000, lambda k, v: len(v))
    lru.put("a", b"x" * 10)
    lru.put("b", b"y" * 20)
    assert lru.pop("a") == b"x" * 10 and lru.get("a") is None and lru.total_cost == 20
    assert lru.pop("a") is None and len(lru) == 1

"""A worker decodes a stored record's blocks once and shares them between requests
(``gateway.pipeline.repair.records.RecordCaches``, one per worker): a mangled replay restores every turn from its
record on every
request.

Turns are recorded into the embedded store and loaded back as the gateway does (``records_from``); the
replay is decoded from JSON, as the Anthropic surface does. That no pipeline stage changes a shared block
is checked after every equivalence scenario of the replay memo tests (``memo_equivalence``).
"""

from __future__ import annotations

from typing import Any

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Block, Message
from gateway.pipeline.repair import records
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import RecordCaches, records_from
from state.records import TurnRecord
from state.store import LoadQuery
from tests.support.manglings.anthropic import mangle_assistants
from tests.support.state.factories import TENANT_A
from tests.unit.gateway.test_replay_digest import recorded_history


async def restore_twice(n: int, caches: RecordCaches) -> tuple[list[list[Block]], list[list[Block]], list[Any]]:
    """Replay a recorded n-turn history with trimmed thinking twice, each with its own load: the restored
    assistant contents of both requests and the records they came from."""
    store, scid, history = await recorded_history(n)
    replay = mangle_assistants(history, "trim_thinking")
    out: list[list[list[Block]]] = []
    recs_seen: list[Any] = []
    for _ in range(2):
        result = await store.load(TENANT_A, LoadQuery(scid=scid))
        msgs: list[Message] = anthropic.decode_request({"model": "m", "messages": replay}).messages
        res = repair(msgs, records_from(result, scid, caches))
        assert [a.kind for a in res.actions] == [ActionKind.RESTORED] * n
        out.append([m.content for m in msgs if m.role == "assistant"])
        assert result.conversation is not None
        recs_seen = list(result.conversation.turns)
    return out[0], out[1], recs_seen


def shared_unchanged(caches: RecordCaches) -> int:
    shared = caches.shared()
    for rec, blocks in shared:
        assert blocks == tuple(records.load_block(b) for b in rec.content), rec.turn_id
    return len(shared)


async def test_a_record_is_decoded_once_and_its_blocks_shared_by_later_requests() -> None:
    caches = RecordCaches()
    first, second, recs = await restore_twice(4, caches)
    for a, b, rec in zip(first, second, recs, strict=True):
        assert a is not b  # each request's message holds its own list ...
        assert all(x is y for x, y in zip(a, b, strict=True))  # ... of the same blocks
        assert a == [records.load_block(d) for d in rec.content]  # exactly what decoding the record gives
    assert shared_unchanged(caches) >= 4


async def test_turned_off_every_request_decodes_its_own() -> None:
    caches = RecordCaches(0)
    first, second, _ = await restore_twice(3, caches)
    for a, b in zip(first, second, strict=True):
        assert a == b and not any(x is y for x, y in zip(a, b, strict=True))
    assert shared_unchanged(caches) == 0


async def test_bounded_least_recently_used_first() -> None:
    caches = RecordCaches(2)
    _, _, recs = await restore_twice(5, caches)
    assert [rec for rec, _ in caches.shared()] == recs[-2:]  # the two restored last


async def test_each_worker_has_its_own() -> None:
    """No process-wide cache: two workers' caches (``deps.WorkerCaches``) never share blocks."""
    one, other = RecordCaches(), RecordCaches()
    first, _, _ = await restore_twice(2, one)
    again, _, _ = await restore_twice(2, other)
    assert first == again and not any(x is y for a, b in zip(first, again, strict=True)
                                       for x, y in zip(a, b, strict=True))


def test_keyed_by_the_record_object_never_by_equal_content() -> None:
    caches = RecordCaches()
    content = [{"type": "text", "text": "same words"}]
    one, other = TurnRecord(content=list(content)), TurnRecord(content=list(content))
    a, b = caches.record_blocks(one), caches.record_blocks(other)
    assert a == b and a[0] is not b[0]
    assert caches.record_blocks(one) is a


async def test_repairs_view_of_a_record_is_shared_by_later_requests_within_its_conversation() -> None:
    store, scid, _ = await recorded_history(3)
    caches = RecordCaches()
    views = []
    for _ in range(2):
        result = await store.load(TENANT_A, LoadQuery(scid=scid))
        conv = records_from(result, scid, caches).conversation
        views.append([conv[pos] for pos in sorted(conv)])
    assert all(a is b for a, b in zip(*views, strict=True))  # one view per record, not one per request
    assert [t.position for t in views[0]] == [0, 1, 2] and {t.scid for t in views[0]} == {scid}
    rec = result.conversation.turns[0] if result.conversation else None
    assert rec is not None and caches.stored_turn("another-conversation", rec).scid == "another-conversation"
    again = records_from(await store.load(TENANT_A, LoadQuery(scid=scid)), scid, RecordCaches(0)).conversation
    assert again[0] is not views[0][0] and again[0].position == 0  # turned off: a view per request

"""The continuations' equivalence harness, shared by the Anthropic and the OpenAI chat tests: one app (real
simulator, real Redis) seen twice, with its replay memo and without, and one tool-loop step prepared both
ways, compared, sent upstream and recorded (``gateway_pair``, ``prepare_both_ways``); and two workers, every
continuation on and one switched off, each with its own conversation (``continuation_pair``,
``step_both_ways``)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from gateway.app.factory import Gateway, create_app
from gateway.app.settings import Settings
from gateway.continuation.replay_memo import Ticket
from gateway.dialects.anthropic import codec as anthropic
from gateway.pipeline import identify
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import ClientRequest
from gateway.pipeline.repair import records

Prepare = Callable[[pipeline.Exchange, Gateway], Awaitable[None]]
# every continuation a worker has (``gateway.continuation.replay_memo``, ``BENCHMARKS.md``), each switched off alone by
# ``switched_off``
CONTINUATIONS = ("memo", "splice", "carried_repair", "carried_sanitize", "load_cache")


def switched_off(name: str) -> dict[str, Any]:
    """The settings that switch the continuation ``name`` off (``CONTINUATIONS``)."""
    if name == "memo":
        return {"replay_memo_mb": 0}
    if name == "load_cache":
        return {"load_cache_mb": 0}
    return {"continuations_off": frozenset({name})}


@contextlib.asynccontextmanager
async def gateway_pair(sim_url: str, redis_url: str, secret: str,
                       **settings: Any) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """(the app's gateway with its replay memo, the same gateway without one)."""
    app = create_app(Settings(anthropic_base_url=sim_url, redis_url=redis_url, secret=secret, store_timeout_ms=2000,
                              **settings))
    async with app.router.lifespan_context(app):
        with_memo: Gateway = app.state.gateway
        assert with_memo.replay_memo is not None
        yield with_memo, dataclasses.replace(with_memo, replay_memo=None)


@contextlib.asynccontextmanager
async def continuation_pair(sim_url: str, redis_url: str, off: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """(a worker with every continuation on, one with ``off`` switched off): two apps on the same Redis, under
    two secrets, so each identifies and records its own copy of the conversation (``step_both_ways``)."""
    settings = Settings(anthropic_base_url=sim_url, redis_url=redis_url, secret="continuations-all-on",
                        store_timeout_ms=2000)
    on_app = create_app(settings)
    off_app = create_app(dataclasses.replace(settings, secret=f"continuations-{off}-off", **switched_off(off)))
    async with on_app.router.lifespan_context(on_app), off_app.router.lifespan_context(off_app):
        yield on_app.state.gateway, off_app.state.gateway


async def step_both_ways(pair: tuple[Gateway, Gateway], make: Callable[[], pipeline.Exchange],
                         headers: dict[str, str]) -> tuple[tuple[Ticket | None, Ticket | None], dict[str, Any]]:
    """One tool-loop step on both workers of a ``continuation_pair``: the same upstream bytes and the same plan
    (actions, identification, position, fork; the conversation ids differ: each worker's tenant has its own),
    the request sent upstream once and its answer recorded by both. Returns both requests' replay memo tickets
    (what their stages continued from) and the answer."""
    on, off = pair
    reference = make()
    await pipeline.prepare(reference, off)
    ex = make()
    await pipeline.prepare(ex, on)
    got, want = plan(ex), plan(reference)
    assert got[1:4] + got[5:] == want[1:4] + want[5:], f"{got[1:]} != {want[1:]}"
    assert got[0] == want[0]
    assert (ex.identity.scid is None) == (reference.identity.scid is None)
    tickets = ex.continuation.ticket, reference.continuation.ticket
    answer = await relay_and_record(on, ex, headers)
    await pipeline.record(reference, off, anthropic.decode_turn(answer))
    assert reference.plan.recorded
    return tickets, answer


_request_ids = itertools.count()


def exchange_of(body: dict[str, Any], *, endpoint: str, dialect: str,
                headers: dict[str, str]) -> Callable[[], pipeline.Exchange]:
    """A fresh exchange of ``body`` on each call (``prepare_both_ways`` prepares it twice)."""
    return lambda: pipeline.Exchange(ClientRequest(endpoint=endpoint, dialect=dialect,
                                                   request_id=f"req_memo_{next(_request_ids)}", headers=dict(headers),
                                                   query="", raw_body=orjson.dumps(body)))


def shared_blocks_unchanged(*workers: Gateway) -> int:
    """Every record's blocks these workers share between requests (``RecordCaches.shared``) are still exactly
    what decoding the record gives, so no stage changed a shared block in place. Returns how many records'
    blocks were checked."""
    shared = [pair for gw in workers for pair in gw.caches.records.shared()]
    for rec, blocks in shared:
        assert blocks == tuple(records.load_block(b) for b in rec.content), rec.turn_id
    return len(shared)


def plan(ex: pipeline.Exchange) -> tuple[Any, ...]:
    """What the pipeline decided (a conversation it starts gets a random id: only a found one counts)."""
    fresh_id = ex.identity.expected_position == 0 and ex.identity.scid != ex.identity.header_scid
    assert ex.request is not None
    canonical = orjson.dumps(anthropic.encode_request(ex.request))  # the messages as the stages left them
    ident = ex.identity
    return (ex.plan.outgoing, canonical, [(a.kind, a.message_index, a.detail) for a in ex.plan.actions],
            ex.continuation.changed, None if fresh_id else ident.scid, ident.via, ident.expected_position, ident.fork,
            ident.prefix_fp)


async def prepare_both_ways(pair: tuple[Gateway, Gateway], make: Callable[[], pipeline.Exchange],
                            prepare: Prepare) -> pipeline.Exchange:
    """Prepare one request with the memo and without (the same worker memory otherwise: conversation hints);
    the plans must be equal. Returns the exchange prepared with the memo."""
    with_memo, without = pair
    reference = make()
    await prepare(reference, dataclasses.replace(without, hints=copy.deepcopy(with_memo.hints)))
    ex = make()
    await prepare(ex, with_memo)
    got, want = plan(ex), plan(reference)
    assert got[1:] == want[1:] and got[0] == want[0], f"{got[1:]} != {want[1:]}"
    if ex.continuation.changed and ex.route.upstream == "anthropic":
        assert ex.plan.outgoing == got[1]  # spliced (``gateway.continuation.splice``) or not: the bytes encoding it all
        # gives
    return ex


async def relay_and_record(gw: Gateway, ex: pipeline.Exchange, headers: dict[str, str]) -> dict[str, Any]:
    """Send the prepared request to the simulator, record its answer; the recorded path fingerprint must be
    the whole history's (a replay hashes only its new messages, to the same). Returns the answer."""
    resp = await gw.upstreams["anthropic"].post("/v1/messages", ex.plan.outgoing, headers, "")
    answer: dict[str, Any] = orjson.loads(await resp.read())
    assert resp.status == 200, answer
    await pipeline.record(ex, gw, anthropic.decode_turn(answer))
    assert ex.plan.recorded and gw.store is not None and ex.identity.tenant and ex.identity.scid and ex.request
    conv = await gw.store.get_conversation(ex.identity.tenant, ex.identity.scid)
    assert conv is not None and conv.turns[-1].prefix_fingerprint == identify.path_fingerprint(ex.request.messages)
    return answer


def answered(history: list[dict[str, Any]], answer: dict[str, Any], result: str) -> None:
    """The next round of an Anthropic tool loop: ``answer`` as the assistant message, then each of its tool
    calls answered with ``result``."""
    history.append({"role": "assistant", "content": answer["content"]})
    history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": result}
                                                for b in answer["content"] if b["type"] == "tool_use"]})

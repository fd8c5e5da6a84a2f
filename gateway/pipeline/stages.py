"""The request pipeline as explicit stages, whatever the client dialect:

    decode -> identify -> load -> repair/sanitize -> encode -> relay -> record

``prepare`` runs everything up to the upstream call; endpoints relay and call
``record`` with the finished turn. Store trouble never fails a request: the
request is then served statelessly (sanitize only) and nothing is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from gateway.actions import UNCHANGED, Action, ActionKind, action_kind
from gateway.app.deps import Gateway
from gateway.continuation import replay_memo as continuation
from gateway.continuation import splice
from gateway.continuation.replay_memo import Resume, Ticket, one_to_one
from gateway.dialects import classify, openai_compat, registry
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    Message,
    Request,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.entry import Dialect
from gateway.dialects.routing import ModelCaps
from gateway.errors import bad_request
from gateway.ops import metrics
from gateway.pipeline import identify
from gateway.pipeline.exchange import Exchange
from gateway.pipeline.identify import edge_tool_ids
from gateway.pipeline.repair import core as repair
from gateway.pipeline.repair import edits, prefix
from gateway.pipeline.repair.core import rebuild_history
from gateway.pipeline.repair.records import RecordedTurn, Records, records_from, turn_record
from gateway.pipeline.sanitize import core as sanitize
from gateway.pipeline.sanitize.core import Policy
from state.keys import new_scid
from state.records import encode_turn
from state.store import LoadQuery, LoadResult, StoreError, StoreUnavailable, TurnWrite

log = logging.getLogger("thinkgate.pipeline")
T = TypeVar("T")


def parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise bad_request("Request body is empty; expected a JSON object")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"Request body is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") \
            from None


# ------------------------------------------------------------------ stages

Decoder = Callable[[Any], Request]


@dataclass(frozen=True, slots=True)
class ReplayDecoder:
    """A surface decoder the replay memo serves. ``decode(body, messages)`` decodes a parsed body, with its
    messages already decoded when given (a replay: ``resume`` joined the kept ones and the new ones);
    ``kind`` names the surface, whose kept messages only its own requests continue."""

    kind: str
    decode: Callable[[Any, list[Message] | None], Request]
    resume: Resume


def _anthropic(body: Any, messages: list[Message] | None) -> Request:
    return anthropic.decode_request(body, None if messages is None else lambda _: messages)


ANTHROPIC = ReplayDecoder("anthropic", _anthropic, one_to_one(anthropic.decode_message))


def decode(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder = ANTHROPIC) -> None:
    """The surface dialect's decoder turns the parsed body into the canonical request. A request of a
    ``ReplayDecoder`` surface that replays what this worker kept of the conversation's previous request
    parses and decodes only its new messages (``replay_memo``)."""
    if not _replayed(ex, gw, decoder):
        _decode_whole(ex, gw, decoder)


def _replayed(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder) -> bool:
    """Whether the request replays what this worker kept (``ReplayMemo.take``): then only its new messages were
    parsed and decoded; else nothing was."""
    memo = gw.replay_memo
    if not isinstance(decoder, ReplayDecoder) or memo is None or ex.identity.tenant is None:
        return False
    replay = memo.take(ex.identity.tenant, decoder.kind, ex.client.raw_body, decoder.resume, ex.continuation.match)
    metrics.observe_replay(replay is not None)
    if replay is None:
        return False
    parsed, messages, ticket = replay
    ticket.objects = ex.client.objects  # (what the next replay's memory estimate starts from)
    ex.continuation.ticket = ticket
    ex.request = decoder.decode(parsed, messages)
    return True


def _decode_whole(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder) -> None:
    """The whole body parsed and decoded; a ``ReplayDecoder``'s is kept for the next request (its ticket)."""
    if not isinstance(decoder, ReplayDecoder):
        ex.request = decoder(parse_json(ex.client.raw_body))
        return
    body = parse_json(ex.client.raw_body)
    ex.request = decoder.decode(body, None)
    memo, tenant = gw.replay_memo, ex.identity.tenant
    # (not a body whose history came in another field: Responses)
    if memo is not None and tenant is not None and isinstance(body.get("messages"), list):
        ex.continuation.ticket = memo.ticket(tenant, decoder.kind, ex.client.raw_body, body, ex.request.messages)
        ex.continuation.ticket.objects = ex.client.objects


def identify_tenant(ex: Exchange, gw: Gateway) -> None:
    ex.identity.tenant = identify.tenant_of(gw.settings.secret, ex.client.headers)
    if gw.settings.previous_secret:
        ex.identity.previous_tenant = identify.tenant_of(gw.settings.previous_secret, ex.client.headers)


def header_conversation(ex: Exchange) -> None:
    # The header wins; else keep an id the surface decoder found in the body (Augment conversation_id).
    ex.identity.header_scid = identify.scid_from_header(ex.client.headers)[0] or ex.identity.header_scid


def load_query(ex: Exchange, gw: Gateway) -> LoadQuery | None:
    """What the load asks the store (the path's fingerprints hash every user message: CPU work, done off the event
    loop with the decode for a big body); None: the request is served without state."""
    if gw.store is None or ex.identity.tenant is None or not gw.settings.state_machine_enabled:
        return None
    assert ex.request is not None
    ticket = ex.continuation.ticket
    query = identify.build_query(ex.request.messages, ex.identity.header_scid, ticket.known if ticket else None)
    ex.identity.prefix_fp = query.fingerprints[0] if query.fingerprints else None  # reused by _plan_record
    return query


async def load(ex: Exchange, gw: Gateway, query: LoadQuery | None) -> LoadResult | None:
    """One store round trip (two when the conversation had to be found by index)."""
    if gw.store is None or ex.identity.tenant is None or query is None:
        ex.identity.stateless = metrics.stateless_reason(None, credential=ex.identity.tenant is not None)
        return None
    assert ex.request is not None
    edge_ids = edge_tool_ids(ex.request.messages)
    if query.scid is None and edge_ids:
        query = dataclasses.replace(query, hint_scid=gw.hints.guess(ex.identity.tenant, edge_ids))
    try:
        if ex.identity.previous_tenant and ex.identity.previous_tenant != ex.identity.tenant:
            result, found = await _load_rotating(ex, gw, query)
        else:
            result = await gw.store.load(ex.identity.tenant, query)
            found = identify.identify_conversation(result, query)
    except StoreError as e:
        log.warning("store load failed (%s); serving statelessly", type(e).__name__)
        ex.identity.stateless = metrics.stateless_reason(e)
        if isinstance(e, StoreUnavailable):  # away for now: what this request relays is recorded once it is back
            ex.identity.deferred = query
            gw.store_failed_at = time.monotonic()
        return None
    ex.identity.stateful = True
    ex.identity.scid, ex.identity.via = found.scid, found.via
    if found.scid is not None and edge_ids:
        gw.hints.learn(ex.identity.tenant, edge_ids, found.scid)
    metrics.observe_lookup(found.via, query, result)
    return result


async def _load_rotating(ex: Exchange, gw: Gateway, query: LoadQuery) -> tuple[LoadResult, identify.Identified]:
    """During a secret rotation, a conversation recorded under the previous secret's tenant prefix
    continues there (both loads run concurrently); everything new lives under the current one."""
    assert gw.store is not None and ex.identity.tenant is not None and ex.identity.previous_tenant is not None
    current, previous = await asyncio.gather(gw.store.load(ex.identity.tenant, query),
                                             gw.store.load(ex.identity.previous_tenant, query))
    found = identify.identify_conversation(current, query)
    if found.scid is None:
        old = identify.identify_conversation(previous, query)
        if old.scid is not None:
            ex.identity.tenant = ex.identity.previous_tenant
            return previous, old
    return current, found


def repair_and_sanitize(ex: Exchange, gw: Gateway, result: LoadResult | None) -> None:
    """Repair, then sanitize, each from its prior (``continuation``: what it found of the conversation's previous
    request, when that holds for this one); their outcomes are the next request's priors."""
    assert ex.request is not None
    req = ex.request
    cont = ex.continuation
    ticket, off = cont.ticket, gw.settings.continuations_off
    continuation.admit(ticket, result)  # what the previous request carried serves only at its head
    client = list(req.messages)  # as the client sent them (``context_edits`` compares)
    with gw.tracing.span("repair"):
        ident = ex.identity
        recs = records_from(result, ident.scid, gw.caches.records) if result is not None else Records()
        upto = ident.branch_at[1] if ident.branch_at is not None and ident.branch_at[0] == ident.scid else None
        rebuilt = rebuild_history(recs, req.messages, upto) if ident.via == "header" else None
        if rebuilt is not None:
            req.messages = rebuilt[0]
        fixed, repaired = repair.run(req.messages, recs, rebuilt[1] if rebuilt else None,
                                     continuation.repair_prior(ticket, off))
        if rebuilt is not None:
            fixed.actions.insert(0, Action(ActionKind.HISTORY_REBUILT))
            fixed.changed = True
        caps = route_of(ex, gw)
        fixed.actions += edits.apply_context_edits(req.params, req.messages, client, fixed)
        fixed.actions += edits.apply_model_switch(req.messages, fixed.matched, req.model, caps)
    policy = _policy(ex, gw)
    sealed = req.surface.sealed  # blocks the gateway sealed itself: as good as a record's
    verified = fixed.is_verified if not sealed else lambda b: fixed.is_verified(b) or id(b) in sealed
    if ex.identity.deferred is not None or time.monotonic() - gw.store_failed_at < OUTAGE_GRACE_S:
        # the store is away, or was a moment ago (turns served meanwhile are still on their way to it): thinking
        # this worker relayed itself is verified by its journal
        known, journal, tenant = verified, gw.journal, ex.identity.tenant or ""
        verified = lambda b: known(b) or journal.vouches(tenant, b)  # noqa: E731
    with gw.tracing.span("sanitize"):
        cleaned, sanitized = sanitize.run(req, verified, fixed.verbatim, caps, policy,
                                          ex.client.betas, continuation.sanitize_prior(ticket, off))
    actions = fixed.actions + cleaned.actions
    ex.plan.actions = actions
    metrics.observe_actions(actions, ex.client.dialect)
    kinds = set(map(action_kind, actions))
    cont.changed = cont.changed or fixed.changed or bool(kinds - UNCHANGED)  # (an alias: changed before)
    cont.in_place = continuation.changes_in_place(kinds)
    cont.restored = fixed.restored
    if cont.in_place:
        cont.ticket = None  # a message may be changed in place: not kept for the next request (replay_memo)
    elif ticket is not None:
        cont.splice = continuation.carry(ticket, req.messages, fixed, repaired, cleaned, sanitized)
    _plan_record(ex, fixed.matched, result, rebuilt=rebuilt is not None)
    keep_prefix(ex, gw, result, fixed.matched)


# after this worker last saw the store away, for this long the turns it (or another replica) served meanwhile may
# still be on their way to the store (``record_retry``: its attempts span 7.6 s)
OUTAGE_GRACE_S = 15.0


def route_of(ex: Exchange, gw: Gateway) -> ModelCaps:
    """The capabilities of the request's model: the surface's one routing decision (``Exchange.caps``), or the
    router's for an exchange no surface routed (the pipeline driven directly)."""
    if ex.route.caps is None:
        assert ex.request is not None
        ex.route.caps = gw.router.caps_for(ex.request.model)
    return ex.route.caps


def _policy(ex: Exchange, gw: Gateway) -> Policy:
    s, tenant = gw.settings, ex.identity.tenant
    return gw.policy if tenant is None else dataclasses.replace(gw.policy, seals=openai_compat.seals_for(
        s.secret, s.previous_secret, tenant))


def keep_prefix(ex: Exchange, gw: Gateway, result: LoadResult | None, matched: dict[int, RecordedTurn]) -> None:
    """On a model that binds thinking to its prefix: the prefix as recorded, or ``drop_block`` where it changed
    (``gateway.pipeline.repair.prefix``); what was sent is recorded with the answer."""
    assert ex.request is not None
    req = ex.request
    caps = route_of(ex, gw)
    if not registry.of(caps).keeps_prefix(caps):
        return
    history: prefix.Recorded | None = None
    inserted: dict[int, list[dict[str, Any]]] = {}
    msgs = req.messages
    # (repair's indexes; sanitize rarely moves messages: one it moved is not trusted to be its turn)
    matched = {i: t for i, t in matched.items() if i < len(msgs) and msgs[i].role == "assistant"}
    if result is not None and matched:
        last = matched[max(matched)]
        conv = result.conversations.get(last.scid)
        if conv is not None:
            history = prefix.recorded((t.position, t.prefix) for t in conv.turns
                                      if t.position is not None and t.position <= last.position)
        for i, turn in matched.items():
            held = result.conversations.get(turn.scid)
            rec = held.turn_at(turn.position) if held is not None else None
            if rec is not None and rec.prefix.get(prefix.INSERTED):
                inserted[i] = rec.prefix[prefix.INSERTED]
    replayed = {i: turn.position for i, turn in matched.items()}
    out = prefix.stabilize(req, caps, history, inserted, replayed, keep=gw.settings.keep_prefix)
    ex.plan.prefix_note = out.note
    ex.plan.prefix_added = out.added
    if out.actions:
        ex.plan.actions = ex.plan.actions + out.actions
        metrics.observe_actions(out.actions, ex.client.dialect)
        metrics.observe_prefix(out.actions)
        log.info("prefix kept for a binding model: %s", ",".join(sorted({a.kind.value for a in out.actions})))
    if out.betas:
        ex.client.headers["anthropic-beta"] = prefix.with_betas(ex.client.headers.get("anthropic-beta"), out.betas)
    if out.changed:
        cont = ex.continuation
        cont.changed = cont.in_place = True
        cont.ticket = None  # messages were inserted: nothing of this request is kept for the next (replay_memo)


def _plan_record(ex: Exchange, matched: dict[int, Any], result: LoadResult | None, *, rebuilt: bool = False) -> None:
    """Which conversation and position the answer to this request will be recorded at, and whether
    it must go on a fork (``_left_path``). A history rebuilt from the records is their own path.

    Served statelessly, the exchange still answers with a conversation id: the client's
    own (valid) one, else a fresh one, so clients that track it keep working.
    """
    if not ex.identity.stateful:
        ex.identity.scid = ex.identity.header_scid or new_scid()
        return
    assert ex.request is not None
    msgs = ex.request.messages
    last_assistant = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)
    if last_assistant is not None and last_assistant in matched:
        turn = matched[last_assistant]
        ex.identity.scid, ex.identity.expected_position = turn.scid, turn.position + 1
        ex.identity.fork = not rebuilt and result is not None and _left_path(ex, msgs, last_assistant, turn, result)
    elif last_assistant is not None and _tail_unrecorded(ex, msgs, matched, result):
        # the latest assistant messages are turns not recorded yet (served while the store was away, on their way
        # to it: ``record_retry``): the answer goes after them, at the place the request gives it, as they will
        ex.identity.expected_position = sum(1 for m in msgs if m.role == "assistant")
    elif last_assistant is None and ex.identity.via == "header":
        ex.identity.expected_position = None  # continue the thread the client named
    elif last_assistant is None and ex.identity.via == "none" and ex.identity.header_scid is not None:
        # The first turn of a thread the client named: record it under that id so the client's
        # next request (which may replay no history) finds it. Keys are tenant-scoped.
        ex.identity.scid, ex.identity.expected_position = ex.identity.header_scid, 0
    else:
        ex.identity.scid, ex.identity.expected_position = new_scid(), 0


def _tail_unrecorded(ex: Exchange, msgs: list[Message], matched: dict[int, Any], result: LoadResult | None) -> bool:
    """The request replays the identified conversation from its start, each matched message at its turn's place, and
    each unmatched one at a place the store has not received (turns served while it was away, on their way to it;
    a turn of another replica's may land after a later one). An unmatched message where the store holds a turn is
    the client's own path: not this rule's."""
    conv = result.conversations.get(ex.identity.scid) if result is not None and ex.identity.scid is not None else None
    if not matched or conv is None:
        return False
    assistants = 0
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        turn = matched.get(i)
        if turn is None and conv.turn_at(assistants) is not None:
            return False
        if turn is not None and (turn.scid != ex.identity.scid or turn.position != assistants):
            return False
        assistants += 1
    return True


def _left_path(ex: Exchange, msgs: list[Message], last: int, turn: RecordedTurn, result: LoadResult) -> bool:
    """True when the user side of ``msgs[:last]`` differs from the path the matched turn answered
    (``TurnRecord.prefix_fingerprint``): the client edited an earlier message, so the answer goes on
    a fork even where nothing holds its position yet (an edit at the conversation's tip).

    Never a fork without evidence: a record without a fingerprint, or a client whose history does not
    reach back to the conversation's start (as many assistant messages before ``last`` as the turn's
    position; a client that truncates from the front would otherwise fork on every request). The
    client's own fingerprint, computed for the load query, answers a faithful replay at no cost; only
    when it differs is the repaired path fingerprinted (repair may rewrite the user side, e.g. an
    orphan tool result turned into text, the same way on every request).
    """
    conv = result.conversations.get(turn.scid)
    rec = conv.turn_at(turn.position) if conv is not None else None
    if rec is None or rec.prefix_fingerprint is None or ex.identity.prefix_fp == rec.prefix_fingerprint:
        return False
    if sum(1 for m in msgs[:last] if m.role == "assistant") != turn.position:
        return False
    return identify.path_fingerprint(msgs[:last]) != rec.prefix_fingerprint


_BOUND_AT = re.compile(r"messages\.(\d+)\.content\.(\d+): Invalid `signature` in `thinking` block\. The block is bound")


def strip_bound(ex: Exchange, gw: Gateway, status: int, body: bytes) -> bool:
    """A binding 400 (``classify``: ``binding_mismatch``) from an Anthropic upstream: the named block and every later
    thinking block removed from the request (``sanitize.strip_bound``), so that it can be retried once. False: not
    such a 400, or nothing to remove (the caller relays the 400)."""
    if status != 400 or ex.request is None or classify.classify(status, body) != "binding_mismatch":
        return False
    found = _BOUND_AT.search(body.decode("utf-8", "replace"))
    if found is None:
        return False
    req = ex.request
    # the model binds (it answered the binding 400), whatever the table says: such models cannot disable thinking
    # (an absent config is adaptive on them), so a loop left without its thinking travels as text (1.8, 1.9)
    caps = dataclasses.replace(route_of(ex, gw), can_disable_thinking=False, prefix_bound=True)
    policy = _policy(ex, gw)
    actions = sanitize.strip_bound(req, int(found[1]), int(found[2]), caps, policy, ex.client.betas)
    if not actions:
        return False
    ex.plan.actions = ex.plan.actions + actions
    metrics.observe_actions(actions, ex.client.dialect)
    metrics.observe_prefix(actions)
    log.info("binding 400: %d stale thinking block(s) removed, retrying once",
             sum(a.kind is ActionKind.BINDING_STRIPPED for a in actions))
    cont = ex.continuation
    cont.changed = cont.in_place = True
    cont.ticket = None
    return True


def distrust(ex: Exchange, gw: Gateway, status: int, body: bytes) -> str | None:
    """The last resort after a thinking 400 (``classify``: a signature-class kind) from any upstream: the request
    again with every replayed reasoning degraded (``sanitize.distrust``), so that it can be retried once. Returns the
    400's kind; None when it is no such 400 or degrading changed nothing (the caller relays the 400)."""
    if status != 400 or ex.request is None:
        return None
    kind = classify.classify(status, body)
    if kind not in classify.DISTRUSTED_KINDS:
        return None
    req = ex.request
    actions = sanitize.distrust(req, route_of(ex, gw), _policy(ex, gw), ex.client.betas)
    if not set(map(action_kind, actions)) - UNCHANGED:
        return None
    ex.plan.actions = ex.plan.actions + actions
    metrics.observe_actions(actions, ex.client.dialect)
    log.info("%s 400: every replayed reasoning degraded, retrying once", kind)
    cont = ex.continuation
    cont.changed = cont.in_place = True
    cont.ticket = None
    return kind


def retry_kind(ex: Exchange, gw: Gateway, upstream: Dialect, status: int, body: bytes) -> str | None:
    """Whether an ``upstream`` error is answered by one retry of a changed request, and the error's kind: a binding
    400 from an upstream that binds thinking (``strip_bound``), else a thinking 400 (``distrust``). None: the error
    stands."""
    if upstream.binding_retry and strip_bound(ex, gw, status, body):
        return "binding_mismatch"
    return distrust(ex, gw, status, body)


def encode(ex: Exchange, gw: Gateway) -> None:
    """The default encoder, an Anthropic surface's request to the Anthropic upstream (``Codec.encoder`` None):
    untouched, forwarded byte-for-byte; anything else is encoded, splicing the JSON
    of messages encoded before (``gateway.continuation.splice``) when no stage changed a message in place."""
    if not ex.continuation.changed:
        ex.plan.outgoing = ex.client.raw_body
        return
    assert ex.request is not None
    ex.plan.outgoing = anthropic_body(ex, ex.request, gw)


def anthropic_body(ex: Exchange, req: Request, gw: Gateway) -> bytes:
    """``req`` (``ex``'s, as the stages left it) encoded for an Anthropic upstream."""
    cont = ex.continuation
    if cont.in_place or "splice" in gw.settings.continuations_off:
        return orjson.dumps(anthropic.encode_request(req))
    body, spliced = splice.run(req, cont.splice, gw.caches.recorded_json, cont.from_records)
    if cont.ticket is not None:  # for the next request, which starts with these messages
        cont.ticket.carried = dataclasses.replace(cont.ticket.carried, encoded=spliced)
    return body


# orjson parses up to 1024 levels but encodes only 255, and the hashing/repair code recurses: a body
# nested past either limit is the client's mistake (400), not an internal error.
TOO_DEEP = "Request JSON is nested too deeply (at most 255 levels)"


Encoder = Callable[[Request], bytes]  # the upstream dialect's encoder (default: Anthropic, see ``encode``)


async def prepare(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder = ANTHROPIC,
                  encoder: Encoder | None = None) -> None:
    span = gw.tracing.span
    try:
        with span("identify"):
            identify_tenant(ex, gw)
        big = _big(ex, gw)
        with span("decode"):
            if big and _replays(ex, gw, decoder):  # a big body, a small replay: taken on the loop
                big = not _replayed(ex, gw, decoder)
                # (what ``take`` could not continue from its match is decoded whole, in the thread)
                query = await off_loop(gw, True, _decoded_whole, ex, gw, decoder) if big else _queried(ex, gw)
            else:
                query = await off_loop(gw, big, _decoded, ex, gw, decoder)
        with span("load"):
            result = await load(ex, gw, query)
        await off_loop(gw, big, _finish, ex, gw, result, encoder)
    except (RecursionError, orjson.JSONEncodeError):
        raise bad_request(TOO_DEEP) from None


def _decoded(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder) -> LoadQuery | None:
    decode(ex, gw, decoder)
    return _queried(ex, gw)


def _decoded_whole(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder) -> LoadQuery | None:
    _decode_whole(ex, gw, decoder)
    return _queried(ex, gw)


def _queried(ex: Exchange, gw: Gateway) -> LoadQuery | None:
    header_conversation(ex)
    return load_query(ex, gw)


def _finish(ex: Exchange, gw: Gateway, result: LoadResult | None, encoder: Encoder | None) -> None:
    repair_and_sanitize(ex, gw, result)
    with gw.tracing.span("encode"):
        if encoder is None:
            encode(ex, gw)
        else:
            assert ex.request is not None
            ex.plan.outgoing = encoder(ex.request)


async def off_loop_if_big(ex: Exchange, gw: Gateway, work: Callable[[], T]) -> T:
    """``work()`` off the event loop when ``ex``'s body is big (``GATEWAY_OFFLOAD_BODY_KB``): a surface's own pass
    over the whole body (a cloud platform's body rewrite) keeps the loop as free as the stages do."""
    return await off_loop(gw, _big(ex, gw), work)


def _big(ex: Exchange, gw: Gateway) -> bool:
    """A request whose body is worked on off the event loop (``GATEWAY_OFFLOAD_BODY_KB``)."""
    kb = gw.settings.offload_body_kb
    return 0 < kb <= len(ex.client.raw_body) >> 10


def _replays(ex: Exchange, gw: Gateway, decoder: Decoder | ReplayDecoder) -> bool:
    """Whether a big body replays one this worker kept (``replay_memo``; the bytes compared here, on the loop, at C
    speed) with fewer new bytes than make a body big: its stages then stay on the loop, as a small body's do, since
    they parse only what it inserted and take the kept messages as they are (a 500-turn replay's stages: about 2 ms
    of Python, ``bench/stage_timer.py``; the memo keeps no entry of more than half its bound). A thread hop costs
    more than that work (``bench/cpu_ab.py --start``). One that ``take`` cannot continue after all goes to the
    thread (``prepare``)."""
    memo, tenant = gw.replay_memo, ex.identity.tenant
    if memo is None or tenant is None or not isinstance(decoder, ReplayDecoder):
        return False
    found = ex.continuation.match
    if found is None or found.scope != (tenant, decoder.kind):
        ex.continuation.match = memo.match(tenant, decoder.kind, ex.client.raw_body)
    return _small_replay(ex, gw)


def _small_replay(ex: Exchange, gw: Gateway) -> bool:
    """Whether the request replays a kept body (its match, ``_replays``) with fewer new bytes than make a body big."""
    found = ex.continuation.match
    return found is not None and found.entry is not None and \
        (len(ex.client.raw_body) - len(found.entry.body)) >> 10 < gw.settings.offload_body_kb


async def off_loop(gw: Gateway, big: bool, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``: on the event loop, or for a ``big`` body (``GATEWAY_OFFLOAD_BODY_KB``) in a thread, one such
    request at a time per worker, so that the loop goes on answering (``/healthz``, small requests) meanwhile. The
    per-worker state such work touches is thread-safe for it (``state.coherence``, ``replay_memo``); what it reads of
    the request is its own."""
    if not big:
        return work(*args)
    async with gw.offload:
        return await asyncio.to_thread(work, *args)


def served(ex: Exchange) -> None:
    """The request passed every check and goes upstream: counted as served without state when its load consulted no
    records (``ex.identity.stateless``). A request refused before (a 4xx or 503 of the gateway's own: a Responses
    ``previous_response_id`` or bare item reference that needs records there are none of) is not served, so not
    counted, whatever its load found."""
    if ex.identity.stateless is not None:
        metrics.observe_stateless(ex.identity.stateless)


async def record(ex: Exchange, gw: Gateway, turn: Turn) -> None:
    """Count the finished turn's tokens; store it (one round trip); never fails the request."""
    ex.plan.turn = turn
    if ex.identity.tenant is not None:
        gw.journal.note(ex.identity.tenant, turn.content)
    metrics.observe_tokens(turn.usage, ex.request.model if ex.request is not None else None,
                           gw.tenant_labels.of(ex.identity.tenant))
    metrics.observe_binding_drops(turn.extra.get("input_transformations"))
    if gw.store is None or ex.identity.tenant is None or ex.request is None:
        return
    if not ex.identity.stateful:
        if ex.identity.deferred is not None and gw.record_retry is not None:
            await _defer(ex, gw, turn)
        return
    with gw.tracing.span("record"):
        await _record(ex, gw, turn)


async def _defer(ex: Exchange, gw: Gateway, turn: Turn) -> None:
    """A turn served while the store was away: recorded in the background once it is back, into the conversation
    its request's load finds then, at the place the request gave it (after the assistant messages it replayed; a
    place the store never received is filled in place: ``Store.record``)."""
    assert ex.request is not None and ex.identity.tenant is not None and ex.identity.deferred is not None
    assert gw.record_retry is not None
    ex.continuation.ticket = None
    big = _big(ex, gw)
    try:
        write = await off_loop(gw, big, _turn_write, ex, turn, None, big)
    except (ValueError, RecursionError, orjson.JSONEncodeError) as e:
        log.warning("deferred record failed (%s); turn not recorded", type(e).__name__)
        return
    position = sum(1 for m in ex.request.messages if m.role == "assistant")
    write = dataclasses.replace(write, scid=ex.identity.deferred.scid, expected_position=position)
    if gw.record_retry.submit(ex.identity.tenant, write, placed_by=ex.identity.deferred):
        log.info("store away: turn queued to be recorded once it is back")


async def _record(ex: Exchange, gw: Gateway, turn: Turn) -> None:
    assert gw.store is not None and ex.identity.tenant is not None and ex.request is not None
    # With its user messages untouched and any other change a new content list (``repair_and_sanitize``
    # dropped the ticket otherwise), a replay's kept prefix is already path-hashed (user messages only),
    # and the next request of the conversation may start with its messages (the replay memo keeps them).
    ticket, ex.continuation.ticket = ex.continuation.ticket, None
    write: TurnWrite | None = None
    try:
        # (a small replay's record hashes only its few new messages: small work, as its stages' was)
        big = _big(ex, gw) and not (ticket is not None and ticket.reused and _small_replay(ex, gw))
        write = await off_loop(gw, big, _turn_write, ex, turn, ticket, big)
        res = await gw.store.record(ex.identity.tenant, write)
    except (StoreError, ValueError, RecursionError, orjson.JSONEncodeError) as e:
        if isinstance(e, StoreUnavailable):
            gw.store_failed_at = time.monotonic()
        if isinstance(e, StoreUnavailable) and write is not None and gw.record_retry is not None \
                and gw.record_retry.submit(ex.identity.tenant, write):
            log.warning("store record failed (%s); turn retried in the background", type(e).__name__)
        else:
            log.warning("store record failed (%s); turn not recorded", type(e).__name__)
        return
    metrics.observe_record(res)
    ex.identity.scid, ex.plan.position = res.scid, res.position
    ex.plan.recorded = True
    if ticket is not None and gw.replay_memo is not None:
        continuation.stamp(ticket, res.head)
        gw.replay_memo.keep(ticket)
    tool_ids = [b.id for b in turn.content if isinstance(b, ToolUseBlock)]
    if tool_ids:
        gw.hints.learn(ex.identity.tenant, tool_ids, res.scid)


def _turn_write(ex: Exchange, turn: Turn, ticket: Ticket | None, encoded: bool) -> TurnWrite:
    """What ``_record`` stores: the turn with the prompt it answered, hashed and (``encoded``) encoded."""
    assert ex.request is not None
    path = ticket.path_hash() if ticket is not None else None
    msgs = ex.request.messages
    if ex.plan.prefix_added:  # what thinkgate inserted is recorded in the note, not as the client's prompt
        added = {id(m) for m in ex.plan.prefix_added}
        msgs = [m for m in msgs if id(m) not in added]
    rec = turn_record(turn, msgs, upstream=ex.route.upstream, dialect=ex.client.dialect, path=path,
                      prefix=ex.plan.prefix_note)
    ident = ex.identity
    return TurnWrite(record=rec, scid=ident.scid, expected_position=ident.expected_position,
                     fingerprints=[rec.prefix_fingerprint] if rec.prefix_fingerprint else [], fork=ident.fork,
                     encoded=encode_turn(rec) if encoded else None)


def with_gateway_meta(body: bytes, scid: str | None) -> bytes:
    """Non-stream JSON answers carry ``"_gateway": {"conversation_id": ...}``."""
    if scid is None:
        return body
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(data, dict):
        return body
    data["_gateway"] = {"conversation_id": scid}
    return orjson.dumps(data)


__all__ = ["Exchange", "LoadQuery", "prepare", "record"]

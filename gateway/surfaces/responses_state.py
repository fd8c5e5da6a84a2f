"""What the Responses surface reads of the records: the items bare references name, the conversation a
``previous_response_id`` names, and a recorded response (``GET /v1/responses/{id}``).

Response and item ids name the conversation and position of their turn (``openai_responses.ItemIds``), so any
replica finds them in the store, for the caller's tenant only (keys are tenant-scoped: another tenant's id is a
miss). A store that cannot answer is a 503: without it a reference cannot be served."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.datastructures import QueryParams

from gateway.app.deps import Gateway
from gateway.app.settings import Settings
from gateway.dialects.canonical import JSON
from gateway.dialects.responses import codec as responses
from gateway.errors import ClientError, GatewayError
from gateway.pipeline.exchange import Exchange
from gateway.pipeline.identify import tenant_of
from gateway.pipeline.repair.records import load_block, load_fields
from gateway.surfaces.reasoning_seal import Sealer, sealer
from state.records import ConversationState, TurnRecord
from state.store import Store, StoreError

UNAVAILABLE = "the conversation store is unavailable"


def answer_ids(ex: Exchange, previous: str | None) -> responses.ItemIds:
    """Where an answer is (to be) recorded: once recorded, where it was; before, where it is expected (the
    position after the previous response's, for a conversation continued by ``previous_response_id``)."""
    if ex.plan.recorded and ex.plan.position is not None and ex.identity.scid:
        return responses.ItemIds(ex.identity.scid, ex.plan.position)
    named = responses.parse_id(previous)
    expected = ex.identity.expected_position if ex.identity.expected_position is not None else \
        named.position + 1 if named is not None else 0
    return responses.ItemIds(ex.identity.scid or "", expected)


def sealer_of(settings: Settings, tenant: str | None) -> Sealer:
    """The tenant's sealer (``GATEWAY_PREVIOUS_SECRET`` opens too, during a rotation)."""
    return sealer(settings.secret, tenant, settings.previous_secret)


def continue_previous(ex: Exchange, previous: str | None) -> None:
    """A ``previous_response_id`` names the conversation to continue (read like the ``X-AG-Conversation-Id``
    header, which still wins); one this gateway did not mint is the API's 400."""
    if previous is None:
        return
    named = responses.parse_id(previous)
    if named is None or named.kind != "resp":
        raise responses.previous_not_found(previous)
    ex.identity.header_scid = named.scid
    ex.identity.branch_at = (named.scid, named.position)  # an earlier response of it: the conversation branches there


def check_previous(gw: Gateway, ex: Exchange, previous: str | None) -> None:
    """After identification: a ``previous_response_id`` is never answered from the request's new items alone. Served
    without records, it names nothing when nothing was recorded (the state machine off, or no store: the API's 400),
    and a store that did not answer is a 503 (as for a bare reference); with records, a conversation the tenant does
    not hold (a new one was started for it) is the API's 400. Refused, the request is not served: not counted as a
    stateless one (``pipeline.served`` runs after this)."""
    if previous is None:
        return
    if not ex.identity.stateful:
        if gw.store is None or ex.identity.tenant is None or not gw.settings.state_machine_enabled:
            raise responses.previous_not_found(previous)
        raise GatewayError(503, UNAVAILABLE, "api_error")
    if ex.identity.via != "header":
        raise responses.previous_not_found(previous)


async def _conversation(store: Store, tenant: str, scid: str) -> ConversationState | None:
    try:
        return await store.get_conversation(tenant, scid)
    except StoreError as e:
        raise GatewayError(503, UNAVAILABLE, "api_error") from e


def recorded_items(rec: TurnRecord, ids: responses.ItemIds, seal: Sealer, *,
                   include_encrypted: bool = True) -> list[dict[str, JSON]]:
    """A recorded turn's output items, as they were answered (summaries shown)."""
    return responses.output_items([load_block(d) for d in rec.content], ids, seal.seal,
                                  include_encrypted=include_encrypted, summary=True, provider=load_fields(rec.provider))


async def opened(gw: Gateway, ex: Exchange) -> tuple[Sealer, dict[str, dict[str, JSON]]]:
    """The tenant's sealer and the items the request body's bare references name (by id; a body that is not JSON:
    none, its decoder answers it)."""
    seal = sealer_of(gw.settings, ex.identity.tenant)
    try:
        body = orjson.loads(ex.client.raw_body)
    except orjson.JSONDecodeError:
        return seal, {}
    return seal, await resolve(gw.store, ex.identity.tenant, seal, responses.references_of(body))


async def resolve(store: Store | None, tenant: str | None, seal: Sealer, refs: list[str]) -> dict[str, dict[str, JSON]]:
    """The items bare references name, by id (those the tenant's records do not hold are left out). An id this
    gateway did not mint (a Responses upstream's own reasoning item's) is looked for in the conversations the
    request's other references name."""
    parsed = [p if (p := responses.parse_id(ref)) is not None and p.index is not None else None for ref in refs]
    named = [p for p in parsed if p is not None]
    if not named or store is None or tenant is None:
        return {}
    foreign = {ref for ref in refs if responses.parse_id(ref) is None}  # an upstream's own ids (its reasoning items)
    out: dict[str, dict[str, JSON]] = {}
    for scid in {p.scid for p in named}:
        conv = await _conversation(store, tenant, scid)
        if conv is None:
            continue
        wanted = {ref: p.position for ref, p in zip(refs, parsed, strict=True) if p is not None and p.scid == scid}
        turns = conv.turns if foreign - set(out) else \
            [rec for pos in set(wanted.values()) if (rec := conv.turn_at(pos)) is not None]
        for rec in turns:
            ids = responses.ItemIds(scid, rec.position or 0)
            items = {str(item["id"]): item for item in recorded_items(rec, ids, seal)}
            out.update((ref, items[ref]) for ref in wanted.keys() & items.keys())
            # a Responses upstream's own id (an earlier release showed its reasoning items as minted): the
            # gateway's item, looked for in the conversations the request's other references name
            aliases = responses.minted_ids([load_block(d) for d in rec.content], ids) if foreign else {}
            out.update((ref, items[aliases[ref]]) for ref in foreign & set(aliases) if aliases[ref] in items)
    return out


async def recorded_response(store: Store | None, tenant: str, rid: str, seal: Sealer, *,
                            include_encrypted: bool) -> dict[str, JSON] | None:
    """The Response object of a recorded turn (the record keeps no request parameters or usage: those are the
    API's defaults), or None."""
    named = responses.parse_id(rid)
    if store is None or named is None or named.kind != "resp":
        return None
    conv = await _conversation(store, tenant, named.scid)
    rec = conv.turn_at(named.position) if conv is not None else None
    if rec is None:
        return None
    ids = responses.ItemIds(named.scid, named.position)
    return responses.response_object(ids.response, model=rec.model, created_at=int(rec.created_at),
                                     echo=dict(responses.ECHOED), scid=named.scid,
                                     output=recorded_items(rec, ids, seal, include_encrypted=include_encrypted))


async def read_response(gw: Gateway, rid: str, headers: Mapping[str, str], query: QueryParams) -> dict[str, JSON]:
    """``GET /v1/responses/{id}``: a recorded response, for its tenant only (another tenant's is indistinguishable
    from an unknown one: 404); ``?include[]=reasoning.encrypted_content`` adds the sealed content."""
    tenant = tenant_of(gw.settings.secret, {k.lower(): v for k, v in headers.items()})
    if tenant is None:
        raise ClientError(401, "an API key (Authorization: Bearer) is required", "authentication_error")
    include = query.getlist("include[]") + query.getlist("include")
    body = await recorded_response(gw.store, tenant, rid, sealer_of(gw.settings, tenant),
                                   include_encrypted=responses.ENCRYPTED in include)
    if body is None:
        raise ClientError(404, f"Response with id '{rid}' not found.", "invalid_request_error")
    return body

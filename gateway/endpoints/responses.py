"""OpenAI ``POST /v1/responses``: to whichever upstream the routing table names (``dialects``), answered as a Response
object or the Responses event stream (``protocols.openai_responses*``); ``GET /v1/responses/{id}``: a recorded one.

The ids name where the turn is recorded (``openai_responses.ItemIds``): ``previous_response_id`` names the
conversation (read like the ``X-AG-Conversation-Id`` header: its history is rebuilt from the records), and bare
item references are looked up in it before decoding, on any replica, for the caller's tenant only."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import pipeline, surfaces
from gateway.endpoints.common import gateway_of
from gateway.endpoints.handler import Codec, Relay, endpoint, unreadable
from gateway.errors import ClientError, GatewayError
from gateway.identity import tenant_of
from gateway.protocols import openai_responses as responses
from gateway.protocols.canonical import JSON, Request, Turn
from gateway.protocols.openai_responses_stream import MEDIA_TYPE, StreamEncoder
from gateway.reasoning_seal import Sealer, sealer
from gateway.records import load_block
from gateway.streaming.accumulate import Snapshot
from gateway.upstream import UpstreamResponse
from state.store import Store, StoreError

UNAVAILABLE = "the conversation store is unavailable"


class Responses(Codec):
    surface, hides = surfaces.RESPONSES, frozenset({"content-type"})  # (the answer is re-encoded)
    parsed: responses.ResponsesRequest
    resolved: dict[str, dict[str, JSON]]

    def sealer(self) -> Sealer:
        settings = self.gw.settings
        return sealer(settings.secret, self.ex.tenant, settings.previous_secret)

    async def prepare(self) -> None:
        pipeline.identify_tenant(self.ex, self.gw)
        try:
            body = orjson.loads(self.ex.raw_body)
        except orjson.JSONDecodeError:
            body = None  # (the pipeline's decoder answers it)
        self.resolved = await resolve(self.gw.store, self.ex.tenant, self.sealer(), responses.references_of(body))
        await super().prepare()
        prev = self.parsed.previous_response_id
        if prev is not None and self.ex.stateful and self.ex.via != "header":
            raise ClientError(400, f"Previous response with id '{prev}' not found.", "invalid_request_error",
                              "previous_response_not_found")

    def decode(self, body: Any) -> Request:
        self.parsed = responses.decode_request(body, self.sealer().unseal, self.resolved)
        prev = self.parsed.previous_response_id
        if prev is not None:
            named = responses.parse_id(prev)
            if named is None or named.kind != "resp":
                raise ClientError(400, f"Previous response with id '{prev}' not found.", "invalid_request_error",
                                  "previous_response_not_found")
            self.ex.header_scid = named.scid  # the X-AG-Conversation-Id header still wins
        return self.parsed.request

    def item_ids(self) -> responses.ItemIds:
        """Where the answer is (to be) recorded: once recorded, where it was; before, where it is expected."""
        ex = self.ex
        if ex.recorded and ex.position is not None and ex.scid:
            return responses.ItemIds(ex.scid, ex.position)
        named = responses.parse_id(self.parsed.previous_response_id)
        expected = ex.expected_position if ex.expected_position is not None else \
            named.position + 1 if named is not None else 0
        return responses.ItemIds(ex.scid or "", expected)

    def completion(self, resp: UpstreamResponse, body: bytes, turn: Turn | None) -> Response:
        p = self.parsed
        answer = responses.encode_response(turn or unreadable(), self.item_ids(), self.sealer().seal, echo=p.echo,
                                           created_at=int(time.time()), include_encrypted=p.include_encrypted,
                                           summary=p.summary, scid=self.ex.scid)
        return self.respond(orjson.dumps(answer), 200, self.headers(resp))

    def stream(self) -> Relay:
        p = self.parsed
        encoder = StreamEncoder(snap := Snapshot(), ids=self.item_ids(), final=lambda: (self.item_ids(), self.ex.scid),
                                seal=self.sealer().seal_stored, model=p.request.model, created_at=int(time.time()),
                                echo=p.echo, include_encrypted=p.include_encrypted, summary=p.summary,
                                scid=self.ex.scid)
        return encoder, MEDIA_TYPE, snap


async def resolve(store: Store | None, tenant: str | None, seal: Sealer, refs: list[str]) -> dict[str, dict[str, JSON]]:
    """The items bare references name, from the tenant's records (those it cannot find are left out)."""
    named = [p for ref in refs if (p := responses.parse_id(ref)) is not None and p.index is not None]
    if not named or store is None or tenant is None:
        return {}
    out: dict[str, dict[str, JSON]] = {}
    for scid in {p.scid for p in named}:
        try:
            conv = await store.get_conversation(tenant, scid)
        except StoreError as e:
            raise GatewayError(503, UNAVAILABLE, "api_error") from e
        for p in (p for p in named if p.scid == scid and conv is not None):
            items = recorded_items(conv.turn_at(p.position) if conv else None, responses.ItemIds(scid, p.position),
                                   seal)
            if p.index is not None and p.index < len(items) and items[p.index]["id"] == f"{p.kind}_{scid}." \
                    f"{p.position}.{p.index}":
                out[items[p.index]["id"]] = items[p.index]
    return out


def recorded_items(rec: Any, ids: responses.ItemIds, seal: Sealer) -> list[dict[str, JSON]]:
    if rec is None:
        return []
    return responses.output_items([load_block(d) for d in rec.content], ids, seal.seal, include_encrypted=True,
                                  summary=True)


async def response_get(request: HTTPRequest) -> Response:
    """A recorded response, for its tenant only: another tenant's is indistinguishable from an unknown one (404)."""
    gw = gateway_of(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    tenant = tenant_of(gw.settings.secret, headers)
    if tenant is None:
        raise ClientError(401, "an API key (Authorization: Bearer) is required", "authentication_error")
    rid = request.path_params["response_id"]
    named = responses.parse_id(rid)
    conv = None
    if gw.store is not None and named is not None and named.kind == "resp":
        try:
            conv = await gw.store.get_conversation(tenant, named.scid)
        except StoreError as e:
            raise GatewayError(503, UNAVAILABLE, "api_error") from e
    rec = conv.turn_at(named.position) if conv is not None and named is not None else None
    if rec is None or named is None:
        raise ClientError(404, f"Response with id '{rid}' not found.", "invalid_request_error")
    ids = responses.ItemIds(named.scid, named.position)
    include = responses.ENCRYPTED in request.query_params.getlist("include[]") + request.query_params.getlist(
        "include")
    output = responses.output_items([load_block(d) for d in rec.content], ids,
                                    sealer(gw.settings.secret, tenant, gw.settings.previous_secret).seal,
                                    include_encrypted=include, summary=True)
    body = responses.response_object(ids.response, model=rec.model, created_at=int(rec.created_at),
                                     echo=dict(responses.ECHOED), output=output, scid=named.scid)
    return Response(orjson.dumps(body), media_type="application/json")


create_response = endpoint(Responses)

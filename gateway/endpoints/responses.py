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
from gateway.responses_state import UNAVAILABLE, answer_ids, recorded_response, resolve
from gateway.streaming.accumulate import Snapshot
from gateway.upstream import UpstreamResponse


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
        if prev is None:
            return
        if not self.ex.stateful:  # no records to rebuild the conversation from: never the new items alone
            raise self.no_records(prev)
        if self.ex.via != "header":
            raise responses.previous_not_found(prev)

    def no_records(self, prev: str) -> GatewayError:
        """A ``previous_response_id`` served without records: nothing was recorded (the state machine off, or no
        store) names nothing, as the API answers an unknown id; a store that did not answer is a 503 (as for a bare
        reference, ``responses_state``)."""
        gw = self.gw
        if gw.store is None or self.ex.tenant is None or not gw.settings.state_machine_enabled:
            return responses.previous_not_found(prev)
        return GatewayError(503, UNAVAILABLE, "api_error")

    def decode(self, body: Any) -> Request:
        self.parsed = responses.decode_request(body, self.sealer().unseal, self.resolved)
        prev = self.parsed.previous_response_id
        if prev is not None:
            named = responses.parse_id(prev)
            if named is None or named.kind != "resp":
                raise responses.previous_not_found(prev)
            self.ex.header_scid = named.scid  # the X-AG-Conversation-Id header still wins
        return self.parsed.request

    def item_ids(self) -> responses.ItemIds:
        return answer_ids(self.ex, self.parsed.previous_response_id)

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


async def response_get(request: HTTPRequest) -> Response:
    """A recorded response, for its tenant only: another tenant's is indistinguishable from an unknown one (404)."""
    gw = gateway_of(request)
    tenant = tenant_of(gw.settings.secret, {k.lower(): v for k, v in request.headers.items()})
    if tenant is None:
        raise ClientError(401, "an API key (Authorization: Bearer) is required", "authentication_error")
    rid = request.path_params["response_id"]
    include = responses.ENCRYPTED in request.query_params.getlist("include[]") + request.query_params.getlist(
        "include")
    seal = sealer(gw.settings.secret, tenant, gw.settings.previous_secret)
    body = await recorded_response(gw.store, tenant, rid, seal, include_encrypted=include)
    if body is None:
        raise ClientError(404, f"Response with id '{rid}' not found.", "invalid_request_error")
    return Response(orjson.dumps(body), media_type="application/json")


create_response = endpoint(Responses)

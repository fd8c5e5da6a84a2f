"""OpenAI ``POST /v1/responses``: to whichever upstream the routing table names, answered as a Response object or the
Responses event stream (``dialects.responses``). Ids, references and ``previous_response_id`` are read from the
records by ``responses_state`` (``GET /v1/responses/{id}``: ``response_get``)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.dialects.accumulate import Snapshot
from gateway.dialects.canonical import Request, Turn
from gateway.dialects.responses import codec as responses
from gateway.dialects.responses.stream import MEDIA_TYPE, StreamEncoder
from gateway.pipeline import stages as pipeline
from gateway.surfaces import responses_state
from gateway.surfaces import table as surfaces
from gateway.surfaces.handler import Codec, Relay, endpoint, unreadable
from gateway.transport.upstream import UpstreamResponse


class Responses(Codec):
    surface, hides = surfaces.RESPONSES, frozenset({"content-type"})  # (the answer is re-encoded)
    parsed: responses.ResponsesRequest

    async def prepare(self) -> None:
        pipeline.identify_tenant(self.ex, self.gw)
        self.seal, self.resolved = await responses_state.opened(self.gw, self.ex)
        await super().prepare()
        responses_state.check_previous(self.gw, self.ex, self.parsed.previous_response_id)

    def decode(self, body: Any) -> Request:
        self.parsed = responses.decode_request(body, self.seal.unseal, self.resolved,
                                               self.caps_of(body).adaptive_only)
        responses_state.continue_previous(self.ex, self.parsed.previous_response_id)
        return self.parsed.request

    def item_ids(self) -> responses.ItemIds:
        return responses_state.answer_ids(self.ex, self.parsed.previous_response_id)

    def completion(self, resp: UpstreamResponse, body: bytes, turn: Turn | None) -> Response:
        answer = responses.answer(self.parsed, turn or unreadable(), self.item_ids(), self.seal.seal, self.scid)
        return self.respond(orjson.dumps(answer), 200, self.headers(resp))

    def stream(self) -> Relay:
        encoder = StreamEncoder.answering(self.parsed, snap := Snapshot(), self.item_ids(), self.seal.seal,
                                          lambda: (self.item_ids(), self.scid), self.scid)
        return encoder, MEDIA_TYPE, snap


create_response = endpoint(Responses)

"""Anthropic ``POST /v1/messages``: every model goes to the Anthropic upstream (no routing); an untouched request goes
as the client sent it, the answer comes back as the upstream sent it (its headers; ``_gateway`` in a JSON answer)."""

from __future__ import annotations

from starlette.responses import Response

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Turn
from gateway.pipeline import stages as pipeline
from gateway.surfaces import table as surfaces
from gateway.surfaces.handler import Codec, Relay, endpoint
from gateway.transport.upstream import UpstreamResponse, forward_request_headers


class Messages(Codec):
    surface = surfaces.MESSAGES
    kinds = None  # not routed: every model goes to the Anthropic upstream
    media_type, hides, lifts = None, frozenset(), False  # the upstream's answer, with all its headers

    def decoder(self) -> pipeline.ReplayDecoder:
        return pipeline.ANTHROPIC

    def encoder(self) -> None:
        return None  # ``pipeline.encode``: byte for byte unless a stage changed the request

    def target(self) -> tuple[str, dict[str, str], str]:
        return "/v1/messages", forward_request_headers(self.client_headers()), self.ex.query

    def relays(self, body: bytes) -> bool:
        return True

    def completion(self, resp: UpstreamResponse, body: bytes, turn: Turn | None) -> Response:
        return self.respond(pipeline.with_gateway_meta(body, self.ex.scid), 200, self.headers(resp), None)

    def stream(self) -> Relay:
        return anthropic.StreamEncoder(self.ex.scid), None, None


messages = endpoint(Messages)

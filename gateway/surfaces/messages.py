"""Anthropic ``POST /v1/messages``: every model goes to the Anthropic upstream (no routing), but Claude that a route
puts on a cloud platform (Bedrock, Vertex AI: ``Codec.platforms``); an untouched request goes as the client sent it,
the answer comes back as the upstream sent it (its headers; ``_gateway`` in a JSON answer)."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Turn
from gateway.pipeline import stages as pipeline
from gateway.surfaces import table as surfaces
from gateway.surfaces.common import UPSTREAM_DIALECTS
from gateway.surfaces.handler import UNROUTED, Codec, Relay, endpoint
from gateway.transport.upstream import UpstreamResponse, forward_request_headers


class Messages(Codec):
    surface = surfaces.MESSAGES
    kinds = None  # not routed: every model goes to the Anthropic upstream (or Claude's cloud platform)
    platforms = True
    media_type, hides = None, frozenset()  # the upstream's answer, with all its headers

    def decoder(self) -> pipeline.ReplayDecoder:
        return pipeline.ANTHROPIC

    def encoder(self) -> None:
        return None  # ``pipeline.encode``: byte for byte unless a stage changed the request

    def target(self) -> tuple[str, dict[str, str], str]:
        if self.call.caps is not UNROUTED:  # (Claude on a cloud platform: its path, its credential)
            return super().target()
        return "/v1/messages", forward_request_headers(self.client_headers()), self.ex.client.query

    def relays(self, body: bytes) -> bool:
        """The Anthropic upstream's errors as they came; a platform's, when they are Anthropic's (Vertex's)."""
        return self.call.caps is UNROUTED or anthropic.is_error_body(body)

    def completion(self, resp: UpstreamResponse, body: bytes, turn: Turn | None) -> Response:
        reshape = UPSTREAM_DIALECTS[self.call.caps.kind].as_messages
        if reshape is not None:  # (Converse's answer, as the Messages API's)
            body = orjson.dumps(reshape(pipeline.parse_json(body), self.call))
        return self.respond(pipeline.with_gateway_meta(body, self.scid), 200, self.headers(resp), None)

    def stream(self) -> Relay:  # (a platform's framing is not the client's: server-sent events, named)
        media = None if self.call.caps is UNROUTED else "text/event-stream"
        return anthropic.StreamEncoder(self.scid), media, None


messages = endpoint(Messages)

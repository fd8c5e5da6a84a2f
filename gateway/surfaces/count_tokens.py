"""Anthropic ``POST /v1/messages/count_tokens`` through the handler every surface runs: what ``/v1/messages`` gets
(no routing, but Claude on a cloud platform is counted there: ``upstreams.Counting``; one credential per request; a
binding 400 retried once, ``pipeline.strip_bound``; a prefix-binding model's body through the stages, docs/upstream-
rules.md "thinking-block binding"), the answer as it came. Nothing is recorded."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Request
from gateway.pipeline import stages as pipeline
from gateway.surfaces import table as surfaces
from gateway.surfaces.common import count_answer, count_body, count_target, counting_of
from gateway.surfaces.handler import Codec, endpoint
from gateway.transport.upstream import UpstreamResponse, forward_request_headers


class CountTokens(Codec):
    surface = surfaces.COUNT_TOKENS
    kinds = None  # not routed: every model goes to the Anthropic upstream (or Claude's cloud platform, which counts)
    platforms = True
    hides = frozenset()  # the upstream's answer, with all its headers
    may_stream, as_it_came = False, True  # a count, whatever ``stream`` says; as it came unless bound (``prepare``)

    def decode(self, body: Any) -> Request:
        return anthropic.decode_request(body)  # (not the replay memo's: nothing of this request is kept)

    def encoder(self) -> None:
        return None  # ``pipeline.encode``: byte for byte unless a stage changed the request

    def target(self) -> tuple[str, dict[str, str], str]:
        return count_target(self.call, self.client_headers()) or (
            "/v1/messages/count_tokens", forward_request_headers(self.client_headers()), self.ex.client.query)

    def outgoing(self) -> bytes:
        return count_body(self.call, self.ex.plan.outgoing, self.ex.client.headers)

    def relays(self, body: bytes) -> bool:  # (a platform's error: in the Messages API's envelope)
        return counting_of(self.call) is None or anthropic.is_error_body(body)

    async def answer(self, resp: UpstreamResponse, body: bytes) -> Response:
        """The count (a platform's in the Messages API's form) or the error; no conversation id: nothing recorded."""
        if resp.status != 200:
            return self.error(resp, body)
        counted = count_answer(self.call, pipeline.parse_json(body))
        return self.respond(body, 200, self.headers(resp), None) if counted is None else self.respond(counted, 200)


count_tokens = endpoint(CountTokens)

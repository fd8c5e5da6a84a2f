"""Anthropic ``POST /v1/messages/count_tokens``: the body forwarded, the answer returned as it came, through the
handler every surface runs, so it gets what ``/v1/messages`` gets: no routing (but a Claude model a route puts on a
cloud platform is counted there, the platform's way: ``upstreams.Counting``); one credential per request; a body
that is not a request is a 400 in Anthropic's envelope; a binding 400 is retried once without the stale thinking
blocks (``pipeline.strip_bound``). On a model that binds thinking to its prefix the upstream checks the binding here
too (docs/upstream-rules.md, "thinking-block binding"): the body goes through the stages of ``/v1/messages``
(``pipeline.prepare``: the prefix kept, or ``drop_block``). Nothing is recorded."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Request
from gateway.errors import ClientError
from gateway.pipeline import stages as pipeline
from gateway.surfaces import table as surfaces
from gateway.surfaces.handler import UNROUTED, Codec, endpoint
from gateway.surfaces.upstreams import UPSTREAM_DIALECTS, Counting
from gateway.transport.upstream import UpstreamResponse, forward_request_headers


class CountTokens(Codec):
    surface = surfaces.COUNT_TOKENS
    kinds = None  # not routed: every model goes to the Anthropic upstream (or Claude's cloud platform, which counts)
    platforms = True
    hides = frozenset()  # the upstream's answer, with all its headers
    may_stream = False  # the answer is a count, whatever the body's ``stream`` says

    def decode(self, body: Any) -> Request:
        return anthropic.decode_request(body)  # (not the replay memo's: nothing of this request is kept)

    def encoder(self) -> None:
        return None  # ``pipeline.encode``: byte for byte unless a stage changed the request

    async def prepare(self) -> None:
        ex, gw = self.ex, self.gw
        body = pipeline.parse_json(ex.raw_body)
        if self.caps_of(body).prefix_bound:
            await super().prepare()  # (which identifies the tenant first, as below)
            return
        pipeline.identify_tenant(ex, gw)  # one credential per request, before anything is forwarded
        ex.request = self.routed(self.decode(body))  # decoded, so that a binding 400 can be retried; sent as it came
        ex.outgoing = ex.raw_body

    def counting(self) -> Counting | None:
        """A cloud platform's way of counting (None: the Anthropic upstream's ``count_tokens``)."""
        if self.call.caps is UNROUTED:
            return None
        found = UPSTREAM_DIALECTS[self.call.caps.kind].counting
        if found is None:
            raise ClientError(400, f"token counting is not available for {self.call.req.model[:200]} on its upstream",
                              "invalid_request_error")
        return found

    def target(self) -> tuple[str, dict[str, str], str]:
        if (counting := self.counting()) is not None:
            return counting.path(self.call), UPSTREAM_DIALECTS[self.call.caps.kind].headers(self.client_headers()), ""
        return "/v1/messages/count_tokens", forward_request_headers(self.client_headers()), self.ex.query

    def outgoing(self) -> bytes:
        counting = self.counting()
        return self.ex.outgoing if counting is None else counting.body(self.ex.outgoing, self.ex.headers, self.call)

    async def answer(self, resp: UpstreamResponse, body: bytes) -> Response:
        """The count, or the upstream's error, as it came (no conversation id: nothing was recorded); a cloud
        platform's in the Messages API's form."""
        counting = self.counting()
        if counting is None or (resp.status != 200 and anthropic.is_error_body(body)):
            return Response(body, status_code=resp.status, headers=self.headers(resp))
        if resp.status != 200:
            return self.error(resp, body)
        return self.respond(orjson.dumps(counting.answer(pipeline.parse_json(body))), 200)


count_tokens = endpoint(CountTokens)

"""OpenAI ``POST /v1/chat/completions`` to the upstream the routing table names, answered as ``chat.completion`` (SSE)
chunks, opaque reasoning sealed (``openai_compat.Seals``); a ``ReplayDecoder`` (``continuation.replay_memo``)."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.responses import Response

from gateway.dialects import openai_compat, registry, routing
from gateway.dialects.accumulate import Snapshot
from gateway.dialects.canonical import Message, Request, Turn
from gateway.dialects.openai_chat import codec as openai_chat
from gateway.dialects.openai_chat import messages as openai_chat_messages
from gateway.dialects.openai_chat import stream as openai_chat_stream
from gateway.pipeline import stages as pipeline
from gateway.surfaces import table as surfaces
from gateway.surfaces.handler import Codec, Relay, endpoint, unreadable
from gateway.transport.upstream import UpstreamResponse


class ChatCompletions(Codec):
    surface, hides = surfaces.CHAT_COMPLETIONS, frozenset({"content-type"})  # (the answer is re-encoded)

    def decoder(self) -> pipeline.ReplayDecoder:
        def decode(body: Any, kept: list[Message] | None) -> Request:  # (per the upstream: fields, parameters)
            body = self.ex.client.fields = openai_chat.chat_body(body)  # (Cursor's Responses-shaped body rewritten)
            caps = self.caps_of(body)  # the client's reasoning fields: provider data, or thinking (the dialect's)
            return openai_chat.decode_request(body, provider_fields=registry.of(caps).provider_fields, replayed=kept,
                                              route=routing.route_of(caps.kind), adaptive_only=caps.adaptive_only,
                                              drop_unsupported=self.gw.settings.drop_unsupported_params)
        return pipeline.ReplayDecoder("openai", decode, lambda body, kept, tail: openai_chat_messages.continue_messages(
            kept, tail, len(body["messages"]), provider_fields=registry.of(self.caps_of(body)).provider_fields))

    def completion(self, resp: UpstreamResponse, body: bytes, turn: Turn | None) -> Response:
        answer = openai_chat.encode_completion(turn or unreadable(), created=int(time.time()), scid=self.scid,
                                               exclude_reasoning=self.call.req.surface.exclude_reasoning,
                                               seal=openai_compat.sealer(self.gw.settings, self.ex.identity.tenant))
        return self.respond(orjson.dumps(answer), 200, self.headers(resp))

    def stream(self) -> Relay:
        usage = self.call.req.surface.include_usage
        encoder = openai_chat_stream.StreamEncoder(snap := Snapshot(), created=int(time.time()), scid=self.scid,
                                                   exclude_reasoning=self.call.req.surface.exclude_reasoning,
                                                   include_usage=usage, seal=openai_compat.sealer(self.gw.settings,
                                                                                                  self.ex.identity.tenant))
        return encoder, "text/event-stream", snap


chat_completions = endpoint(ChatCompletions)

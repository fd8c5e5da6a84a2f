"""Augment ``POST /gateway/chat-stream``: to whichever upstream the routing table names (``dialects``), always as a
stream, answered as NDJSON chunks (``dialects.augment.stream``: any upstream's reasoning streams as THINKING nodes).
The conversation is the body's ``conversation_id`` when it is a valid SCID (the ``X-AG-Conversation-Id`` header wins);
a known one the client replays none of is rebuilt from the records. The upstream's errors are relayed as they came."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from gateway.dialects.augment import codec as augment
from gateway.dialects.augment import stream as augment_stream
from gateway.dialects.canonical import Request
from gateway.errors import GatewayError
from gateway.surfaces import table as surfaces
from gateway.surfaces.handler import JSON, Codec, Relay, endpoint
from gateway.transport.upstream import UpstreamResponse
from state.keys import is_valid_scid

ADVICE = ("request-id", "retry-after", "x-should-retry")  # relayed with an error, so a client can honour a 429/529's


class ChatStream(Codec):
    surface = surfaces.CHAT_STREAM
    chat: augment.ChatRequest

    def decode(self, body: Any) -> Request:
        self.chat = augment.decode_chat_request(body)
        if is_valid_scid(self.chat.conversation_id):
            self.ex.identity.header_scid = self.chat.conversation_id  # the X-AG-Conversation-Id header still wins
        return self.chat.request

    async def answer(self, resp: UpstreamResponse, body: bytes) -> Response:
        if resp.status == 200:
            raise GatewayError(502, "the upstream answered without streaming", "api_error")
        headers = {k: v for k, v in resp.headers.items() if k in ADVICE}
        return self.respond(body, resp.status, headers, resp.headers.get("content-type", JSON))

    def stream(self) -> Relay:
        encoder = augment_stream.StreamEncoder(self.chat.tool_meta, tool_use_start=self.chat.tool_use_start)
        return encoder, augment_stream.MEDIA_TYPE, None


chat_stream = endpoint(ChatStream)

"""Gemini native ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``: re-encoded for the
Gemini upstream, the answer relayed as it came (JSON; SSE chunks, or a JSON array without ``?alt=sse``); errors keep
Google's envelope; the client's query (``?key=``) goes upstream too."""

from __future__ import annotations

from starlette.requests import Request as HTTPRequest

from gateway.access import admission
from gateway.dialects import registry
from gateway.dialects.gemini import parts as gemini_parts
from gateway.dialects.gemini import wire as gemini
from gateway.dialects.gemini import wire as gemini_stream
from gateway.errors import ClientError
from gateway.pipeline import stages as pipeline
from gateway.surfaces import table as surfaces
from gateway.surfaces.handler import JSON, Codec, Relay, endpoint

ACTIONS = ("generateContent", "streamGenerateContent")


class GenerateContent(Codec):
    surface, kinds, raw_events = surfaces.GENERATE_CONTENT, registry.speaking("gemini"), True  # streams the upstream's
    ids, relays = staticmethod(gemini_parts.deterministic_ids), staticmethod(gemini.is_google_error)

    def setup(self, request: HTTPRequest) -> None:
        self.model, _, action = request.path_params["rest"].rpartition(":")
        if action not in ACTIONS or not self.model:
            raise ClientError(404, f"models/{request.path_params['rest']} is not found for API version v1beta, or "
                                   "is not supported", "not_found_error")
        self.streams, self.sse = action == "streamGenerateContent", request.query_params.get("alt") == "sse"

    def decoder(self) -> pipeline.Decoder:
        return lambda body: gemini.decode_request(body, self.model, stream=self.streams)

    def target(self) -> tuple[str, dict[str, str], str]:
        path, headers, query = *super().target()[:2], admission.without_key_query(self.ex.client.query, self.grant)
        if registry.of(self.call.caps).platform:  # (its credential is its own: the client's query stays here)
            query = ""
        if self.streams and not self.sse:  # the upstream always streams SSE; the client gets the form it asked for
            query = f"{query}&alt=sse" if query else "alt=sse"
        return path, headers, query

    def stream(self) -> Relay:
        return gemini_stream.NativeStreamEncoder(sse=self.sse), "text/event-stream" if self.sse else JSON, None


generate_content = endpoint(GenerateContent)

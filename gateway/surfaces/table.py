"""The client surfaces: every path thinkgate serves a client protocol on, in one table.

A surface is one client protocol's endpoint: its metric label (also the ``Exchange``'s ``endpoint``), its
dialect (``Exchange.dialect``: the protocol's requests and stream events), the envelope its errors are rendered
in, the route paths the app serves it on, the path prefixes whose requests belong to it (so an unknown path under a
surface's prefix gets that surface's error shape and metric label) and, for Gemini, the query parameter a client
key may come in. The app's routes, the error dialect of a path and the metrics' endpoint labels are all read from here,
so they cannot drift apart. Data only: the handlers are bound to the labels in ``gateway.app.factory``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import Dialect
from gateway.vocab import ClientDialect, Endpoint


@dataclass(frozen=True, slots=True)
class Surface:
    label: Endpoint              # the metric's endpoint label and ``Exchange.endpoint``
    dialect: ClientDialect       # the client protocol (``Exchange.dialect``)
    routes: tuple[str, ...]      # starlette route paths
    prefixes: tuple[str, ...]    # path prefixes that belong to it (first match in ``SURFACES`` order wins)
    method: str = "POST"
    errors: Dialect = "anthropic"  # the envelope of the errors the app renders for it (``errors.render_error``)
    # (query parameter, header): a client key sent in the query, taken as that header when no other is sent
    key_query: tuple[str, str] | None = None
    exact: tuple[str, ...] = ()  # paths that belong to it exactly (not their sub-paths)
    by_headers: bool = False     # its errors follow the client's headers (``dialect_for_request``)


# ``GET /v1/models`` is OpenAI's and Anthropic's path both: the answer's shape (and an error's) follows the headers
MODELS = Surface("models", "openai", ("/v1/models",), (), method="GET", errors="openai", exact=("/v1/models",),
                 by_headers=True)
GEMINI_MODELS = Surface("models", "gemini", ("/v1beta/models",), (), method="GET", errors="gemini",
                        exact=("/v1beta/models",))
COUNT_TOKENS = Surface("count_tokens", "anthropic", ("/v1/messages/count_tokens",), ("/v1/messages/count_tokens",))
MESSAGES = Surface("messages", "anthropic", ("/v1/messages",), ("/v1/messages",))
CHAT_COMPLETIONS = Surface("chat_completions", "openai", ("/v1/chat/completions",), ("/v1/chat/completions",),
                           errors="openai")
GENERATE_CONTENT = Surface("generate_content", "gemini", ("/v1beta/models/{rest:path}", "/v1/models/{rest:path}"),
                           ("/v1beta", "/v1/models/"), errors="gemini", key_query=("key", "x-goog-api-key"))
# One model by id (the SDKs' ``models.retrieve`` / ``models.get``), on the paths above with GET: ``/v1/models/{id}`` is
# OpenAI's, Anthropic's and Gemini's v1 (the headers say whose), ``/v1beta/models/{id}`` Gemini's
MODEL_GET = Surface("models", "openai", ("/v1/models/{model_id:path}",), ("/v1/models/",), method="GET",
                    errors="gemini", by_headers=True)
GEMINI_MODEL_GET = Surface("models", "gemini", ("/v1beta/models/{model_id:path}",), ("/v1beta/models/",),
                           method="GET", errors="gemini")
# Augment's JSON errors (before its stream starts) are Anthropic-shaped; errors within the stream are its own lines
CHAT_STREAM = Surface("chat_stream", "augment", ("/gateway/chat-stream",), ("/gateway/chat-stream",))
# OpenAI Responses: ``POST /v1/responses`` and ``GET /v1/responses/{id}`` (a recorded one)
RESPONSE_GET = Surface("response_get", "responses", ("/v1/responses/{response_id}",), ("/v1/responses/",),
                       method="GET", errors="openai")
RESPONSES = Surface("responses", "responses", ("/v1/responses",), ("/v1/responses",), errors="openai")
CONVERSATION_EXPORT = Surface("conversation_export", "anthropic", ("/gateway/conversations/{scid}",),
                              ("/gateway/conversations/",), method="GET")

SURFACES: tuple[Surface, ...] = (MODELS, GEMINI_MODELS, COUNT_TOKENS, MESSAGES, CHAT_COMPLETIONS, GENERATE_CONTENT,
                                 MODEL_GET, GEMINI_MODEL_GET, CHAT_STREAM, RESPONSE_GET, RESPONSES, CONVERSATION_EXPORT)


def surface_for_path(path: str, method: str | None = None) -> Surface | None:
    """The surface a request belongs to (None: none, e.g. ``/healthz``): of those whose paths hold ``path``, the first
    served with ``method``, else the first (a method no surface there takes: its 405 in that one's shape)."""
    found = [s for s in SURFACES if path in s.exact or path.startswith(s.prefixes)]
    return next((s for s in found if s.method == method), found[0] if found else None)


def dialect_by_headers(headers: Mapping[str, str], query: str = "") -> Dialect | None:
    """The protocol a client's headers name, as each official SDK sends them: ``anthropic-version`` (or
    ``x-api-key``) is Anthropic's, ``x-goog-api-key`` (or a ``key=`` query) Google's, a bearer token alone OpenAI's;
    None: no hint. Headers are lowercase."""
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    if "x-goog-api-key" in headers or any(p.startswith("key=") for p in query.split("&")):
        return "gemini"
    if headers.get("authorization", "").lower().startswith("bearer "):
        return "openai"
    return None


def dialect_for_request(path: str, headers: Mapping[str, str], query: str = "", method: str | None = None) -> Dialect:
    """The dialect an error on a request is rendered in: its surface's (a surface shared by two protocols,
    ``by_headers``: the one the headers name, else its own); on a path no surface owns, the one the headers name,
    else Anthropic's."""
    surface = surface_for_path(path, method)
    if surface is not None and not surface.by_headers:
        return surface.errors
    named = dialect_by_headers(headers, query)
    if surface is not None:
        return named if named in ("anthropic", "openai") else surface.errors
    return named or "anthropic"

"""How Vertex AI is called: Claude at ``/publishers/anthropic/models/{model}:rawPredict`` (``:streamRawPredict``),
the Messages body without ``model`` and with ``anthropic_version: vertex-2023-10-16``, betas as the
``anthropic-beta`` header, Anthropic's answers, events and errors; Gemini at
``/publishers/google/models/{model}:generateContent`` (``:streamGenerateContent?alt=sse``), the Gemini API's
bodies. The base URL (``gateway.dialects.vertex``) holds the project and region."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

import orjson

VERSION = "vertex-2023-10-16"


def claude_path(model: str, stream: bool) -> str:
    return f"/publishers/anthropic/models/{quote(model, safe='@')}:{'streamRawPredict' if stream else 'rawPredict'}"


def gemini_path(model: str, stream: bool) -> str:
    action = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/publishers/google/models/{quote(model, safe='')}:{action}"


def claude_headers(client: Mapping[str, str]) -> dict[str, str]:
    """Only the client's betas: the credential is Google's (``token``), never the client's."""
    beta = client.get("anthropic-beta")
    return {"anthropic-beta": beta} if beta else {}


COUNT_PATH = "/publishers/anthropic/models/count-tokens:rawPredict"


def count_body(body: bytes, client: Mapping[str, str], model: str) -> bytes:
    """A count_tokens body as Vertex's ``count-tokens`` endpoint takes it: the model in the body, the Vertex version."""
    data = orjson.loads(body)
    if not isinstance(data, dict):
        return body
    return orjson.dumps({**data, "model": model, "anthropic_version": VERSION})


def finish(body: bytes, client: Mapping[str, str]) -> bytes:
    """A Messages request body as ``rawPredict`` takes it."""
    data = orjson.loads(body)
    if not isinstance(data, dict):
        return body
    data.pop("model", None)
    data["anthropic_version"] = VERSION
    return orjson.dumps(data)

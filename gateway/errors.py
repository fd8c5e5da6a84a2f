"""Gateway error types and the one place that renders them per client dialect."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal

import orjson

Dialect = Literal["anthropic", "openai", "gemini"]

# Anthropic error ``type`` by HTTP status (platform.claude.com/docs/en/api/errors).
ANTHROPIC_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    504: "api_error",
    529: "overloaded_error",
}

# OpenAI error ``type`` for an Anthropic error type (anything else keeps its name).
OPENAI_ERROR_TYPES: dict[str, str] = {
    "request_too_large": "invalid_request_error",
    "not_found_error": "invalid_request_error",
    "api_error": "server_error",
    "overloaded_error": "server_error",
    "timeout_error": "server_error",
}


@dataclass(slots=True)
class GatewayError(Exception):
    """An error thinkgate itself answers with (never a traceback)."""

    status: int
    message: str
    error_type: str | None = None
    code: str | None = None  # a machine-readable detail (OpenAI ``error.code``), e.g. model_not_supported
    headers: dict[str, str] | None = None  # headers the answer carries (``retry-after`` of a rate limit)

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class ClientError(GatewayError):
    """The client's request is malformed (4xx)."""


def bad_request(message: str) -> ClientError:
    return ClientError(400, message, "invalid_request_error")


def new_request_id() -> str:
    return "req_gw_" + secrets.token_hex(12)


def anthropic_error_body(status: int, message: str, error_type: str | None = None,
                         request_id: str | None = None) -> dict[str, object]:
    etype = error_type or ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": etype, "message": message},
        "request_id": request_id or new_request_id(),
    }


def openai_error_body(status: int, message: str, error_type: str | None = None,
                      code: str | None = None) -> dict[str, object]:
    """The OpenAI envelope; thinkgate's (Anthropic-named) error types map to OpenAI's, and the
    original type stays readable as ``code`` unless a more specific code is given."""
    etype = error_type or ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {"error": {"message": message, "type": OPENAI_ERROR_TYPES.get(etype, etype), "param": None,
                      "code": code or etype}}


_DIALECT_HEADERS = {"anthropic": "anthropic-ratelimit-", "openai": "x-ratelimit-"}


def dialect_headers(headers: dict[str, str], dialect: Dialect) -> dict[str, str]:
    """An error's headers as the client's dialect names them: another dialect's rate-limit headers left out."""
    own = _DIALECT_HEADERS.get(dialect)
    return {k: v for k, v in headers.items()
            if not any(k.startswith(p) for p in _DIALECT_HEADERS.values()) or (own and k.startswith(own))}


def render_error(dialect: Dialect, err: GatewayError, request_id: str | None = None) -> tuple[int, bytes]:
    """Render ``err`` as (status, JSON body) in the client's protocol shape."""
    if dialect == "anthropic":
        body: object = anthropic_error_body(err.status, err.message, err.error_type, request_id)
    elif dialect == "openai":
        body = openai_error_body(err.status, err.message, err.error_type, err.code)
    else:
        body = {"error": {"code": err.status, "message": err.message, "status": _google_status(err.status)}}
    return err.status, orjson.dumps(body)


# google.rpc.Code by HTTP status (googleapis/google/rpc/code.proto's "HTTP Mapping" lines). A method the path does not
# take (405) is UNIMPLEMENTED ("not implemented or is not supported/enabled in this service"), as grpc-gateway's
# routing error handler maps it (docs/upstream-rules.md, "Google error status").
GOOGLE_STATUS: dict[int, str] = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}


def _google_status(status: int) -> str:
    return GOOGLE_STATUS.get(status, "INTERNAL")


def upstream_error(status: int, body: bytes) -> GatewayError:
    """Any upstream's error body -> the same status, message and type, whatever its envelope:
    Anthropic ``{"type":"error","error":{...}}``, OpenAI ``{"error":{...}}``, Google's
    ``{"error":{...}}`` or ``[{"error":{...}}]``. OpenRouter's quoted provider error
    (``error.metadata.raw``) is kept in the message so the client sees the real cause."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, list) and data:
        data = data[0]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        message = err["message"]
        meta = err.get("metadata")
        raw = meta.get("raw") if isinstance(meta, dict) else None
        if isinstance(raw, str) and raw:
            message = f"{message}: {raw}"
        etype, code = err.get("type"), err.get("code")
        return GatewayError(status, message, etype if isinstance(etype, str) else None,
                            code if isinstance(code, str) else None)
    text = body.decode("utf-8", "replace").strip()[:500]
    return GatewayError(status, text or f"upstream answered HTTP {status}")

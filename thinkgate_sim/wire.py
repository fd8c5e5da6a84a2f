"""The simulator's own wire helpers: SSE framing and the Anthropic error envelope, as the real APIs send them. The
simulator imports nothing of the gateway it tests (a shared helper would hide a mistake both sides make)."""

from __future__ import annotations

import orjson

# The error ``type`` the Anthropic API names per HTTP status (docs.anthropic.com, "Errors": HTTP errors)
ERROR_TYPES: dict[int, str] = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                               404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                               429: "rate_limit_error", 500: "api_error", 502: "api_error", 504: "api_error",
                               529: "overloaded_error"}


def encode_event(event: str | None, data: object) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already bytes/str."""
    payload = data if isinstance(data, bytes) else data.encode() if isinstance(data, str) else orjson.dumps(data)
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + payload + b"\n\n"


def anthropic_error_body(status: int, message: str, error_type: str | None, request_id: str) -> dict[str, object]:
    """``{"type": "error", "error": {...}, "request_id": ...}`` as the Messages API answers an error."""
    return {"type": "error", "error": {"type": error_type or ERROR_TYPES.get(status, "api_error"), "message": message},
            "request_id": request_id}

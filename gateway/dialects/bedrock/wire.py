"""How Bedrock's InvokeModel is called and read: the path names the model, the body is the Messages body without
``model`` and ``stream``, with ``anthropic_version: bedrock-2023-05-31`` and the client's ``anthropic-beta`` header
as the body's ``anthropic_beta``; the streamed answer is AWS event-stream framing whose ``chunk`` events carry one
Anthropic stream event each, base64 encoded (botocore's event-stream parser reads the framing); an error is
``{"message": ...}`` with the exception's name in ``x-amzn-ErrorType``."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from gateway.dialects.anthropic import codec as anthropic
from gateway.errors import GatewayError

VERSION = "bedrock-2023-05-31"
STREAM_TYPE = "application/vnd.amazon.eventstream"


def model_path(model: str, action: str) -> str:
    """``/model/{modelId}/{action}``: the id (an inference profile ARN has ``:`` and ``/``) percent-encoded."""
    return f"/model/{quote(model, safe='')}/{action}"


def path(model: str, stream: bool) -> str:
    return model_path(model, "invoke-with-response-stream" if stream else "invoke")


def finish(body: bytes, client: Mapping[str, str]) -> bytes:
    """A Messages request body as InvokeModel takes it."""
    data = orjson.loads(body)
    if not isinstance(data, dict):
        return body
    data.pop("model", None)
    data.pop("stream", None)
    data["anthropic_version"] = VERSION
    asked = anthropic.betas(client)
    if asked:
        had = data.get("anthropic_beta")
        data["anthropic_beta"] = list(dict.fromkeys([*(had if isinstance(had, list) else []), *asked]))
    return orjson.dumps(data)


def count_path(model: str) -> str:
    return model_path(model, "count-tokens")


def count_body(body: bytes, client: Mapping[str, str]) -> bytes:
    """A count_tokens body as Bedrock's CountTokens takes it: the InvokeModel body (``max_tokens`` is required there:
    1 when the count names none), base64 as its blob type is on the JSON wire."""
    data = orjson.loads(finish(body, client))
    if isinstance(data, dict):
        data.setdefault("max_tokens", 1)
    return orjson.dumps({"input": {"invokeModel": {"body": base64.b64encode(orjson.dumps(data)).decode()}}})


def count_answer(body: Any) -> dict[str, Any]:
    """``{"inputTokens": N}`` as the Messages API's ``{"input_tokens": N}``."""
    return {"input_tokens": body.get("inputTokens", 0) if isinstance(body, dict) else 0}


def error(status: int, body: bytes) -> GatewayError:
    """Bedrock's ``{"message": ...}`` (a Claude rule broken: ``The model returned the following errors: <the
    Anthropic message>``) as our error, with the status and a type the client's dialect reads."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    message = data.get("message") or data.get("Message") if isinstance(data, dict) else None
    if not isinstance(message, str):
        message = body.decode("utf-8", "replace").strip()[:500] or f"Bedrock answered HTTP {status}"
    # (the type by status is the error renderer's; Bedrock's 503 is ServiceUnavailableException: overloaded)
    return GatewayError(status, message, "overloaded_error" if status == 503 else None)


class Event:
    """One decoded stream event for the translator (the JSON text of an Anthropic event)."""

    __slots__ = ("data",)

    def __init__(self, data: str) -> None:
        self.data = data


class EventStreamFraming:
    """Bytes of an event-stream body -> the Anthropic events its ``chunk`` messages carry; an ``exception`` message
    becomes an Anthropic ``error`` event (``overloaded_error`` for throttling and unavailability)."""

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer  # type: ignore[import-untyped]

        self._buffer = EventStreamBuffer()

    def feed(self, chunk: bytes) -> Iterator[Event]:
        from botocore.eventstream import ParserError

        self._buffer.add_data(chunk)
        try:
            for message in self._buffer:
                yield from _events(message.headers, message.payload)
        except ParserError as e:
            yield _error("api_error", f"upstream sent an invalid event stream: {type(e).__name__}")

    def flush(self) -> Iterator[Event]:
        return iter(())


def _events(headers: Mapping[str, Any], payload: bytes) -> Iterator[Event]:
    kind = headers.get(":message-type")
    if kind == "event" and headers.get(":event-type") == "chunk":
        try:
            part = orjson.loads(payload)
            data = base64.b64decode(part["bytes"], validate=True) if isinstance(part, dict) else None
        except (orjson.JSONDecodeError, KeyError, TypeError, binascii.Error):
            data = None
        yield Event(data.decode("utf-8", "replace")) if data is not None else _error(
            "api_error", "upstream sent an unreadable chunk")
    elif kind == "event":  # (a Converse event: its JSON under its name, for ``converse.ConverseTranslator``)
        try:
            payload_json = orjson.loads(payload) if payload else {}
        except orjson.JSONDecodeError:
            payload_json = None
        name = str(headers.get(":event-type") or "")
        yield Event(orjson.dumps({name: payload_json}).decode()) if isinstance(payload_json, dict) else _error(
            "api_error", "upstream sent an unreadable event")
    elif kind in ("exception", "error"):
        name = str(headers.get(":exception-type") or headers.get(":error-code") or "error")
        try:
            found = orjson.loads(payload)
            message = found.get("message") if isinstance(found, dict) else None
        except orjson.JSONDecodeError:
            message = None
        etype = "overloaded_error" if name in ("throttlingException", "serviceUnavailableException") else "api_error"
        yield _error(etype, f"{name}: {message}" if isinstance(message, str) else name)


def _error(etype: str, message: str) -> Event:
    return Event(orjson.dumps({"type": "error", "error": {"type": etype, "message": message}}).decode())


class Passthrough:
    """The translator of a stream whose events are Anthropic's already (one JSON object each)."""

    def feed(self, data: str) -> list[dict[str, Any]]:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
        return [event] if isinstance(event, dict) else []

    def end(self) -> list[dict[str, Any]]:
        return []

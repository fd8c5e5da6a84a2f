"""Logging: setup from settings (``GATEWAY_LOG_LEVEL``, ``GATEWAY_LOG_FORMAT=json|text``) and the one
structured line per client request.

The request line carries identifiers and decisions only: request id, tenant prefix (an HMAC of the
credential, never the credential), SCID, endpoint, upstream, model, status, durations, the kinds
of repair/sanitize actions with counts, whether records were consulted (``stateful``) and the
classified upstream error kind. Never an API key, a signature, thinking text or any other message
content. As a second line of defence every
formatted line passes through ``redact`` (bearer tokens, ``x-api-key`` values, ``sk-`` keys).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from gateway.pipeline.exchange import Exchange

ACCESS_LOGGER = "thinkgate.access"
FORMATS = ("json", "text")
_MAX_MODEL = 100
_SECRETS = re.compile(
    r"(?i)((?:authorization|x-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?|bearer\s+)[^\s\"',;}]+")
_SK = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}")

access = logging.getLogger(ACCESS_LOGGER)


@dataclass(slots=True)
class Observation:
    """What is learnt about one client request on its way (``gateway.ops.metrics`` fills it in)."""

    endpoint: str
    request_id: str
    started: float
    upstream: str = "none"
    upstream_status: int | None = None  # what the upstream answered (None: not reached)
    status: int = 0
    streaming: bool = False
    ttfb: float | None = None
    duration: float = 0.0
    upstream_error: str | None = None  # the classified kind, never the text
    exchange: Exchange | None = None


current: ContextVar[Observation | None] = ContextVar("thinkgate_observation", default=None)


def redact(text: str) -> str:
    return _SK.sub("sk-<redacted>", _SECRETS.sub(r"\1<redacted>", text))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and the record's ``fields`` (if any)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # U+2028/U+2029 are valid raw in JSON but end lines for tools that split on Unicode line breaks (issue 32)
        return redact(orjson.dumps(out, default=str).decode()).replace("\u2028", "\\u2028").replace(
            "\u2029", "\\u2029")


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...``, one line per record: a value a client controls (a model name,
    a path in a message) can neither start a line of its own nor forge a ``key=value``. Control characters in the
    message are escaped (``\\xNN``); a field value with anything but plain identifier characters is quoted
    (JSON string escapes). A traceback keeps its own lines (the server's, indented)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_CONTROL)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line += "".join(f" {k}={_text_value(v)}" for k, v in fields.items() if v is not None)
        return redact(line)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}  # str.translate: control characters escaped
_PLAIN = re.compile(r"[A-Za-z0-9._:/@+,<>-]+")  # a value written as it is (ids, labels, numbers, action counts)


def _text_value(v: Any) -> str:
    if isinstance(v, dict):
        text = ",".join(f"{k}:{n}" for k, n in v.items()) or "-"
    else:
        text = str(v)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


def configure(level: str = "INFO", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Install thinkgate's handler on the root logger (idempotent: replaces its own handler)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "thinkgate", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.thinkgate = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())


def request_fields(obs: Observation) -> dict[str, Any]:
    """The request line's fields: only identifiers, labels, numbers and action kinds."""
    fields: dict[str, Any] = {
        "request_id": obs.request_id, "endpoint": obs.endpoint, "upstream": obs.upstream,
        "upstream_status": obs.upstream_status, "status": obs.status,
        "duration_ms": round(obs.duration * 1000, 1),
        "ttfb_ms": round(obs.ttfb * 1000, 1) if obs.ttfb is not None else None,
        "upstream_error": obs.upstream_error,
    }
    exchange = obs.exchange
    if exchange is not None:
        req = exchange.request
        fields.update({
            "tenant": exchange.identity.tenant,
            "scid": exchange.identity.scid,
            "via": exchange.identity.via,
            "model": req.model[:_MAX_MODEL] if req is not None and isinstance(req.model, str) else None,
            "stream": req.is_stream if req is not None else None,
            "actions": dict(Counter(a.kind.value for a in exchange.plan.actions)),
            "recorded": exchange.plan.recorded,
            # False: served without state (state machine off, store down, no key)
            "stateful": exchange.identity.stateful,
        })
    return fields


def log_request(obs: Observation) -> None:
    """The one line per request (INFO on ``thinkgate.access``)."""
    if access.isEnabledFor(logging.INFO):
        access.info("request", extra={"fields": request_fields(obs)})

"""``gateway.ops.telemetry``: formats, redaction, the request line's fields, settings."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator

import pytest

from gateway.actions import Action, ActionKind
from gateway.app import cli
from gateway.app.settings import Settings, SettingsError
from gateway.dialects.canonical import Request
from gateway.ops import telemetry
from gateway.pipeline.exchange import ClientRequest, Exchange


def _observation() -> telemetry.Observation:
    ex = Exchange(ClientRequest(endpoint="messages", dialect="anthropic", request_id="req_gw_1",
                                headers={"x-api-key": "sk-ant-api03-secretsecret"}, query="",
                                raw_body=b'{"secret": 1}'))
    ex.request = Request(model="claude-opus-4-5", messages=[], stream=True)
    ex.identity.tenant, ex.identity.scid, ex.identity.via = "t" * 32, "s" * 22, "tool_id"
    ex.plan.actions = [Action(ActionKind.KEPT_VERIFIED, 1), Action(ActionKind.KEPT_VERIFIED, 3),
                  Action(ActionKind.DROPPED, 5, "thinking")]
    return telemetry.Observation("messages", "req_gw_1", 0.0, upstream="anthropic", upstream_status=400, status=400,
                            ttfb=0.0123, duration=0.5, upstream_error="invalid_signature", exchange=ex)


@contextlib.contextmanager
def configured(level: str, fmt: str) -> Iterator[io.StringIO]:
    """``logs.configure`` into a buffer; the root logger's level and handlers are restored after."""
    buf = io.StringIO()
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    try:
        telemetry.configure(level, fmt, stream=buf)
        yield buf
    finally:
        for h in list(root.handlers):
            if h not in saved_handlers:
                root.removeHandler(h)
        root.setLevel(saved_level)


def test_request_fields_carry_identifiers_and_decisions_only() -> None:
    fields = telemetry.request_fields(_observation())
    assert fields == {
        "request_id": "req_gw_1", "endpoint": "messages", "upstream": "anthropic", "upstream_status": 400,
        "status": 400,
        "duration_ms": 500.0, "ttfb_ms": 12.3, "upstream_error": "invalid_signature", "tenant": "t" * 32,
        "scid": "s" * 22, "via": "tool_id", "model": "claude-opus-4-5", "stream": True,
        "actions": {"kept_verified": 2, "dropped": 1}, "recorded": False, "stateful": False,
    }


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_configure_and_log_request(fmt: str) -> None:
    with configured("INFO", fmt) as buf:
        telemetry.configure("INFO", fmt, stream=buf)  # idempotent: one handler of ours
        assert sum(1 for h in logging.getLogger().handlers if getattr(h, "thinkgate", False)) == 1
        telemetry.log_request(_observation())
        logging.getLogger("thinkgate.test").debug("not at INFO")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    if fmt == "json":
        rec = json.loads(lines[0])
        assert rec["logger"] == "thinkgate.access" and rec["msg"] == "request" and rec["level"] == "info"
        assert rec["actions"] == {"kept_verified": 2, "dropped": 1} and rec["scid"] == "s" * 22
    else:
        assert " thinkgate.access request " in lines[0] and "actions=kept_verified:2,dropped:1" in lines[0]
    assert "sk-ant" not in lines[0] and "secret" not in lines[0]


@pytest.mark.parametrize("text", [
    "Authorization: Bearer abc.def-ghi",
    '{"x-api-key": "sk-ant-api03-AAAABBBB"}',
    "headers={'authorization': 'Bearer tok123'}",
    "key sk-ant-api03-0123456789abcdef in a message",
    "api_key=hunter2hunter2",
])
def test_redact(text: str) -> None:
    out = telemetry.redact(text)
    assert "<redacted>" in out
    for secret in ("abc.def-ghi", "AAAABBBB", "tok123", "0123456789abcdef", "hunter2"):
        assert secret not in out


def test_log_format_setting() -> None:
    assert Settings.from_env({}).log_format == "text"
    assert Settings.from_env({"GATEWAY_LOG_FORMAT": "json"}).log_format == "json"
    assert Settings.from_env({"GATEWAY_LOG_FORMAT": ""}).log_format == "text"
    with pytest.raises(SettingsError, match="GATEWAY_LOG_FORMAT"):
        Settings.from_env({"GATEWAY_LOG_FORMAT": "xml"})


def test_log_level_setting(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert Settings.from_env({}).log_level == "INFO"
    assert Settings.from_env({"GATEWAY_LOG_LEVEL": "warning"}).log_level == "WARNING"
    # WARNING: the access line (INFO) is suppressed, warnings still go out
    with configured(Settings.from_env({"GATEWAY_LOG_LEVEL": "WARNING"}).log_level, "json") as buf:
        telemetry.log_request(_observation())
        logging.getLogger("thinkgate.test").warning("still shown")
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [(r["logger"], r["msg"]) for r in lines] == [("thinkgate.test", "still shown")]

    # garbage is a clear startup error: `thinkgate serve` exits 2 naming the variable, before serving
    for bad in ("verbose", "10", "warn"):
        with pytest.raises(SettingsError, match="GATEWAY_LOG_LEVEL must be one of DEBUG, INFO, WARNING"):
            Settings.from_env({"GATEWAY_LOG_LEVEL": bad})
    monkeypatch.setenv("GATEWAY_LOG_LEVEL", "verbose")
    assert cli.main(["serve", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "GATEWAY_LOG_LEVEL must be one of" in err and "Traceback" not in err


@pytest.mark.parametrize("model", [
    "claude\n2026-11-26 10:00:00,000 INFO thinkgate.access request request_id=forged status=200",
    "claude\r\nstatus=200", "claude status=200", "claude\x1b[2Jcleared", "claude\u2028x", "m\"q\\",
])
def test_a_client_value_cannot_forge_a_line_or_a_field_in_the_text_format(model: str) -> None:
    """The model name is the client's: one line per request whatever it holds, and no ``status=200`` of its own
    (it is quoted, with JSON escapes); a message with control characters (a client's path) is escaped too."""
    obs = _observation()
    assert obs.exchange is not None and obs.exchange.request is not None
    obs.exchange.request.model = model
    with configured("INFO", "text") as buf:
        telemetry.log_request(obs)
        logging.getLogger("thinkgate.test").warning("unhandled error on POST %s", "/v1/messages\nFAKE line")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, lines
    fields = lines[0].split(" thinkgate.access request ", 1)[1]
    quoted = json.dumps(model)
    assert f" model={quoted} " in fields and json.loads(quoted) == model
    assert fields.count(" status=400") == 1 and " status=200" not in fields.replace(quoted, "")
    assert lines[1].endswith("unhandled error on POST /v1/messages\\x0aFAKE line")


@pytest.mark.parametrize("model", ["claude\u2028x", "claude\u2029y", "claude\nz"])
def test_a_json_line_stays_one_line_for_unicode_line_splitters(model: str) -> None:
    """Issue 32: the JSON log wrote U+2028/U+2029 raw; tools that split on Unicode line breaks (Python's
    ``splitlines``, JavaScript) saw extra lines. They are escaped, and the value reads back the same."""
    obs = _observation()
    assert obs.exchange is not None and obs.exchange.request is not None
    obs.exchange.request.model = model
    with configured("INFO", "json") as buf:
        telemetry.log_request(obs)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert json.loads(lines[0])["model"] == model

"""One request shape and one answer reader per client dialect (Anthropic, OpenAI, Augment, OpenAI Responses).

``send(url, dialect, prompt, stream=...)`` posts a minimal request whose first user message is
``prompt`` (so simulator markers work) and reads the answer, whatever it is, into an ``Outcome``:
the HTTP status, the error type in the Anthropic vocabulary (from the dialect's envelope or its
in-stream error event), whether the answer completed, and the headers. Every error envelope is
checked for its dialect's exact shape on the way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

MODEL = "claude-opus-4-5"
DIALECTS = ("anthropic", "openai", "augment", "responses")
PATHS = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions", "augment": "/gateway/chat-stream",
         "responses": "/v1/responses"}
SCID = "x-ag-conversation-id"
THINKING = {"type": "enabled", "budget_tokens": 2048}
_client: httpx.Client | None = None


def client() -> httpx.Client:
    """One pooled client for the suite (a new ``httpx.Client`` costs ~30 ms); closed by conftest."""
    global _client
    if _client is None:
        _client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=32))
    return _client


def close_client() -> None:
    global _client
    if _client is not None:
        _client.close()
        _client = None


@dataclass
class Outcome:
    status: int
    error: str | None          # Anthropic-vocabulary error type, None if the answer completed
    completed: bool
    headers: httpx.Headers
    in_stream: bool = False    # the error came as an in-stream event after a 200
    events: list[Any] = field(default_factory=list)

    @property
    def scid(self) -> str | None:
        return self.headers.get(SCID)


def body_for(dialect: str, prompt: str, *, stream: bool) -> dict[str, Any]:
    if dialect == "anthropic":
        return {"model": MODEL, "max_tokens": 4096, "thinking": THINKING, "stream": stream,
                "messages": [{"role": "user", "content": prompt}]}
    if dialect == "openai":
        return {"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": prompt}]}
    if dialect == "responses":
        return {"model": MODEL, "stream": stream, "input": prompt, "reasoning": {"effort": "low"}}
    return {"model": MODEL, "message": prompt, "chat_history": [], "max_tokens": 4096, "thinking": THINKING}


def headers_for(dialect: str, key: str) -> dict[str, str]:
    return {"x-api-key": key} if dialect == "anthropic" else {"authorization": f"Bearer {key}"}


def check_envelope(dialect: str, body: Any) -> str:
    """The error body's type (Anthropic vocabulary); asserts the dialect's envelope shape."""
    if dialect in ("openai", "responses"):
        assert isinstance(body, dict) and set(body) == {"error"}, body
        err = body["error"]
        assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str), body
        return str(err["code"])
    if dialect == "gemini":
        assert isinstance(body, dict) and set(body) == {"error"}, body
        err = body["error"]
        assert isinstance(err.get("code"), int) and isinstance(err.get("message"), str), body
        assert isinstance(err.get("status"), str), body
        return str(err["status"])
    # Anthropic (also the Augment endpoints' JSON errors)
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert set(body["error"]) >= {"type", "message"} and isinstance(body["error"]["message"], str), body
    return str(body["error"]["type"])


def read(dialect: str, resp: httpx.Response, stream: bool) -> Outcome:
    """Read a finished ``httpx.Response`` as ``dialect``."""
    if resp.status_code != 200:
        return Outcome(resp.status_code, check_envelope(dialect, resp.json()), False, resp.headers)
    if dialect == "anthropic" and stream:
        events = sse(resp.text)
        names = [n for n, _ in events]
        if names and names[-1] == "error":
            return Outcome(200, check_envelope(dialect, events[-1][1]), False, resp.headers, True, events)
        return Outcome(200, None, "message_stop" in names, resp.headers, events=events)
    if dialect == "openai" and stream:
        frames = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
        decoded = [json.loads(f) for f in frames if f != "[DONE]"]
        if decoded and "error" in decoded[-1]:
            return Outcome(200, check_envelope(dialect, decoded[-1]), False, resp.headers, True, decoded)
        return Outcome(200, None, bool(frames) and frames[-1] == "[DONE]", resp.headers, events=decoded)
    if dialect == "responses" and stream:
        events = sse(resp.text)
        names = [n for n, _ in events]
        if names and names[-1] == "response.failed":
            error = events[-2][1]
            assert names[-2] == "error" and set(error) == {"type", "sequence_number", "code", "message", "param"}
            assert events[-1][1]["response"]["error"]["code"] == error["code"], events[-2:]
            return Outcome(200, str(error["code"]), False, resp.headers, True, events)
        return Outcome(200, None, bool(names) and names[-1] == "response.completed", resp.headers, events=events)
    if dialect == "augment":
        lines = [json.loads(line) for line in resp.text.splitlines() if line.strip()]
        last = lines[-1] if lines else {}
        if "error" in last:
            return Outcome(200, str(last["error"]["type"]), False, resp.headers, True, lines)
        return Outcome(200, None, last.get("stop_reason") is not None, resp.headers, events=lines)
    data = resp.json()
    if dialect == "responses":
        return Outcome(200, None, data["status"] == "completed", resp.headers, events=[data])
    done = data.get("stop_reason") is not None if dialect == "anthropic" else \
        data["choices"][0].get("finish_reason") is not None
    return Outcome(200, None, done, resp.headers, events=[data])


def send(url: str, dialect: str, prompt: str, *, stream: bool = True, key: str = "sk-reliability",
         extra_headers: dict[str, str] | None = None, timeout: float = 20.0) -> Outcome:
    resp = client().post(url + PATHS[dialect], json=body_for(dialect, prompt, stream=stream),
                         headers={**headers_for(dialect, key), **(extra_headers or {})}, timeout=timeout)
    return read(dialect, resp, stream or dialect == "augment")


def sse(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for chunk in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "", ""
        for line in chunk.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
        if data:
            out.append((name, json.loads(data)))
    return out

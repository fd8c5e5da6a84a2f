"""One routing decision per request (issue 33 item 5): on every surface the router is asked once, whatever the
decoder reads of the model before the request is routed, and the pipeline's stages read that one answer
(``Exchange.caps``)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.dialects.routing import ModelCaps, Router
from tests.unit.gateway.test_handler import CHAT, GEMINI_ANSWER, FakeUpstream, _post

ANTHROPIC_ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
                    "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 3, "output_tokens": 1}}
USER = [{"role": "user", "content": "hello"}]
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("anthropic", "/v1/messages", {"model": "claude-opus-4-5", "max_tokens": 64, "messages": USER}, ANTHROPIC_ANSWER),
    ("anthropic", "/v1/chat/completions", {**CHAT, "model": "claude-opus-4-5"}, ANTHROPIC_ANSWER),
    ("gemini", "/v1/chat/completions", {**CHAT, "model": "gemini-3-pro-preview"}, GEMINI_ANSWER),
    ("gemini", "/v1beta/models/gemini-3-pro-preview:generateContent",
     {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}, GEMINI_ANSWER),
    ("anthropic", "/v1/responses", {"model": "claude-opus-4-5", "input": "hello"}, ANTHROPIC_ANSWER),
]


@pytest.mark.parametrize(("upstream", "path", "body", "answer"), CASES, ids=[f"{c[1]}->{c[0]}" for c in CASES])
async def test_the_router_is_asked_once_per_request(monkeypatch: pytest.MonkeyPatch, upstream: str, path: str,
                                                    body: dict[str, Any], answer: dict[str, Any]) -> None:
    asked: list[str] = []
    original = Router.caps_for

    def counted(self: Router, model: str) -> ModelCaps:
        asked.append(model)
        return original(self, model)

    monkeypatch.setattr(Router, "caps_for", counted)
    fake = FakeUpstream(upstream, body=answer)
    reply = await _post({upstream: fake}, path, body)
    assert reply.status_code == 200, reply.text
    assert fake.sent and len(asked) == 1, asked

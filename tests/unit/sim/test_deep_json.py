"""A body nested deeper than orjson writes (255 levels; valid JSON, which orjson and the real APIs parse) gets every
profile's answer, never the simulator's 500: a tool schema 261 levels deep, on every route, streamed and not."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

KEY = "sk-test-0123456789abcdef0123456789abcdef"
HEADERS = {"x-api-key": KEY, "authorization": f"Bearer {KEY}", "x-goog-api-key": KEY,
           "anthropic-version": "2023-06-01", "content-type": "application/json"}


def deep_schema() -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(130):  # 261 levels
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def anthropic_body(stream: bool) -> dict[str, Any]:
    return {"model": "claude-opus-4-5", "max_tokens": 256, "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "t", "description": "d", "input_schema": deep_schema()}]}


def compat_body(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "t", "parameters": deep_schema()}}]}


def gemini_body() -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": [{"name": "t", "description": "d", "parameters": deep_schema()}]}]}


def responses_body(stream: bool) -> dict[str, Any]:
    return {"model": "gpt-5", "input": "hi", "stream": stream,
            "tools": [{"type": "function", "name": "t", "parameters": deep_schema()}]}


CASES = [
    ("/v1/messages", anthropic_body(False)),
    ("/v1/messages", anthropic_body(True)),
    ("/v1/messages/count_tokens", {k: v for k, v in anthropic_body(False).items() if k in ("model", "messages",
                                                                                            "tools")}),
    ("/v1beta/models/gemini-3-pro-preview:generateContent", gemini_body()),
    ("/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse", gemini_body()),
    ("/v1beta/openai/chat/completions", compat_body("gemini-3-pro-preview", False)),
    ("/openrouter/api/v1/chat/completions", compat_body("google/gemini-3-pro-preview", True)),
    ("/copilot/chat/completions", compat_body("gemini-3-pro-preview", False)),
    ("/deepseek/v1/chat/completions", compat_body("deepseek-reasoner", True)),
    ("/openai/v1/responses", responses_body(False)),
    ("/openai/v1/responses", responses_body(True)),
]


@pytest.mark.parametrize(("path", "body"), CASES,
                         ids=[f"{p.split('?')[0].rsplit('/', 1)[-1]}-{b.get('stream', False)}" for p, b in CASES])
async def test_a_body_nested_past_255_levels_is_answered(client: httpx.AsyncClient, path: str,
                                                         body: dict[str, Any]) -> None:
    resp = await client.post(path, content=json.dumps(body), headers=HEADERS)
    assert resp.status_code == 200, resp.text[:300]
    assert resp.content


def _text_schema(pairs: int) -> str:
    """A schema ``2 * pairs + 1`` levels deep as JSON text (deeper than Python's own encoder recurses by default)."""
    return '{"type":"object","properties":{"a":' * pairs + '{"type":"object"}' + "}}" * pairs


@pytest.mark.parametrize("path", ["/openai/v1/responses", "/v1/messages", "/v1beta/models/gemini-3-pro-preview:"
                                  "generateContent"])
async def test_a_body_near_the_1024_levels_orjson_reads_is_answered(client: httpx.AsyncClient, path: str) -> None:
    """1,015 levels: orjson reads it, but neither orjson (255) nor the standard library at its default recursion
    limit writes it back; the simulator still answers (the Responses profile echoes the tool)."""
    schema = _text_schema(505)
    body = {"/openai/v1/responses": '{"model":"gpt-5","input":"hi","tools":[{"type":"function","name":"t",'
                                    '"parameters":%s}]}',
            "/v1/messages": '{"model":"claude-opus-4-5","max_tokens":256,"messages":[{"role":"user","content":"hi"}],'
                            '"tools":[{"name":"t","description":"d","input_schema":%s}]}',
            }.get(path, '{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":'
                        '[{"name":"t","description":"d","parameters":%s}]}]}') % schema
    resp = await client.post(path, content=body.encode(), headers=HEADERS)
    assert resp.status_code == 200, resp.text[:300]

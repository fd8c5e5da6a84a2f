"""The top-level ``system`` (rule 109), empty message content (rule 110) and ``count_tokens`` (rule 111): exact
status, error type and text, through the HTTP app; count_tokens also through the official ``anthropic`` SDK.
Sources: docs/upstream-rules.md."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from tests.support.sim.helpers import HEADERS, MODEL, history, post, rejection, request

INVALID_REQUEST = "invalid_request_error"
NOT_LIST = "system: Input should be a valid list"
EMPTY = "system: text content blocks must be non-empty"
BLANK = "system: text content blocks must contain non-whitespace text"
EMPTY_CONTENT = "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
CACHED = {"type": "ephemeral"}


async def assert_rejected(client: httpx.AsyncClient, body: dict[str, Any], message: str) -> None:
    assert await rejection(client, body) == (400, INVALID_REQUEST, message)


async def assert_accepted(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    resp = await post(client, body)
    assert resp.status_code == 200, resp.text


async def rejections(client: httpx.AsyncClient) -> dict[str, int]:
    return dict((await client.get("/_sim/stats")).json()["rejections"])


async def test_rule_109_system_is_a_string_or_a_list(client: httpx.AsyncClient) -> None:
    for wrong in (7, None, {"type": "text", "text": "a dict"}, True):
        await assert_rejected(client, request("hi", system=wrong), NOT_LIST)
    assert await rejections(client) == {"109": 4}
    await assert_accepted(client, request("hi", system="You are terse."))
    await assert_accepted(client, request("hi", system=[]))


async def test_rule_109_a_system_block_without_text(client: httpx.AsyncClient) -> None:
    await assert_rejected(client, request("hi", system=[{"type": "text"}]), "system.0.text: Field required")
    await assert_rejected(client, request("hi", system=[{"type": "text", "text": "a"}, {"type": "text"}]),
                          "system.1.text: Field required")
    await assert_rejected(client, request("hi", system=[{"type": "text", "text": 7}]),
                          "system.0.text: Input should be a valid string")


async def test_rule_109_a_system_block_of_another_type(client: httpx.AsyncClient) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    await assert_rejected(client, request("hi", system=[image]), "system.0.type: Input should be 'text'")
    await assert_rejected(client, request("hi", system=[{"text": "no type"}]), "system.0.type: Field required")
    await assert_rejected(client, request("hi", system=["a bare string"]),
                          "system.0: Input should be a valid dictionary or object to extract fields from")


async def test_rule_109_a_key_a_text_block_does_not_have(client: httpx.AsyncClient) -> None:
    """LangChain's v1 blocks carry an ``id``: the API's ``system.0.id: Extra inputs are not permitted``."""
    await assert_rejected(client, request("hi", system=[{"type": "text", "text": "x", "id": "lc_1"}]),
                          "system.0.id: Extra inputs are not permitted")
    await assert_accepted(client, request("hi", system=[{"type": "text", "text": "x", "citations": None}]))


async def test_rule_109_an_empty_or_blank_system(client: httpx.AsyncClient) -> None:
    await assert_rejected(client, request("hi", system=""), EMPTY)
    await assert_rejected(client, request("hi", system=" \n"), BLANK)
    await assert_rejected(client, request("hi", system=[{"type": "text", "text": ""}]), EMPTY)
    await assert_rejected(client, request("hi", system=[{"type": "text", "text": "a"},
                                                        {"type": "text", "text": "\n\n"}]), BLANK)


async def test_rule_109_cache_control_on_system_blocks(client: httpx.AsyncClient) -> None:
    """Accepted on a block with text (what Claude Code sends); on an empty block its own error, before emptiness."""
    await assert_accepted(client, request("hi", system=[
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "Be terse.", "cache_control": CACHED}]))
    await assert_rejected(client, request("hi", system=[{"type": "text", "text": "static", "cache_control": CACHED},
                                                        {"type": "text", "text": "", "cache_control": CACHED}]),
                          "system.1: cache_control cannot be set for empty text blocks")


async def test_rule_109_comes_after_the_message_schema(client: httpx.AsyncClient) -> None:
    body = request("hi", system=7)
    body["messages"][0]["content"] = [{"type": "text"}]
    await assert_rejected(client, body, "messages.0.content.0.text.text: Field required")


async def test_rule_110_empty_content(client: httpx.AsyncClient) -> None:
    """``content: []`` is refused for every message (a mid-conversation system message too) but a final assistant
    message (a prefill)."""
    await assert_rejected(client, request("hi", messages=[{"role": "user", "content": []}]),
                          EMPTY_CONTENT.format(i=0))
    body = request("hi", thinking=None)
    body["messages"].append({"role": "system", "content": []})
    await assert_rejected(client, body, EMPTY_CONTENT.format(i=1))
    assert await rejections(client) == {"110": 2}
    body["messages"][1] = {"role": "assistant", "content": []}
    await assert_accepted(client, body)


async def test_the_directive_only_system_message_is_accepted_anywhere_but_a_system_prompt_not_first(
        client: httpx.AsyncClient) -> None:
    """``{"role": "system", "content": [], "output_config": {...}}`` (what Claude Code sends where the model lacks
    mid-conversation system messages) passes at any position; a system message with content cannot open
    ``messages`` (the API's own text names both)."""
    directive = {"role": "system", "content": [], "output_config": {"effort": "medium"}}
    body = request("hi", thinking=None)
    body["messages"].append(directive)
    await assert_accepted(client, body)
    body["messages"].insert(0, directive)
    await assert_accepted(client, body)
    body["messages"][0] = {"role": "system", "content": "You are terse."}
    await assert_rejected(client, body, "messages.0: use the top-level 'system' parameter for the initial system "
                                        "prompt; the directive-only form (content: [] with output_config) is accepted "
                                        "at any position")
    assert await rejections(client) == {"107": 1}


async def test_a_mid_conversation_system_message_has_the_content_rules_of_any_message(
        client: httpx.AsyncClient) -> None:
    body = request("hi", thinking=None)
    body["messages"].append({"role": "system", "content": [{"type": "text"}]})
    await assert_rejected(client, body, "messages.1.content.0.text.text: Field required")
    body["messages"][1]["content"] = " "
    await assert_rejected(client, body, "messages: text content blocks must contain non-whitespace text")
    body["messages"][1].pop("content")
    await assert_rejected(client, body, "messages.1.content: Field required")
    body["messages"][1]["content"] = [{"type": "text", "text": "Answer in French.", "cache_control": CACHED}]
    await assert_accepted(client, body)


async def test_rule_100_cache_control_on_an_empty_message_text_block(client: httpx.AsyncClient) -> None:
    empty = {"type": "text", "text": "", "cache_control": CACHED}
    body = request("hi", messages=[{"role": "user", "content": [empty]}])
    await assert_rejected(client, body, "messages.0.content.0.text: cache_control cannot be set for empty text blocks")


# ------------------------------------------------------------------ count_tokens

async def count(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/messages/count_tokens", json=body, headers=HEADERS)


async def assert_count_rejected(client: httpx.AsyncClient, body: dict[str, Any], message: str) -> None:
    resp = await count(client, body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"] == {"type": INVALID_REQUEST, "message": message}


def counted(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


async def test_rule_111_count_tokens_takes_only_its_own_fields(client: httpx.AsyncClient) -> None:
    for key, value in (("max_tokens", 1024), ("temperature", 0.5), ("stream", True), ("metadata", {})):
        await assert_count_rejected(client, counted(**{key: value}), f"{key}: Extra inputs are not permitted")
    assert await rejections(client) == {"111": 4}
    weather = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    ok = await count(client, counted(system=[{"type": "text", "text": "Be terse.", "cache_control": CACHED}],
                                     tools=[weather], tool_choice={"type": "auto"},
                                     thinking={"type": "enabled", "budget_tokens": 2048}))
    assert ok.status_code == 200 and ok.json()["input_tokens"] > 0


async def test_count_tokens_applies_the_messages_rules(client: httpx.AsyncClient) -> None:
    """The system, message schema, tool pairing and thinking rules of ``/v1/messages``, on any model."""
    await assert_count_rejected(client, counted(system=7), NOT_LIST)
    await assert_count_rejected(client, counted(system=[{"type": "text"}]), "system.0.text: Field required")
    await assert_count_rejected(client, {"model": MODEL}, "messages: Field required")
    await assert_count_rejected(client, counted(messages=[{"role": "user", "content": []}]),
                                EMPTY_CONTENT.format(i=0))
    body = await history(client, request("q [[sim:tools=2]]"), 1)
    del body["max_tokens"]
    assert (await count(client, body)).status_code == 200
    body["messages"][2]["content"][0]["tool_use_id"] = "toolu_01Unknown"
    resp = await count(client, body)
    assert resp.status_code == 400 and resp.json()["error"]["message"].startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: ")
    body = await history(client, request("q [[sim:tools=2]]"), 1)
    del body["max_tokens"]
    body["messages"][1]["content"][0]["signature"] = "EqQBforged"
    await assert_count_rejected(client, body, "messages.1.content.0: Invalid `signature` in `thinking` block")


@pytest.mark.process
async def test_count_tokens_through_the_anthropic_sdk(live_sim: str) -> None:
    async with anthropic.AsyncAnthropic(base_url=live_sim, api_key="sk-test", max_retries=0) as sdk:
        messages: Any = [{"role": "user", "content": "count me"}]
        ok = await sdk.messages.count_tokens(model=MODEL, messages=messages, system=[
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}])
        assert ok.input_tokens > 0
        for kwargs, message in (({"system": 7}, NOT_LIST),
                                ({"system": [{"type": "text"}]}, "system.0.text: Field required"),
                                ({"system": ""}, EMPTY),
                                ({"extra_body": {"max_tokens": 1024}}, "max_tokens: Extra inputs are not permitted")):
            with pytest.raises(anthropic.BadRequestError) as caught:
                await sdk.messages.count_tokens(model=MODEL, messages=messages, **kwargs)
            body: Any = caught.value.body
            assert body["error"] == {"type": INVALID_REQUEST, "message": message}

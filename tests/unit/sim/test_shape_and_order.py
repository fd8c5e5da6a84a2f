"""Basic request shape, what must be tolerated, and which rule wins when several apply."""

from __future__ import annotations

import copy

import httpx
import pytest

from tests.support.sim.helpers import history, post, rejection, request
from thinkgate_sim.rules import RULE_EMPTY_TEXT, SHAPE, check_messages_request
from thinkgate_sim.signing import Minter


@pytest.mark.parametrize(("field", "message"), [
    ("model", "model: Field required"),
    ("max_tokens", "max_tokens: Field required"),
    ("messages", "messages: Field required"),
])
async def test_missing_required_fields(client: httpx.AsyncClient, field: str, message: str) -> None:
    body = request("hi")
    del body[field]
    assert await rejection(client, body) == (400, "invalid_request_error", message)


@pytest.mark.parametrize(("patch", "message"), [
    ({"max_tokens": "many"}, "max_tokens: Input should be a valid integer"),
    ({"messages": []}, "messages: at least one message is required"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role: Input should be 'user' or 'assistant'"),
    ({"messages": [{"role": "user"}]}, "messages.0.content: Field required"),
    ({"thinking": {"type": "enabled"}}, "thinking.enabled.budget_tokens: Field required"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
     "messages: text content blocks must be non-empty"),
    ({"messages": [{"role": "user", "content": " \n"}]},
     "messages: text content blocks must contain non-whitespace text"),
])
async def test_shape_errors(client: httpx.AsyncClient, patch: dict[str, object], message: str) -> None:
    assert (await rejection(client, {**request("hi"), **patch}))[2] == message


async def test_tolerates_system_role_cache_control_and_unknown_fields(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]]", thinking="adaptive"), 1)
    body["messages"].insert(1, {"role": "system", "content": [{"type": "text", "text": "sys",
                                                               "cache_control": {"type": "ephemeral"}}]})
    for block in body["messages"][2]["content"]:
        block["cache_control"] = {"type": "ephemeral"}
        block["x_unknown_field"] = {"kept": True}
    body["messages"][3]["content"].append({"type": "future_block", "payload": 1})
    body["context_management"] = {"edits": []}
    body["metadata"] = {"user_id": "u"}
    resp = await post(client, body, {"anthropic-beta": "claude-code-20250219, context-management-2025-06-27"})
    assert resp.status_code == 200, resp.text


def test_order_schema_before_params_before_pairing_before_signatures(minter: Minter) -> None:
    rid = "msg_01" + "A" * 22
    good = minter.mint_thinking("claude-sonnet-4-5", "t", rid, 0)
    body = request("q", max_tokens=2048)  # violates rule 2
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "bad"},  # rule 6
                                          {"type": "tool_use", "id": "toolu_01A", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "no results"}]},  # rule 12
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]},  # rule 5
    ]

    def rule(b: dict[str, object]) -> int | None:
        v = check_messages_request(b, betas=frozenset(), minter=minter)
        return v.rule if v else None

    assert rule(body) == 5
    body["messages"].pop()
    assert rule(body) == 2
    body["max_tokens"] = 4096
    assert rule(body) == 12
    body["messages"][2] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A"}]}
    assert rule(body) == 6
    body["messages"][1]["content"][0]["signature"] = good
    assert rule(body) is None


def test_rule_numbers_for_shape_and_empty_text(minter: Minter) -> None:
    v = check_messages_request({"model": "m"}, betas=frozenset(), minter=minter)
    assert v is not None and v.rule == SHAPE and v.status == 400
    v = check_messages_request(request(""), betas=frozenset(), minter=minter)
    assert v is not None and v.rule == RULE_EMPTY_TEXT


async def test_thinking_disabled_strips_older_thinking_without_checking(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]]"), 1)
    forged = copy.deepcopy(body)
    forged["messages"][1]["content"][0]["signature"] = "forged"
    assert (await rejection(client, forged))[2].endswith("Invalid `signature` in `thinking` block")
    forged.pop("thinking")
    assert (await post(client, forged)).status_code == 200

"""The traffic matrix's judge of an OpenAI Responses upstream request (``tests/support/e2e/traffic.py``
``replayed_turns``):
a replayed turn keeps its thinking when its reasoning item comes first, with its ``encrypted_content``, followed by
the item it preceded; anything less is counted lost."""

from __future__ import annotations

from typing import Any

from tests.support.e2e.traffic import replayed_turns
from tests.support.reliability.recording_proxy import Exchange

USER = {"role": "user", "content": "weather?"}
RS = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-sealed"}
FC = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
FC2 = {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{}"}
OUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
OUT2 = {"type": "function_call_output", "call_id": "call_2", "output": "rain"}
MSG = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}


def judge(items: list[dict[str, Any]], path: str = "/openai/v1/responses") -> list[bool]:
    return replayed_turns(Exchange("c", path, {"model": "gpt-5", "input": items}, 200))


def test_each_turn_with_its_sealed_reasoning_before_the_item_it_preceded_is_kept() -> None:
    assert judge([USER, RS, FC, FC2, OUT, OUT2, RS, MSG, {"role": "user", "content": "more"}, RS, FC, OUT]) == \
        [True, True, True]
    assert judge([USER]) == []


def test_a_turn_without_its_reasoning_item_or_its_encrypted_content_is_lost() -> None:
    bare = {k: v for k, v in RS.items() if k != "encrypted_content"}
    assert judge([USER, FC, OUT, RS, FC2, OUT2]) == [False, True]
    assert judge([USER, bare, FC, OUT]) == [False]
    assert judge([USER, {**RS, "encrypted_content": ""}, FC, OUT]) == [False]


def test_a_reasoning_item_without_its_following_item_or_after_it_is_lost() -> None:
    assert judge([USER, RS, OUT]) == [False]
    assert judge([USER, FC, RS, OUT]) == [False]
    assert judge([USER, {"type": "item_reference", "id": "rs_1"}, FC, OUT]) == [False]

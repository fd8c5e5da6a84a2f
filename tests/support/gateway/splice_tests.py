"""Splicing kept message JSON into a changed request (``gateway.continuation.splice``): the same bytes as encoding it
all, kept JSON used only while a message is what it was encoded from, and in a mangled tool loop only the
new messages encoded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.app.factory import Gateway
from gateway.continuation import splice
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, TextBlock
from gateway.dialects.openai_chat import codec as openai_chat
from gateway.pipeline import stages as pipeline
from gateway.surfaces import chat
from gateway.surfaces import common as dialects
from gateway.transport.upstream import forward_request_headers
from state.coherence import ObjectLru
from tests.support.gateway.memo_equivalence import (
    answered,
    exchange_of,
    gateway_pair,
    prepare_both_ways,
    relay_and_record,
)
from tests.support.manglings.anthropic import MESSAGE_MANGLINGS, mangle_assistants

HEADERS = {"x-api-key": "sk-splice", "anthropic-version": "2023-06-01", "content-type": "application/json"}
PARAMS = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
          "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}


def _request(messages: list[dict[str, Any]]) -> Any:
    return anthropic.decode_request({**PARAMS, "messages": messages})


HISTORY = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "t\r\n", "signature": "sig"},
                                      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
]


def test_spliced_bytes_are_what_encoding_it_all_gives() -> None:
    req = _request(HISTORY)
    whole = orjson.dumps(anthropic.encode_request(req))
    body, carried = splice.run(req, None)
    assert body == whole
    assert all(carried.json[id(m)].message is m for m in req.messages)
    assert splice.run(req, splice.SplicePrior(carried.json))[0] == whole  # now from kept JSON
    assert splice.run(_request([]), None)[0] == orjson.dumps(anthropic.encode_request(_request([])))


def test_the_previous_requests_messages_are_taken_as_their_json_while_they_are_the_first_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversation's next request starts with the messages the previous one's body carried: their JSON is
    spliced as it is, without a look at each; only the new messages are read. The bytes are what encoding
    the whole request gives, and a prefix whose messages are not this request's first is not used."""
    looked: list[Message] = []
    real = splice.message_json
    monkeypatch.setattr(splice, "message_json", lambda m, table, recorded=None, from_records=(), kept=None:
                        looked.append(m) or real(m, table, recorded, from_records, kept))
    req = _request(HISTORY)
    _, prior = splice.run(req, None)
    assert prior.prefix is not None and prior.prefix.messages == req.messages and len(looked) == 3
    later = _request(HISTORY)
    later.messages = req.messages + later.messages[1:]  # then an assistant message and its tool result
    later.stream = True
    looked.clear()
    body, carried = splice.run(later, prior)
    assert body == orjson.dumps(anthropic.encode_request(later)) and looked == later.messages[3:]
    assert carried.prefix is not None and carried.prefix.messages == later.messages
    assert len(carried.prefix.chunks) == 2
    looked.clear()
    other = _request(HISTORY)  # the same JSON, other objects: no prefix of this request's
    assert splice.run(other, carried)[0] == orjson.dumps(anthropic.encode_request(other))
    assert looked == other.messages
    # a long conversation: its chunks are joined now and then
    grown = carried
    for _ in range(splice._MAX_CHUNKS + 2):
        nxt = _request(HISTORY)
        assert grown.prefix is not None
        nxt.messages = grown.prefix.messages + nxt.messages[1:]
        body, grown = splice.run(nxt, grown)
        assert body == orjson.dumps(anthropic.encode_request(nxt))
        assert grown.prefix is not None and len(grown.prefix.chunks) <= splice._MAX_CHUNKS


def test_kept_json_is_used_only_while_the_message_is_what_it_was_encoded_from() -> None:
    m = _request(HISTORY).messages[2]
    table: splice.JsonTable = {}
    first = splice.message_json(m, table)
    assert splice.message_json(m, table) is first  # unchanged: the kept bytes themselves
    m.content = [TextBlock("edited")]
    assert orjson.loads(splice.message_json(m, table))["content"] == [{"type": "text", "text": "edited"}]
    m.content_was_string = True
    assert orjson.loads(splice.message_json(m, table))["content"] == "edited"
    m.extra = {"cache": 1}
    assert orjson.loads(splice.message_json(m, table))["cache"] == 1
    u = Message("user", [TextBlock("hi")])
    splice.message_json(u, table)
    u.role = "assistant"
    assert orjson.loads(splice.message_json(u, table))["role"] == "assistant"
    other = Message("user", m.content, m.content_was_string, m.extra)  # what ``m`` is, but another object
    table[id(other)] = table[id(m)]
    assert splice.message_json(other, table) is not splice.message_json(m, table)


def test_a_recorded_turns_json_is_shared_by_the_messages_restored_from_it() -> None:
    wire = HISTORY[1]["content"]
    a, b = Message("assistant"), Message("assistant")
    for m in (a, b):
        m.restore_raw(wire, lambda: [], b"d")
    from_records = {id(a), id(b)}  # repair restored them as the record's JSON
    recorded: splice.RecordedJson = ObjectLru(8)  # a worker's (``deps.WorkerCaches``)
    # the second: the first's bytes
    assert splice.message_json(b, {}, recorded, from_records) is splice.message_json(a, {}, recorded, from_records)
    client = [anthropic.decode_message(HISTORY[1], 1) for _ in range(2)]
    assert client[0].raw_blocks is client[1].raw_blocks  # the client's own list
    # only records' JSON is shared
    assert splice.message_json(client[1], {}, recorded, from_records) is not \
        splice.message_json(client[0], {}, recorded, from_records)
    b.extra = {"k": 1}  # not the recorded turn alone any more: encoded for itself
    assert orjson.loads(splice.message_json(b, {}, recorded, from_records)) == \
        {"role": "assistant", "content": wire, "k": 1}
    c = Message("assistant")
    c.restore_raw(wire, lambda: [], b"d")
    # no worker cache given: its own bytes
    assert splice.message_json(c, {}) is not splice.message_json(a, {}, recorded, from_records)


@pytest.fixture()
async def gateways(sim: Any, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with gateway_pair(sim.url, redis_url, "splice-secret") as pair:
        yield pair


@pytest.mark.parametrize("mangling", ["drop_signature", "trim_thinking", "thinking_to_text_block"])
async def test_a_mangled_tool_loop_encodes_only_its_new_messages(
        gateways: tuple[Gateway, Gateway], mangling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replayed turns are restored on every request (the request is changed), yet from the third request
    on only the two new messages are encoded: the rest is the previous request's JSON, spliced, and the
    bytes are what encoding the whole request gives (``prepare_both_ways``)."""
    assert mangling in MESSAGE_MANGLINGS
    with_memo, _ = gateways
    encoded: list[Message] = []
    real = anthropic.encode_message

    def counting(m: Message) -> Any:
        encoded.append(m)
        return real(m)

    monkeypatch.setattr(anthropic, "encode_message", counting)
    counted: list[int] = []
    looked: list[Message] = []  # messages whose kept JSON was looked up (not taken with the previous body's)
    real_json = splice.message_json
    monkeypatch.setattr(splice, "message_json", lambda m, table, recorded=None, from_records=(), kept=None:
                        looked.append(m) or real_json(m, table, recorded, from_records, kept))

    async def prepare(ex: pipeline.Exchange, gw: Gateway) -> None:
        encoded.clear()
        looked.clear()
        await pipeline.prepare(ex, gw)
        if gw.replay_memo is not None:  # the worker under test (the reference decodes everything afresh)
            counted.append(len(encoded))
            counted.append(len(looked))

    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools=6]] splice {mangling}"}]
    for step in range(6):
        sent = mangle_assistants(history, mangling)
        ex = await prepare_both_ways(gateways, exchange_of({**PARAMS, "messages": sent}, endpoint="messages",
                                                            dialect="anthropic", headers=HEADERS), prepare)
        if step >= 1:
            assert ex.continuation.changed and "restored" in [a.kind.value for a in ex.plan.actions]
        if step >= 2:
            # the last answer (restored) and its tool results: encoded, and the only messages looked at (the
            # others are the previous request's body's JSON, as it carried them)
            assert counted[-2:] == [2, 2], counted
        answer = await relay_and_record(with_memo, ex, forward_request_headers(ex.client.headers))
        assert answer["stop_reason"] == "tool_use"
        answered(history, answer, f"result {step} " * 200)


async def test_an_openai_tool_loop_to_anthropic_encodes_only_its_new_messages(
        gateways: tuple[Gateway, Gateway], monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenAI chat surface encodes for an Anthropic upstream the same way: its requests are changed on
    every step (``reasoning_effort`` becomes a thinking budget, a parameter fixed), and from the third on
    only the new assistant message and the user message its tool results make are encoded."""
    with_memo, _ = gateways
    encoded: list[Message] = []
    real = anthropic.encode_message
    monkeypatch.setattr(anthropic, "encode_message", lambda m: encoded.append(m) or real(m))
    counted: list[int] = []

    async def prepare(ex: pipeline.Exchange, gw: Gateway) -> None:
        encoded.clear()
        codec = chat.ChatCompletions(gw)
        codec.ex = ex
        await codec.prepare()
        if gw.replay_memo is not None:
            counted.append(len(encoded))

    headers = {"authorization": "Bearer sk-splice-openai", "content-type": "application/json"}
    params = {"model": "claude-opus-4-5", "max_tokens": 4096, "reasoning_effort": "medium", "tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=6]] splice openai"}]
    for step in range(6):
        ex = await prepare_both_ways(gateways, exchange_of({**params, "messages": history}, endpoint="chat_completions",
                                                            dialect="openai", headers=headers), prepare)
        assert ex.continuation.changed and ex.route.upstream == "anthropic"
        if step >= 2:
            assert ex.continuation.ticket is not None and counted[-1] == 2, counted
        answer = await relay_and_record(with_memo, ex, dialects.anthropic_headers(ex.client.headers))
        message = openai_chat.encode_completion(anthropic.decode_turn(answer), created=0)["choices"][0]["message"]
        history.append({k: v for k, v in message.items() if v is not None})
        history += [{"role": "tool", "tool_call_id": c["id"], "content": f"result {step} " * 200}
                    for c in message["tool_calls"]]


def test_a_parameter_named_like_the_messages_is_encoded_as_the_whole_request_is() -> None:
    req = _request(HISTORY)
    req.params = {**req.params, "messages": []}  # (no decoder puts it there; the encoder must not fail on it)
    body, carried = splice.run(req, None)
    assert body == orjson.dumps(anthropic.encode_request(req)) and carried.prefix is not None
    assert carried.prefix.messages == []

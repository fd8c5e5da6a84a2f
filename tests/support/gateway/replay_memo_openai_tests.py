"""The replay memo on the OpenAI chat surface (``openai_chat_messages.continue_messages``).

OpenAI messages do not decode one each: consecutive ``tool`` messages make one user message (a user
message right after them joins it), consecutive assistant messages merge, and system messages make the
system value. The unit tests hold ``continue_messages`` to its rule (decoding only the new messages gives
exactly what decoding the whole history gives, or it declines); the equivalence tests run OpenAI tool
loops (faithful and mangled, real simulator, real Redis) through the request pipeline twice per step, with
the memo and without it, and require the same upstream body, canonical messages, actions and record plan.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gateway.app.factory import Gateway
from gateway.continuation.replay_memo import ReplayMemo, one_to_one
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message
from gateway.dialects.openai_chat import codec as openai_chat
from gateway.dialects.openai_chat.messages import continue_messages, decode_messages, system_of
from gateway.errors import ClientError
from gateway.pipeline import stages as pipeline
from gateway.surfaces import chat
from gateway.surfaces import common as dialects
from tests.support.gateway.memo_equivalence import (
    exchange_of,
    gateway_pair,
    prepare_both_ways,
    relay_and_record,
    shared_blocks_unchanged,
)
from tests.support.manglings.openai import BY_UPSTREAM, MANGLINGS

History = list[dict[str, Any]]
SIG = "Eq" + "x" * 60


def _assistant(i: int, *, reasoning: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"toolu_{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"c"}'}}]}
    if reasoning:
        out["reasoning_details"] = [{"type": "reasoning.text", "text": f"step {i}", "signature": SIG,
                                     "format": "anthropic-claude-v1", "index": 0}]
    return out


def _tool(i: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"toolu_{i}", "content": f"sunny {i}"}


START: History = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "weather?"},
                  _assistant(0), _tool(0)]

# prefix, tail, whether the tail may be decoded on its own
CASES: dict[str, tuple[History, History, bool]] = {
    "an assistant message and its tool results": (START, [_assistant(1), _tool(1)], True),
    "two tool results after an assistant message": (START, [_assistant(1), _tool(1), _tool(2)], True),
    "an assistant message split in two (they merge)": (
        START, [{"role": "assistant", "content": "let me see"}, _assistant(1, reasoning=False), _tool(1)], True),
    "a user message joining the new tool results": (
        START, [_assistant(1), _tool(1), {"role": "user", "content": "and tomorrow?"}], True),
    "a system message after the first new message": (
        START, [_assistant(1), {"role": "developer", "content": "be briefer"}, _tool(1)], True),
    "nothing new (a retry)": (START, [], True),
    "a tool message first (joins the kept tool results)": (START, [_tool(9)], False),
    "a user message first (joins the kept tool results)": (START, [{"role": "user", "content": "more"}], False),
    "a user message first after a user message": (
        START[:2], [{"role": "user", "content": "more"}, _assistant(1)], False),
    "an assistant message after an assistant message (they merge)": (START[:3], [_assistant(1), _tool(1)], False),
    "a system message first": (START, [{"role": "system", "content": "new rules"}, _assistant(1)], False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_new_messages_are_decoded_alone_only_where_that_gives_the_whole_decode(case: str) -> None:
    prefix, tail, alone = CASES[case]
    _, kept = decode_messages(copy.deepcopy(prefix))
    got = continue_messages(kept, copy.deepcopy(tail), len(prefix))
    want_system, want = decode_messages(copy.deepcopy(prefix + tail))
    if not alone:
        assert got is None
        return
    assert got == want and got[:len(kept)] == kept and all(a is b for a, b in zip(got, kept, strict=False))
    assert system_of(prefix + tail) == want_system  # the system value, from every system message


def test_a_kept_message_no_longer_as_decoded_declines() -> None:
    _, kept = decode_messages(copy.deepcopy(START))
    assert continue_messages([None, *kept[1:]], [_assistant(1)], len(START)) is None


def test_an_invalid_new_message_fails_as_the_whole_decode_does() -> None:
    _, kept = decode_messages(copy.deepcopy(START))
    tail = [_assistant(1), {"role": "function", "content": "x"}]
    with pytest.raises(ClientError) as alone:
        continue_messages(kept, tail, len(START))
    with pytest.raises(ClientError) as whole:
        decode_messages(START + tail)
    assert str(alone.value) == str(whole.value) and "messages.5" in str(alone.value)


# ------------------------------------------------------------------ through the memo

KIND = "openai"


def _resume(parsed: dict[str, Any], kept: list[Message | None], tail: list[Any]) -> list[Message] | None:
    return continue_messages(kept, tail, len(parsed["messages"]))


def _body(messages: History) -> bytes:
    return orjson.dumps({"model": "claude-opus-4-5", "max_tokens": 1024, "messages": messages})


def _served(memo: ReplayMemo, raw: bytes, kind: str = KIND) -> tuple[list[Message], Any]:
    replay = memo.take("t1", kind, raw, _resume if kind == KIND else one_to_one(anthropic.decode_message))
    if replay is not None:
        return replay[1], replay[2]
    parsed = orjson.loads(raw)
    msgs = decode_messages(parsed["messages"])[1] if kind == KIND else anthropic.decode_request(parsed).messages
    return msgs, memo.ticket("t1", kind, raw, parsed, msgs)


def test_a_replay_decodes_its_new_messages_and_declines_where_they_would_merge() -> None:
    memo = ReplayMemo(1 << 20)
    first, ticket = _served(memo, _body(START))
    memo.keep(ticket)
    again, ticket = _served(memo, _body([*START, _assistant(1), _tool(1)]))
    assert ticket.reused == len(first) and again[:len(first)] == first and again[0] is first[0]
    assert again == decode_messages([*START, _assistant(1), _tool(1)])[1]
    memo.keep(ticket)
    assert memo.take("t1", KIND, _body([*START, _assistant(1), _tool(1), _tool(2)]), _resume) is None
    assert (memo.hits, memo.misses) == (1, 2)


def test_a_message_whose_content_a_stage_replaced_is_not_reused() -> None:
    memo = ReplayMemo(1 << 20)
    msgs, ticket = _served(memo, _body(START))
    assert msgs[1].role == "assistant"
    msgs[1].content = [b for b in msgs[1].content if b.type != "thinking"]  # a stage dropped its thinking
    memo.keep(ticket)
    assert memo.take("t1", KIND, _body([*START, _assistant(1), _tool(1)]), _resume) is None


def test_another_surface_never_continues_an_entry() -> None:
    """The same bytes are a valid body on both surfaces; each decodes them its own way."""
    memo = ReplayMemo(1 << 20)
    start = [{"role": "user", "content": "hi"}]
    nxt = _body([*start, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}])
    for kept_by, asked_by in (("anthropic", KIND), (KIND, "anthropic")):
        memo.keep(_served(memo, _body(start), kept_by)[1])
        resume = _resume if asked_by == KIND else one_to_one(anthropic.decode_message)
        assert memo.take("t1", asked_by, nxt, resume) is None
        assert memo.take("t1", kept_by, nxt, _resume if kept_by == KIND else resume) is not None


# ------------------------------------------------------------------ equivalence through the pipeline

KEY = "sk-memo-openai-equivalence"
HEADERS = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
Step = Callable[[History, int], tuple[History, dict[str, Any]]]


def _mangled(name: str) -> Step:
    return lambda h, step: (MANGLINGS[name](h), {})


def _split_assistants(h: History, step: int) -> tuple[History, dict[str, Any]]:
    """The client sends each answer's reasoning and its tool calls as two assistant messages."""
    out: History = []
    for m in copy.deepcopy(h):
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
            m = {"role": "assistant", "content": None, "tool_calls": m["tool_calls"]}
        out.append(m)
    return out, {}


def _with_note(role: str) -> Step:
    """From step 2 the client puts a note after the first tool result (it stays in the history)."""
    def step_fn(h: History, step: int) -> tuple[History, dict[str, Any]]:
        if step < 2 or len(h) < 3:
            return h, {}
        return [*h[:3], {"role": role, "content": "a note"}, *h[3:]], {}
    return step_fn


def _edit_at_step_3(h: History, step: int) -> tuple[History, dict[str, Any]]:
    if step >= 3 and len(h) > 2:
        h = copy.deepcopy(h)
        h[2]["content"] = "edited result"
    return h, {}


def _thinking_param(h: History, step: int) -> tuple[History, dict[str, Any]]:
    return h, {"thinking": {"type": "enabled", "budget_tokens": 2048}}  # no parameter to fix


SCENARIOS: dict[str, Step] = {
    **{f"mangled:{n}": _mangled(n) for n in BY_UPSTREAM["anthropic"]},  # an Anthropic upstream's fields
    "assistant messages split in two": _split_assistants,
    "a system note in the history": _with_note("system"),
    "a user note after a tool result": _with_note("user"),
    "earlier tool result edited": _edit_at_step_3,
    "vendor thinking parameter": _thinking_param,
}


# scenarios whose requests continue from the one before (repair, sanitize, the body's message JSON), from which
# step on (the first replays: the conversation is new; an edit makes the request after it look at everything)
CONTINUED = {"mangled:faithful": 3, "mangled:drop_reasoning_details": 3, "mangled:drop_reasoning_content": 3,
             "mangled:drop_all_reasoning": 3, "mangled:text_entries_only": 3, "mangled:text_entries_only_no_content": 3,
             "mangled:tool_results_reordered": 3, "earlier tool result edited": 5, "vendor thinking parameter": 3}


@pytest.fixture()
async def gateways(sim: Any, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with gateway_pair(sim.url, redis_url, "memo-openai-secret") as pair:
        yield pair


def _exchange(body: dict[str, Any]) -> Callable[[], pipeline.Exchange]:
    return exchange_of(body, endpoint="chat_completions", dialect="openai", headers=HEADERS)


async def _prepare(ex: pipeline.Exchange, gw: Gateway) -> None:
    codec = chat.ChatCompletions(gw)
    codec.ex = ex
    await codec.prepare()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_pipeline_prepares_the_same_openai_request_with_and_without_the_memo(
        gateways: tuple[Gateway, Gateway], scenario: str) -> None:
    with_memo, _ = gateways
    assert with_memo.replay_memo is not None
    step_fn = SCENARIOS[scenario]
    history: History = [{"role": "user", "content": f"[[sim:tools=6]] weather ({scenario})"}]
    # reasoning_effort medium asks a budget above max_tokens: a parameter is fixed on every request
    params = {"model": "claude-opus-4-5", "max_tokens": 4096, "reasoning_effort": "medium", "tools": [WEATHER]}
    for step in range(7):
        sent, extra = step_fn(history, step)
        body = {**params, **extra, "messages": sent}
        ex = await prepare_both_ways(gateways, _exchange(body), _prepare)
        if step >= CONTINUED.get(scenario, 99):
            # each assistant message is its recorded turn (restored, or exactly it already): sanitize continues
            # over the previous request's messages, repair over those before the recent turns the load query
            # looked up (matched by their lookups: the index may answer them differently now), and the body
            # reuses the previous body's message JSON
            ticket, splice = ex.continuation.ticket, ex.continuation.splice
            assert ticket is not None and ticket.continued == len(sent) - 2, (step, ticket)
            assert ticket.resumed >= 1 and splice is not None and splice.prefix is not None, (step, ticket)
        answer = await relay_and_record(with_memo, ex, dialects.anthropic_headers(ex.client.headers))
        if answer["stop_reason"] != "tool_use":
            break
        turn = anthropic.decode_turn(answer)
        message = openai_chat.encode_completion(turn, created=0)["choices"][0]["message"]
        history.append({k: v for k, v in message.items() if v is not None})
        history += [{"role": "tool", "tool_call_id": c["id"], "content": f"sunny {step}"}
                    for c in message["tool_calls"]]
    shared_blocks_unchanged(*gateways)
    if scenario in ("mangled:faithful", "assistant messages split in two", "a system note in the history",
                    "vendor thinking parameter"):
        assert with_memo.replay_memo.hits >= 5, with_memo.replay_memo.hits


async def test_a_responses_shaped_body_is_served_and_not_kept(gateways: tuple[Gateway, Gateway]) -> None:
    """Its history is not in ``messages``: there is no end of the messages to find in its bytes."""
    with_memo, _ = gateways
    assert with_memo.replay_memo is not None
    ex = _exchange({"model": "claude-opus-4-5", "max_output_tokens": 1024, "input": "hello"})()
    await _prepare(ex, with_memo)
    assert ex.continuation.ticket is None
    await relay_and_record(with_memo, ex, dialects.anthropic_headers(ex.client.headers))
    assert len(with_memo.replay_memo) == 0

"""The replay memo (``gateway.replay_memo``): a faithful replay's history is not decoded again, and nothing
the gateway sends upstream or decides depends on whether it was.

Unit tests hold the memo to its rules; the equivalence tests run tool loops (faithful and mangled, real
simulator, real Redis) through the request pipeline twice per step, with the memo and without it, and
require the same upstream body, actions and record plan at every step.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gateway import pipeline
from gateway.app import Gateway, create_app
from gateway.protocols import anthropic
from gateway.protocols.canonical import Message
from gateway.replay_memo import ReplayMemo
from gateway.settings import Settings
from gateway.upstream import forward_request_headers
from tests.manglings import HISTORY_MANGLINGS, MESSAGE_MANGLINGS, mangle_assistants

SIG = "Eq" + "x" * 60


def history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=9]] weather"}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"step {i}", "signature": SIG},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": f"c{i}", "n": 1}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                                  "content": f"sunny {i}"}]})
    return msgs


def fresh(raw: list[dict[str, Any]]) -> list[Any]:
    """The client's messages as a new request parses them (new objects every time)."""
    return orjson.loads(orjson.dumps(raw))  # type: ignore[no-any-return]


def take(memo: ReplayMemo, raw: list[Any], tenant: str = "t1") -> tuple[list[Message], Any]:
    return memo.take(tenant, raw, anthropic.decode_message)


def test_a_replay_reuses_the_previous_requests_messages_and_decodes_only_the_new_ones() -> None:
    memo = ReplayMemo(1 << 20)
    first = fresh(history(3))
    msgs, ticket = take(memo, first)
    assert ticket is not None and ticket.reused == 0 and (memo.hits, memo.misses) == (0, 1)
    memo.keep(ticket, 1000)
    nxt = fresh(history(4))
    again, ticket2 = take(memo, nxt)
    assert ticket2 is not None and ticket2.reused == len(first) and memo.hits == 1
    assert all(a is b for a, b in zip(again[:len(first)], msgs, strict=False))  # the same objects, not decoded
    fresh_decode = [anthropic.decode_message(m, i) for i, m in enumerate(fresh(history(4)))]
    assert again == fresh_decode
    assert [m.replay_digest for m in again] == [m.replay_digest for m in fresh_decode]
    assert len(memo) == 0  # taken: no second request can share these objects
    _, third = take(memo, fresh(history(4)))
    assert third is not None and third.reused == 0


def test_a_message_decoded_on_the_way_is_decoded_again_and_the_verbatim_mark_is_cleared() -> None:
    memo = ReplayMemo(1 << 20)
    msgs, ticket = take(memo, fresh(history(2)))
    assistant = msgs[1]
    assert assistant.raw_blocks is not None
    assistant.content  # a stage built its blocks  # noqa: B018
    msgs[3].verbatim = True  # repair matched it by digest
    assert ticket is not None
    memo.keep(ticket, 100)
    again, _ = take(memo, fresh(history(3)))
    assert again[1] is not assistant and again[1].raw_blocks is not None  # decoded again, lazily as fresh
    assert again[3] is msgs[3] and not again[3].verbatim
    assert again[0] is msgs[0]


@pytest.mark.parametrize("edit", ["earlier message edited", "value retyped as a string", "history shortened",
                                  "another tenant", "key order only"])
def test_what_is_and_is_not_the_same_prefix(edit: str) -> None:
    memo = ReplayMemo(1 << 20)
    _, ticket = take(memo, fresh(history(3)))
    assert ticket is not None
    memo.keep(ticket, 100)
    nxt = fresh(history(4))
    tenant = "t1"
    if edit == "earlier message edited":
        nxt[2]["content"][0]["content"] = "rainy 0"
    elif edit == "value retyped as a string":
        nxt[1]["content"][1]["input"]["n"] = "1"
    elif edit == "history shortened":
        nxt = nxt[:3]
    elif edit == "another tenant":
        tenant = "t2"
    else:
        nxt[1]["content"][1] = dict(reversed(list(nxt[1]["content"][1].items())))
    msgs, t2 = memo.take(tenant, nxt, anthropic.decode_message)
    assert t2 is not None
    assert t2.reused == (len(history(3)) if edit == "key order only" else 0)  # JSON-equal values reuse
    assert msgs == [anthropic.decode_message(m, i) for i, m in enumerate(nxt)]


def test_bounded_by_bytes_least_recently_kept_first() -> None:
    memo = ReplayMemo(250)
    for n in range(3):
        raw = fresh(history(1))
        raw[0]["content"] = f"conversation {n}"
        _, ticket = take(memo, raw)
        assert ticket is not None
        memo.keep(ticket, 100)
    assert len(memo) == 2 and memo.size_bytes == 200
    _, ticket = take(memo, fresh(history(1)))
    assert ticket is not None
    memo.keep(ticket, 251)  # larger than the whole memo: not kept
    assert len(memo) == 2


def _nested(depth: int) -> Any:
    v: Any = "x"
    for _ in range(depth):
        v = [v]
    return v


def test_a_body_nested_deeper_than_python_compares_is_decoded_not_reused() -> None:
    memo = ReplayMemo(1 << 20)
    raw = fresh(history(1))
    raw[2]["content"][0]["content"] = _nested(2000)  # orjson parses 1,024 levels; Python compares fewer
    _, ticket = take(memo, raw)
    assert ticket is not None
    memo.keep(ticket, 100)
    nxt = [*fresh(history(1)), {"role": "assistant", "content": "done"}]
    nxt[2]["content"][0]["content"] = _nested(2000)
    msgs, t2 = take(memo, nxt)
    assert t2 is not None and t2.reused == 0 and len(msgs) == len(nxt)


# ------------------------------------------------------------------ equivalence through the pipeline

KEY = "sk-memo-equivalence"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"}
Step = Callable[[list[dict[str, Any]], int], tuple[list[dict[str, Any]], dict[str, Any]]]


def _faithful(h: list[dict[str, Any]], step: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return h, {}


def _message_mangling(name: str) -> Step:
    return lambda h, step: (mangle_assistants(h, name), {})


def _history_mangling(name: str) -> Step:
    return lambda h, step: (HISTORY_MANGLINGS[name](h), {})


def _edit_at_step_3(h: list[dict[str, Any]], step: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if step >= 3 and len(h) > 3:
        h = copy.deepcopy(h)
        h[2]["content"][0]["content"] = "edited result"  # the client edits an earlier tool result
    return h, {}


def _thinking_off_at_step_3(h: list[dict[str, Any]], step: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return h, ({"thinking": {"type": "disabled"}} if step == 3 else {})


SCENARIOS: dict[str, Step] = {
    "faithful": _faithful,
    **{f"assistant:{n}": _message_mangling(n) for n in MESSAGE_MANGLINGS if n != "faithful"},
    **{f"history:{n}": _history_mangling(n) for n in HISTORY_MANGLINGS},
    "earlier tool result edited": _edit_at_step_3,
    "thinking disabled at step 3": _thinking_off_at_step_3,
}


@pytest.fixture()
async def gateways(sim: Any, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    app = create_app(Settings(anthropic_base_url=sim.url, redis_url=redis_url, secret="memo-equivalence-secret",
                              store_timeout_ms=2000))
    async with app.router.lifespan_context(app):
        with_memo: Gateway = app.state.gateway
        assert with_memo.replay_memo is not None
        yield with_memo, dataclasses.replace(with_memo, replay_memo=None)


_ids = itertools.count()


def _exchange(body: dict[str, Any]) -> pipeline.Exchange:
    return pipeline.Exchange(endpoint="messages", dialect="anthropic", request_id=f"req_memo_{next(_ids)}",
                             headers=dict(HEADERS), query="", raw_body=orjson.dumps(body))


def _plan(ex: pipeline.Exchange) -> tuple[Any, ...]:
    """What the pipeline decided (a conversation it starts gets a random id: only a found one counts)."""
    fresh_id = ex.expected_position == 0 and ex.scid != ex.header_scid
    assert ex.request is not None
    canonical = orjson.dumps(anthropic.encode_request(ex.request))  # the messages as the stages left them
    return (ex.outgoing, canonical, [(a.kind, a.message_index, a.detail) for a in ex.actions], ex.changed,
            None if fresh_id else ex.scid, ex.via, ex.expected_position, ex.fork, ex.prefix_fp)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_pipeline_prepares_the_same_request_with_and_without_the_memo(
        gateways: tuple[Gateway, Gateway], scenario: str) -> None:
    with_memo, without = gateways
    assert with_memo.replay_memo is not None
    step_fn = SCENARIOS[scenario]
    history_: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools=6]] weather ({scenario})"}]
    params = {"model": "claude-opus-4-5", "max_tokens": 4096,
              "thinking": {"type": "enabled", "budget_tokens": 2048},
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    upstream = with_memo.upstreams["anthropic"]
    for step in range(7):
        sent, extra = step_fn(history_, step)
        body = {**params, **extra, "messages": sent}
        reference = _exchange(body)  # the same worker memory (conversation hints), no replay memo:
        await pipeline.prepare(reference, dataclasses.replace(without, hints=copy.deepcopy(with_memo.hints)))
        ex = _exchange(body)
        await pipeline.prepare(ex, with_memo)
        got, want = _plan(ex), _plan(reference)
        assert got[1:] == want[1:] and got[0] == want[0], f"step {step}: {got[1:]} != {want[1:]}"
        resp = await upstream.post("/v1/messages", ex.outgoing, forward_request_headers(ex.headers), "")
        answer = orjson.loads(await resp.read())
        assert resp.status == 200, answer
        await pipeline.record(ex, with_memo, anthropic.decode_turn(answer))
        assert ex.recorded
        if answer["stop_reason"] != "tool_use":
            break
        history_.append({"role": "assistant", "content": answer["content"]})
        history_.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b["id"], "content": f"sunny {step}"}
            for b in answer["content"] if b["type"] == "tool_use"]})
    if scenario == "faithful":
        assert with_memo.replay_memo.hits >= 5
        hits = with_memo.replay_memo.hits
        reference, retry = _exchange(body), _exchange(body)  # the client retries its last request
        await pipeline.prepare(reference, dataclasses.replace(without, hints=copy.deepcopy(with_memo.hints)))
        await pipeline.prepare(retry, with_memo)
        assert _plan(retry) == _plan(reference) and with_memo.replay_memo.hits == hits + 1
        assert retry.memo is not None and retry.memo.reused == len(body["messages"])

"""The replay memo (``gateway.continuation.replay_memo``): a faithful replay's history is not decoded again, and nothing
the gateway sends upstream or decides depends on whether it was.

Unit tests hold the memo to its rules; the equivalence tests run tool loops (faithful and mangled, real
simulator, real Redis) through the request pipeline twice per step, with the memo and without it, and
require the same upstream body, actions and record plan at every step.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from gateway.app.factory import Gateway
from gateway.continuation.replay_memo import Carried, ReplayMemo, entry_cost, one_to_one
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message
from gateway.dialects.routing import caps_for
from gateway.errors import GatewayError
from gateway.pipeline import stages as pipeline
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import Records
from gateway.pipeline.sanitize.core import NO_LOOP, Policy, Sanitized
from gateway.transport.upstream import forward_request_headers
from state.coherence import held
from tests.support.gateway.memo_equivalence import (
    answered,
    exchange_of,
    gateway_pair,
    prepare_both_ways,
    relay_and_record,
    shared_blocks_unchanged,
)
from tests.support.manglings.anthropic import HISTORY_MANGLINGS, MESSAGE_MANGLINGS, mangle_assistants

SIG = "Eq" + "x" * 60
KIND, RESUME = "anthropic", one_to_one(anthropic.decode_message)


def history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=9]] weather"}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"step {i}", "signature": SIG},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": f"c{i}", "n": 1}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                                  "content": f"sunny {i}"}]})
    return msgs


FORMATS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "compact": orjson.dumps,
    "sdk": lambda b: json.dumps(b).encode(),  # ", " and ": " separators, non-ASCII escaped
    "pretty": lambda b: json.dumps(b, indent=2, ensure_ascii=False).encode() + b"\n",
}


def body(turns: int, fmt: str = "compact", *, messages_last: bool = False, **extra: Any) -> bytes:
    fields: dict[str, Any] = {"max_tokens": 4096, "messages": history(turns), "model": "claude-opus-4-5",
                              "thinking": {"type": "enabled", "budget_tokens": 2048},
                              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    fields.update(extra)
    if messages_last:
        fields["messages"] = fields.pop("messages")
    return FORMATS[fmt](fields)


def served(memo: ReplayMemo, raw: bytes, tenant: str = "t1", *, keep: bool = True) -> tuple[list[Message], Any]:
    """One request through the memo as the pipeline uses it: a replay, or parsed and decoded in full;
    kept afterwards (as if untouched and recorded)."""
    replay = memo.take(tenant, KIND, raw, RESUME)
    if replay is not None:
        parsed, msgs, ticket = replay
    else:
        parsed = orjson.loads(raw)
        msgs = [anthropic.decode_message(m, i) for i, m in enumerate(parsed["messages"])]
        ticket = memo.ticket(tenant, KIND, raw, parsed, msgs)
    assert parsed == orjson.loads(raw)  # what parsing the whole body gives
    fresh = [anthropic.decode_message(m, i) for i, m in enumerate(parsed["messages"])]
    assert _state(msgs) == _state(fresh)  # what decoding them gives (compared without building blocks)
    if keep:
        memo.keep(ticket)
    return msgs, ticket


def _state(msgs: list[Message]) -> list[tuple[Any, ...]]:
    return [(anthropic.encode_message(m), m.replay_digest, m.raw_blocks is None) for m in msgs]


@pytest.mark.parametrize("messages_last", [False, True])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_replay_parses_and_decodes_only_its_new_messages(fmt: str, messages_last: bool) -> None:
    memo = ReplayMemo(1 << 20)
    first, t1 = served(memo, body(3, fmt, messages_last=messages_last))
    assert t1.reused == 0 and (memo.hits, memo.misses) == (0, 1) and len(memo) == 1
    again, t2 = served(memo, body(4, fmt, messages_last=messages_last))
    assert t2.reused == len(first) and memo.hits == 1
    assert all(a is b for a, b in zip(again, first, strict=False))  # the same objects, not decoded again
    assert [m.replay_digest for m in again] == [
        anthropic.decode_message(m, i).replay_digest for i, m in enumerate(history(4))]
    _, t3 = served(memo, body(6, fmt, messages_last=messages_last))  # two rounds later: still its prefix
    assert t3.reused == len(again) and memo.hits == 2 and len(memo) == 1


@pytest.mark.parametrize("messages_last", [False, True])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_replay_of_a_counted_body_has_only_its_new_bytes_counted(fmt: str, messages_last: bool) -> None:
    """The memory estimate's count of ``{`` (``Match.objects``): the kept count plus a count of what the replay
    inserted, exact for every formatting; a body kept without a count, or no replay, is counted in full. ``take``
    starts from the match while its entry is kept."""
    memo = ReplayMemo(1 << 20)
    first = body(3, fmt, messages_last=messages_last)
    _, ticket = served(memo, first, keep=False)
    assert memo.match("t1", KIND, first).objects(first) == first.count(b"{")  # nothing kept: counted in full
    ticket.objects = first.count(b"{") + 1000  # a count the kept body does not have: the replay's shows it was used
    memo.keep(ticket)
    second = body(5, fmt, messages_last=messages_last)
    found = memo.match("t1", KIND, second)
    assert found.objects(second) == second.count(b"{") + 1000
    assert memo.match("t2", KIND, second).objects(second) == second.count(b"{")  # another tenant's: none of its own
    other = body(5, fmt, messages_last=messages_last, model="other")
    assert memo.match("t1", KIND, other).objects(other) == other.count(b"{")  # not a replay: counted in full
    replay = memo.take("t1", KIND, second, RESUME, found)
    assert replay is not None and replay[2].reused == len(history(3))  # taken from the match
    assert memo.take("t1", KIND, second, RESUME, found) is None  # the entry serves one request: gone
    memo.keep(replay[2])  # kept again, without a count
    unknown = replay[2]
    sixth = body(6, fmt, messages_last=messages_last)
    assert unknown.objects is None and memo.match("t1", KIND, sixth).objects(sixth) == sixth.count(b"{")


def test_a_retry_of_the_same_body_reuses_every_message_and_an_entry_serves_one_request() -> None:
    memo = ReplayMemo(1 << 20)
    first, _ = served(memo, body(2))
    again, ticket = served(memo, body(2), keep=False)
    assert ticket.reused == len(first) == len(again) and len(memo) == 0
    _, third = served(memo, body(2))
    assert third.reused == 0  # taken by the request before: decoded in full


def test_a_message_decoded_on_the_way_is_decoded_again_and_repair_finds_it_verbatim_afresh() -> None:
    memo = ReplayMemo(1 << 20)
    msgs, ticket = served(memo, body(2), keep=False)  # the ticket is made as decoded, before any stage
    assistant = msgs[1]
    assistant.content  # a stage built its blocks  # noqa: B018
    msgs[2].content = list(msgs[2].content)  # a stage replaced a user message's content (same blocks)
    memo.keep(ticket)
    again, _ = served(memo, body(3))
    assert again[1] is not assistant and again[1].raw_blocks is not None  # decoded again, lazily as fresh
    assert again[2] is not msgs[2]  # no longer the content decoding made: decoded again
    assert again[3] is msgs[3]
    assert repair(again, Records()).verbatim == []  # no record matches it this time
    assert again[0] is msgs[0]


def test_only_messages_sanitize_continued_over_with_an_outcome_to_continue_are_taken_unchecked() -> None:
    memo = ReplayMemo(1 << 20)
    _, ticket = served(memo, body(2), keep=False)
    ticket.continued = 3  # sanitize continued over 3 messages, but its outcome is not one to continue
    memo.keep(ticket)
    _, again = served(memo, body(3), keep=False)
    assert again.reused == 5 and again.unchecked == 0
    again.continued = 5
    again.carried = Carried(sanitized=Sanitized(5, 2, (caps_for("claude-opus-4-5"), "anthropic", Policy()), (),
                                                (set(), ()), NO_LOOP, True, again.messages))
    memo.keep(again)
    _, third = served(memo, body(4))
    assert third.reused == 7 and third.unchecked == 5


def test_a_message_whose_blocks_were_only_peeked_at_is_reused_as_it_is() -> None:
    memo = ReplayMemo(1 << 20)
    msgs, _ = served(memo, body(2))
    peeked = msgs[1].peek_content()
    assert peeked and msgs[1].raw_blocks is not None  # looked at, still undecoded
    again, ticket = served(memo, body(3))
    assert again[1] is msgs[1] and ticket.redecoded == 0
    assert again[1].peek_content() is peeked  # built once
    assert again[1].content is not peeked and again[1].content == peeked  # decoding in place builds its own
    msgs[1].content  # noqa: B018  # built in place this time
    memo.keep(ticket)
    _, third = served(memo, body(4))
    assert third.redecoded == 1


def _retyped(b: bytes) -> bytes:
    return b.replace(b'"n":1', b'"n":1.0', 1)


NOT_A_REPLAY: dict[str, Callable[[], tuple[bytes, str]]] = {
    "earlier message edited": lambda: (body(4).replace(b"sunny 0", b"rainy 0"), "t1"),
    "a number retyped": lambda: (_retyped(body(4)), "t1"),
    "a later field changed": lambda: (body(4, max_tokens=8192), "t1"),
    "formatted differently": lambda: (body(4, "sdk"), "t1"),
    "history shortened": lambda: (body(2), "t1"),
    "another tenant": lambda: (body(4), "t2"),
    "messages appended with a trailing comma": lambda: (body(3).replace(b"}]}],", b"}]},],", 1), "t1"),
    "something other than messages inserted": lambda: (body(3).replace(b"}]}],", b'}]}],"x":[1],', 1), "t1"),
    "a new message after a semicolon": lambda: (
        body(3).replace(b"}]}],", b'}]};{"role":"user","content":"hi"}],', 1), "t1"),
}


@pytest.mark.parametrize("case", list(NOT_A_REPLAY))
def test_what_is_not_a_replay_goes_the_full_way(case: str) -> None:
    memo = ReplayMemo(1 << 20)
    served(memo, body(3))
    raw, tenant = NOT_A_REPLAY[case]()
    assert memo.take(tenant, KIND, raw, RESUME) is None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        assert case in ("messages appended with a trailing comma", "a new message after a semicolon")  # a 400
        return
    assert parsed["messages"] != history(3) or case in (
        "a later field changed", "another tenant", "formatted differently", "something other than messages inserted")


def test_the_end_of_the_messages_is_found_past_look_alikes_in_later_fields() -> None:
    decoy = [{"name": "t", "input_schema": {"enum": ["a"], "model": "not the field"}}]
    raw = orjson.dumps({"max_tokens": 4096, "messages": history(2), "model": "m", "tools": decoy,
                        "metadata": {"list": [1], "model": "x"}})
    memo = ReplayMemo(1 << 20)
    served(memo, raw)
    nxt = orjson.dumps({"max_tokens": 4096, "messages": history(3), "model": "m", "tools": decoy,
                        "metadata": {"list": [1], "model": "x"}})
    _, ticket = served(memo, nxt)
    assert ticket.reused == len(history(2))
    # a field named twice (the last value counts): the later "model" follows an array too
    dup = [b'{"messages":', orjson.dumps(history(1)), b',"model":"m","stop_sequences":["a"],"model":"m2"}']
    served(memo, b"".join(dup))
    dup[1] = orjson.dumps(history(2))
    _, ticket = served(memo, b"".join(dup))
    assert ticket.reused == len(history(1))


def test_deeply_nested_new_messages_go_the_full_way() -> None:
    memo = ReplayMemo(1 << 20)
    served(memo, body(1))
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    msgs = [*history(1), {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n",
                                                            "input": {"d": deep}}]}]
    raw = json.dumps({"max_tokens": 4096, "messages": msgs, "model": "claude-opus-4-5",
                      "thinking": {"type": "enabled", "budget_tokens": 2048},
                      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]},
                     separators=(",", ":")).encode()
    assert raw.startswith(body(1)[:-100].split(b'}]}]')[0])  # the same bytes up to the new message
    assert memo.take("t1", KIND, raw, RESUME) is None


def test_bounded_by_what_entries_hold_least_recently_kept_first() -> None:
    # an entry is sized by what it holds (``entry_cost``: its body and its parsed messages), not its bytes
    sizes = [entry_cost(body(1, extra=str(n)), held(orjson.loads(body(1, extra=str(n)))["messages"]))
             for n in range(3)]
    memo = ReplayMemo(sizes[0] * 2 + 10)
    for n in range(3):
        served(memo, body(1, extra=str(n)))
    assert len(memo) == 2 and memo.size_bytes == sizes[1] + sizes[2]
    assert memo.take("t1", KIND, body(2, extra="0"), RESUME) is None  # the oldest went
    assert memo.take("t1", KIND, body(2, extra="2"), RESUME) is not None
    small = ReplayMemo(sizes[0] * 2 - 10)
    served(small, body(1, extra="0"))
    assert len(small) == 0  # more than half the memo: not kept


def test_a_body_of_many_tiny_messages_is_not_kept() -> None:
    """3.3 MB of 100,001 tiny messages hold about 20 MB parsed: sized by its bytes it fit a 16 MiB memo
    (and its decoded form took a worker past 600 MB); sized by what it holds it is refused."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"} for i in range(100_001)]
    raw = orjson.dumps({"model": "claude-opus-4-5", "max_tokens": 16, "messages": msgs})
    assert len(raw) * 2 < 16 << 20
    memo = ReplayMemo(16 << 20)
    served(memo, raw)
    assert len(memo) == 0 and memo.size_bytes == 0


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


def _params_fixed(h: list[dict[str, Any]], step: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    # sanitize drops both on every request (thinking is on): a parameter fix, the messages untouched, kept
    return h, {"temperature": 0.5, "top_k": 5}


def _thinking_never_on(h: list[dict[str, Any]], step: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return h, {"thinking": None}  # (None: the field is left out)


SCENARIOS: dict[str, Step] = {
    "faithful": _faithful,
    "thinking never on": _thinking_never_on,
    "params fixed every request": _params_fixed,
    **{f"assistant:{n}": _message_mangling(n) for n in MESSAGE_MANGLINGS if n != "faithful"},
    **{f"history:{n}": _history_mangling(n) for n in HISTORY_MANGLINGS},
    "earlier tool result edited": _edit_at_step_3,
    "thinking disabled at step 3": _thinking_off_at_step_3,
}


# scenarios whose every request after the first continues sanitize's look at the history from the one before
# (the others' restored turns, edits and thinking switches are each a reason not to: the plan is still the same)
CONTINUED = {"faithful", "thinking never on", "params fixed every request"}


@pytest.fixture()
async def gateways(sim: Any, redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with gateway_pair(sim.url, redis_url, "memo-equivalence-secret") as pair:
        yield pair


def _exchange(body: dict[str, Any]) -> Callable[[], pipeline.Exchange]:
    return exchange_of(body, endpoint="messages", dialect="anthropic", headers=HEADERS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_pipeline_prepares_the_same_request_with_and_without_the_memo(
        gateways: tuple[Gateway, Gateway], scenario: str) -> None:
    with_memo, _ = gateways
    assert with_memo.replay_memo is not None
    step_fn = SCENARIOS[scenario]
    history_: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools=6]] weather ({scenario})"}]
    params = {"model": "claude-opus-4-5", "max_tokens": 4096,
              "thinking": {"type": "enabled", "budget_tokens": 2048},
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    counted = REGISTRY.get_sample_value("gateway_replay_memo_total", {"result": "hit"}) or 0.0
    for step in range(7):
        sent, extra = step_fn(history_, step)
        body = {k: v for k, v in {**params, **extra, "messages": sent}.items() if v is not None}
        ex = await prepare_both_ways(gateways, _exchange(body), pipeline.prepare)
        ticket = ex.continuation.ticket
        if step >= 2 and (scenario.startswith("assistant:") or scenario == "faithful"):
            assert ticket is not None and ticket.reused, ticket
        if step >= 1 and scenario in CONTINUED:
            # sanitize looked only at the new messages: the previous request's look at the others held
            assert ticket is not None and ticket.continued == len(sent) - 2, (step, ticket)
            # and the memo took the messages the request before continued over without checking them again
            assert ticket.unchecked == max(0, len(sent) - 4), (step, ticket.unchecked)
            # repair, too, from the second replay on (the first request had no conversation to match in)
            assert ticket.resumed == (len(sent) - 2 if step >= 2 else 0), (step, ticket.resumed)
        if step >= 2 and scenario.startswith("assistant:"):
            # a mangled replay: its turns are restored from their records, by the messages that took the client's
            # places on the previous request, so sanitize continues over them too, and repair at least over the
            # turns before the recent ones the load query looked up (from the third replay on, over all of them,
            # unless an index hit answers a restored turn's lookups: then it matches that turn afresh)
            assert ticket is not None and ticket.continued == len(sent) - 2, (step, ticket)
            assert ticket.resumed >= 1, (step, ticket)
            if step >= 4 and scenario != "assistant:empty_text_beside_tool_use":
                assert ticket.resumed == len(sent) - 2, (step, ticket)
        if step >= 2 and ticket is not None:
            # a mangled message was restored by a new message in its place, and no stage built a replayed
            # message's blocks in place: the memo hands every message it kept to this request as it is
            assert ticket.redecoded == 0, (step, ticket.redecoded)
        answer = await relay_and_record(with_memo, ex, forward_request_headers(ex.client.headers))
        if answer["stop_reason"] != "tool_use":
            break
        answered(history_, answer, f"sunny {step}")
    checked = shared_blocks_unchanged(*gateways)
    if scenario.startswith("assistant:"):
        # an IDE's mangled replay: repair restores its turns (each a new content list) and the memo still
        # serves every replay after the first, with the same plan as without it (prepare_both_ways)
        assert with_memo.replay_memo.hits >= 5, with_memo.replay_memo.hits
        assert checked > 0 or scenario.endswith(("drop_redacted", "drop_empty_signed_thinking"))
    if scenario == "params fixed every request":
        fixes = [a.kind.value for a in ex.plan.actions if a.kind.value != "kept_verified"]
        assert with_memo.replay_memo.hits >= 5 and fixes and set(fixes) == {"params_fixed"}, fixes
    if scenario == "faithful":
        assert with_memo.replay_memo.hits >= 5
        assert REGISTRY.get_sample_value("gateway_replay_memo_total", {"result": "hit"}) == \
            counted + with_memo.replay_memo.hits
        hits = with_memo.replay_memo.hits
        retry = await prepare_both_ways(gateways, _exchange(body), pipeline.prepare)  # the client retries
        assert with_memo.replay_memo.hits == hits + 1
        assert retry.continuation.ticket is not None and retry.continuation.ticket.reused == len(body["messages"])


async def test_repair_and_sanitize_look_again_at_turns_no_longer_recorded(sim: Any, redis_url: str) -> None:
    """The conversation keeps its last 2 turns: from the fourth request on, the oldest replayed turn's record
    is gone, repair cannot match it verbatim any more, and sanitize must judge it again (its thinking is now
    unverifiable) instead of continuing from the previous request's look at it. Same plan as without the memo
    at every step (``prepare_both_ways``)."""
    async with gateway_pair(sim.url, redis_url, "memo-trimmed-secret", state_max_turns=2) as pair:
        with_memo, _ = pair
        history_: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=6]] weather (trimmed)"}]
        params = {"model": "claude-opus-4-5", "max_tokens": 4096,
                  "thinking": {"type": "enabled", "budget_tokens": 2048},
                  "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
        continued: list[int] = []
        resumed: list[int] = []
        for step in range(6):
            ex = await prepare_both_ways(pair, _exchange({**params, "messages": history_}), pipeline.prepare)
            continued.append(ex.continuation.ticket.continued if ex.continuation.ticket is not None else -1)
            resumed.append(ex.continuation.ticket.resumed if ex.continuation.ticket is not None else -1)
            answer = await relay_and_record(with_memo, ex, forward_request_headers(ex.client.headers))
            answered(history_, answer, f"sunny {step}")
        # while every turn is still recorded, it continues; then it judges the whole history again (later requests
        # change a turn in place, so the memo does not keep them: -1)
        assert continued[:4] == [0, 1, 3, 0], continued
        assert resumed[:4] == [0, 0, 3, 0], resumed  # repair: the trimmed turn is no longer held


def test_a_field_nested_deeper_than_python_compares_is_not_kept_and_never_raises() -> None:
    """A hostile client nests a later field ~1,000 levels deep (orjson parses up to 1,024): the request is
    served as any other, and keeping it (after its turn was recorded) must not fail the request."""
    raw = b'{"messages":' + orjson.dumps(history(1)) + b',"metadata":' + b"[" * 1010 + b"]" * 1010 + \
        b',"model":"claude-opus-4-5","max_tokens":4096}'
    parsed = orjson.loads(raw)
    memo = ReplayMemo(1 << 20)
    msgs = [anthropic.decode_message(m, i) for i, m in enumerate(parsed["messages"])]
    memo.keep(memo.ticket("t1", KIND, raw, parsed, msgs))
    assert len(memo) == 0


@pytest.mark.parametrize("bad", [{"role": "assistant", "content": 7}, [], None,
                                 {"role": "user", "content": [{"type": "tool_result"}]}],
                         ids=["content not a list", "a list", "null", "tool_result without id"])
async def test_an_invalid_new_message_in_a_replay_is_the_same_400_as_without_the_memo(
        gateways: tuple[Gateway, Gateway], bad: Any) -> None:
    """The replay's new messages are decoded alone; a bad one is the client's 400, naming its index in the
    whole request, exactly as a full decode names it (the kept entry is used up, nothing else changes)."""
    with_memo, without = gateways
    assert with_memo.replay_memo is not None
    params = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    sent = [{"role": "user", "content": "[[sim:tools=2]] weather (bad replay)"}]
    ex = await prepare_both_ways(gateways, _exchange({**params, "messages": sent}), pipeline.prepare)
    answer = await relay_and_record(with_memo, ex, forward_request_headers(ex.client.headers))
    assert len(with_memo.replay_memo) == 1
    replay = {**params, "messages": [*sent, {"role": "assistant", "content": answer["content"]}, bad]}
    errors = []
    for gw in (with_memo, without):
        with pytest.raises(GatewayError) as e:
            await pipeline.prepare(_exchange(replay)(), gw)
        errors.append((e.value.status, str(e.value)))
    assert errors[0] == errors[1] and errors[0][0] == 400 and "messages.2" in errors[0][1], errors
    assert with_memo.replay_memo.hits == 0 and len(with_memo.replay_memo) == 0  # taken, then refused


def test_sizing_stops_once_a_value_is_over_what_the_caller_asks() -> None:
    """A body the memo refuses is not walked whole (100,000 messages took ~0.3 s on the event loop after every
    answer): ``held(obj, over=n)`` returns as soon as the sum passes ``n``, and the whole sum when it never does."""
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(10_000)]
    whole = held(msgs)
    assert held(msgs, over=whole) == whole
    partial = held(msgs, over=10_000)
    assert 10_000 < partial < whole // 10

"""The official anthropic SDK -> real `thinkgate serve` -> real `thinkgate sim`."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.support.e2e.helpers import run_tool_loop, run_tool_loop_async
from tests.support.manglings.anthropic import mangle_assistants


@pytest.fixture()
def client(gateway: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-test-e2e", max_retries=0) as c:
        yield c


def _masked(msg: anthropic.types.Message) -> list[tuple[str, object]]:
    """Content with the per-response random parts (ids, signatures) masked."""
    out: list[tuple[str, object]] = []
    for b in msg.content:
        if b.type == "thinking":
            out.append(("thinking", b.thinking))
        elif b.type == "text":
            out.append(("text", b.text))
        elif b.type == "tool_use":
            out.append(("tool_use", (b.name, b.input)))
        else:
            out.append((b.type, None))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_sync_tool_loop_with_thinking_completes(sim: Sim, client: anthropic.Anthropic, stream: bool) -> None:
    before = sim.stats()
    result = run_tool_loop(client, "[[sim:tools=3]] weather in Paris, Rome, Oslo?", stream=stream)
    assert result.requests == 4
    first = result.answers[0]
    assert first.content[0].type == "thinking"
    thinking = first.content[0].thinking
    assert "\r\n" in thinking and thinking != thinking.strip()  # awkward bytes arrived intact
    assert first.content[0].signature
    assert [a.stop_reason for a in result.answers] == ["tool_use"] * 3 + ["end_turn"]
    after = sim.stats()
    assert sum(after["rejections"].values()) == sum(before["rejections"].values())


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
async def test_async_tool_loop_with_parallel_calls(sim: Sim, gateway: ServerProcess, stream: bool) -> None:
    before = sim.stats()
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key="sk-test-e2e", max_retries=0)
    async with client:
        result = await run_tool_loop_async(client, "[[sim:tools=2]] [[sim:parallel=3]] compare cities",
                                           stream=stream)
    assert result.requests == 3
    assert sum(1 for b in result.answers[0].content if b.type == "tool_use") == 3
    assert sum(sim.stats()["rejections"].values()) == sum(before["rejections"].values())


def test_streamed_turn_equals_non_stream_answer(client: anthropic.Anthropic) -> None:
    params = {"model": "claude-opus-4-5", "max_tokens": 4096,
              "thinking": {"type": "enabled", "budget_tokens": 2048},
              "messages": [{"role": "user", "content": "[[sim:tools=1]] [[sim:redacted]] same answer twice"}],
              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    plain = client.messages.create(**params)
    with client.messages.stream(**params) as s:
        events = [e.type for e in s]
        streamed = s.get_final_message()
    assert _masked(streamed) == _masked(plain)
    assert [b.type for b in streamed.content][:2] == ["thinking", "redacted_thinking"]
    assert "content_block_delta" in events and events[-1] == "message_stop"
    assert streamed.stop_reason == plain.stop_reason == "tool_use"


def test_adaptive_omitted_thinking_replays(sim: Sim, client: anthropic.Anthropic) -> None:
    """Empty thinking text with a signature (display: omitted) survives a tool loop."""
    before = sim.stats()
    result = run_tool_loop(client, "[[sim:tools=2]] omitted thinking", stream=True,
                           thinking={"type": "adaptive", "display": "omitted"})
    assert result.requests == 3
    for answer in result.answers:
        assert answer.content[0].type == "thinking" and answer.content[0].thinking == ""
        assert answer.content[0].signature
    assert sum(sim.stats()["rejections"].values()) == sum(before["rejections"].values())


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("replay", ["faithful", "trim_thinking"])
def test_an_sdk_tool_loop_replays_its_history_without_decoding_it_again(
        sim: Sim, gateways: GatewayFactory, redis_url: str, stream: bool, replay: str) -> None:
    """The SDK sends each round's history as the previous round's body with the new messages inserted:
    from the second request on, the gateway parses and decodes only those (``gateway.continuation.replay_memo``), and
    every request still reaches the simulator in the form it accepts. Also when the client trims every
    replayed thinking text (an IDE's mangling): each turn is restored from its record in Redis, sent
    upstream as recorded, and the restored request is still kept for the next one. From the fourth request on,
    repair, sanitize and the body's message JSON continue from the request before (``repair_state.Repaired``), which
    must still give each restored turn its ``restored`` action. Each request loads in one round trip (by the SCID
    its tool ids' hint names: the worker's cache hands its head to Redis, which sends back nothing new) and records
    in one: what a worker holds serves only as of the head its own round trip reads (``state.coherence``)."""
    gateway = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_url,
                                       "GATEWAY_SECRET": "sdk-memo-secret-0123456789abcdef"})
    rejections = sum(sim.stats()["rejections"].values())
    mangle = None if replay == "faithful" else (lambda h: mangle_assistants(h, replay))
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-test-sdk-memo", max_retries=0) as client:
        result = run_tool_loop(client, "[[sim:tools=7]] weather in seven cities, one at a time", stream=stream,
                               mangle=mangle)
    assert result.requests == 8 and result.answers[-1].stop_reason == "end_turn"
    assert metric_sum(gateway, "gateway_replay_memo_total", result="hit") == result.requests - 1
    restored = metric_sum(gateway, "gateway_sanitize_actions_total", action="restored")
    # only a tool loop's first turn thinks (no interleaved thinking): it is restored on every later request
    assert restored == (0 if replay == "faithful" else result.requests - 1)
    # every load reads the head in Redis (the first request has nothing to look up: no round trip)
    assert metric_sum(gateway, "gateway_store_round_trips_total", op="load") == result.requests - 1
    assert metric_sum(gateway, "gateway_store_round_trips_total", op="record") == result.requests
    assert sum(sim.stats()["rejections"].values()) == rejections

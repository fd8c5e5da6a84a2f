"""The official openai SDK -> real `thinkgate serve` -> real `thinkgate sim` (Anthropic upstream)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.process_fixtures import ServerProcess, Sim
from tests.support.openai.helpers import THINKING, Answer, ask, ask_async, run_loop


@pytest.fixture()
def client(gateway: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test-openai", max_retries=0) as c:
        yield c


@pytest.fixture()
def no_rejections(sim: Sim) -> Iterator[None]:
    before = sum(sim.stats()["rejections"].values())
    yield
    assert sum(sim.stats()["rejections"].values()) == before, "the simulator rejected a request"


def _masked(a: Answer) -> tuple[Any, ...]:
    """An answer without its per-response random parts (ids, signatures)."""
    return (a.content, a.reasoning_content, a.calls(), a.finish_reason,
            [(d["type"], d.get("text"), d["format"], d["index"]) for d in a.reasoning_details])


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_sync_tool_loop_with_thinking(client: openai.OpenAI, no_rejections: None, stream: bool) -> None:
    answers = run_loop(lambda h: ask(client, h, stream=stream, extra_body=THINKING),
                       "[[sim:tools=3]] weather in Paris, Rome, Oslo?")
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 3 + ["stop"]
    first = answers[0]
    assert first.signed() and first.reasoning_details[0]["format"] == "anthropic-claude-v1"
    thinking = first.reasoning_details[0]["text"]
    assert first.reasoning_content == thinking
    assert "\r\n" in thinking and thinking != thinking.strip() and "思考 🤔" in thinking  # bytes intact
    assert all(a.scid and a.gateway == {"conversation_id": a.scid} for a in answers)
    assert len({a.scid for a in answers}) == 1, "one conversation"
    assert answers[-1].content and answers[-1].content.startswith("Final answer after 3 tool rounds")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
async def test_async_parallel_tool_loop_with_reasoning_effort(gateway: ServerProcess, no_rejections: None,
                                                              stream: bool) -> None:
    async with openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-test-openai", max_retries=0) as c:
        history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=2]] [[sim:parallel=3]] compare"}]
        answers: list[Answer] = []
        for _ in range(5):
            answer = await ask_async(c, history, stream=stream, reasoning_effort="low",
                                     extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
            answers.append(answer)
            if answer.finish_reason != "tool_calls":
                break
            history.append(answer.message())
            history += [{"role": "tool", "tool_call_id": tc["id"], "content": "ok"} for tc in answer.tool_calls]
    assert [a.finish_reason for a in answers] == ["tool_calls", "tool_calls", "stop"]
    assert len(answers[0].tool_calls) == 3 and len({c["id"] for c in answers[0].tool_calls}) == 3
    assert all(a.signed() for a in answers), "interleaved thinking on every answer"


def test_streamed_answer_equals_non_stream(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "[[sim:tools=1]] [[sim:parallel=2]] [[sim:redacted]] same twice"}]
    plain = ask(client, messages, stream=False, extra_body=THINKING)
    streamed = ask(client, messages, stream=True, extra_body=THINKING)
    assert _masked(streamed) == _masked(plain)
    assert [d["type"] for d in plain.reasoning_details] == ["reasoning.text", "reasoning.encrypted"]
    assert streamed.reasoning_details[1]["data"] and streamed.signed()
    assert len(streamed.calls()) == 2 and all(c["id"].startswith("toolu_") for c in streamed.tool_calls)


def test_usage_chunk_when_asked(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="claude-opus-4-5", stream=True,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": "hello"}])
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    usage = chunks[-1].usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_reasoning_exclude_hides_reasoning_but_keeps_the_loop_valid(client: openai.OpenAI,
                                                                   no_rejections: None) -> None:
    params = {"extra_body": {"reasoning": {"max_tokens": 2048, "exclude": True}},
              "extra_headers": {"anthropic-beta": "interleaved-thinking-2025-05-14"}}
    answers = run_loop(lambda h: ask(client, h, stream=True, **params), "[[sim:tools=2]] hidden reasoning")
    assert len(answers) == 3
    assert all(a.reasoning_content is None and not a.reasoning_details for a in answers)

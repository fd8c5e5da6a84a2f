"""The official openai SDK -> real `thinkgate serve` -> real `thinkgate sim`: a tool loop's replayed
history is decoded once (``gateway.continuation.replay_memo`` on the OpenAI chat surface)."""

from __future__ import annotations

import openai
import pytest

from tests.process_fixtures import ServerProcess, Sim, metric_sum
from tests.support.openai.helpers import ask, run_loop


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_an_openai_sdk_tool_loop_replays_its_history_without_decoding_it_again(
        sim: Sim, gateway: ServerProcess, stream: bool) -> None:
    """Each round's body is the previous one's with the answer and its tool results inserted: from the
    second request on the gateway parses and decodes only those, and every request still reaches the
    simulator in the form it accepts (reasoning_effort medium also has a parameter fixed every time). From
    the fourth request on, repair, sanitize and the body's message JSON continue from the request before."""
    before = metric_sum(gateway, "gateway_replay_memo_total", result="hit")
    rejections = sum(sim.stats()["rejections"].values())
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test-openai-memo", max_retries=0) as client:
        answers = run_loop(lambda h: ask(client, h, stream=stream, reasoning_effort="medium", max_tokens=4096),
                           "[[sim:tools=7]] weather in seven cities, one at a time")
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 7 + ["stop"]
    assert answers[0].signed() and len({a.scid for a in answers}) == 1
    assert metric_sum(gateway, "gateway_replay_memo_total", result="hit") - before == len(answers) - 1
    assert sum(sim.stats()["rejections"].values()) == rejections

"""The Gemini acceptance matrix: OpenAI-surface and native-surface clients mangling replayed history,
stream and non-stream, with and without the SCID header, every request alternating between two gateway
processes that share one redis-server. The simulator rejects nothing, and every request it receives
carries each earlier answer's genuine signature on its first call (restored from the records, never the
bypass value) and its thought part. By default each case is played twice per surface, pairwise over
stream and header (``tests/pairwise.py``); the rest of the product is marked ``slow``."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tests.gemini.helpers import GEMINI, Rejections, run_loop, tool_messages
from tests.gemini.manglings import NATIVE, OPENAI
from tests.gemini.matrix import NativeLoop, OpenAILoop, Pair
from tests.pairwise import run_label, stream_header_params
from tests.process_fixtures import Sim
from tests.redis_fixtures import RedisServer

BYPASS = "skip_thought_signature_validator"
OPENAI_CASES = ["faithful", "drop_extra_content", "copy_signature_to_parallel_calls", "drop_reasoning_content",
                "drop_all_reasoning", "content_empty_list", "content_empty_string", "tool_ids_rewritten",
                "tool_results_reordered", "tool_ids_rewritten_no_reasoning"]
CONFIG = {"tools": [{"functionDeclarations": [  # two functions: parallel calls alternate between them
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}


@pytest.fixture()
def pair(provider_pair: Pair) -> Pair:
    return provider_pair


def assert_restored(bodies: list[dict[str, Any]]) -> None:
    """Request n replays n model turns, each with its thought and its own minted signature."""
    for n, body in enumerate(bodies):
        models = [c for c in body["contents"] if c["role"] == "model"]
        assert len(models) == n
        for content in models:
            parts = content["parts"]
            calls = [p for p in parts if "functionCall" in p]
            assert parts[0].get("thought") is True, "thought part restored"
            assert calls[0].get("thoughtSignature") not in (None, BYPASS), "genuine signature restored"
            assert all("thoughtSignature" not in p for p in calls[1:]), "parallel calls unsigned, as minted"


def assert_responses_in_call_order(body: dict[str, Any]) -> None:
    """Every model turn's function responses follow in the order of its calls (the tool messages say
    ``sunny in <arguments>``), however the client ordered its tool messages."""
    contents = body["contents"]
    for k, c in enumerate(contents):
        calls = [p["functionCall"]["args"] for p in c["parts"] if "functionCall" in p]
        if c["role"] == "model" and calls:
            assert len({orjson.dumps(a, option=orjson.OPT_SORT_KEYS) for a in calls}) == len(calls), "order shows"
            got = [orjson.loads(p["functionResponse"]["response"]["result"].removeprefix("sunny in "))
                   for p in contents[k + 1]["parts"]]
            assert got == calls, "function responses go upstream in call order"


@pytest.mark.parametrize(("case", "stream", "header"),
                         stream_header_params([(c,) for c in OPENAI_CASES], OPENAI_CASES))
def test_openai_surface_matrix(pair: Pair, sim: Sim, case: str, stream: bool, header: bool) -> None:
    loop = OpenAILoop(pair, GEMINI, stream, header, sim, {"reasoning_effort": "low"})
    try:
        with Rejections(sim):
            answers, history = run_loop(loop.send, f"[[sim:tools=2]] [[sim:parallel=2]] gemini case {case} "
                                        f"{run_label(stream, header)}",
                                        mangle=OPENAI[case])
    finally:
        loop.close()
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    assert len(set(loop.scids)) == 1, "the whole loop is one conversation"
    assert_restored(loop.bodies)
    assert_responses_in_call_order(loop.bodies[-1])
    if case == "tool_results_reordered":  # the client really sent them out of call order
        sent = OPENAI[case](history)
        k = next(k for k, m in enumerate(sent) if m.get("tool_calls"))
        assert [m["tool_call_id"] for m in sent[k + 1:k + 3]] == [c["id"] for c in sent[k]["tool_calls"][::-1]]


@pytest.mark.parametrize(("case", "stream", "header"),
                         stream_header_params([(c,) for c in sorted(NATIVE)], sorted(NATIVE),
                                              stream_ids=("generate", "stream")))
def test_native_surface_matrix(pair: Pair, sim: Sim, case: str, stream: bool, header: bool) -> None:
    loop = NativeLoop(pair, GEMINI, stream, header, sim)
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [
        {"text": f"[[sim:tools=2]] [[sim:parallel=2]] native case {case} {run_label(stream, header)}"}]}]
    with Rejections(sim):
        for _ in range(6):
            content = loop.send(NATIVE[case](contents), CONFIG)
            calls = [p["functionCall"] for p in content["parts"] if "functionCall" in p]
            if not calls:
                break
            contents.append(content)
            contents.append({"role": "user", "parts": [
                {"functionResponse": {"name": c["name"], "response": {"weather": "sunny", "args": c["args"]}}}
                for c in calls]})
    assert len(loop.bodies) == 3
    assert len(set(loop.scids)) == 1, "the whole loop is one conversation"
    assert_restored(loop.bodies)
    if case == "responses_reordered":  # function responses go upstream in call order
        last = loop.bodies[-1]["contents"]
        for k, c in enumerate(last):
            if c["role"] == "model":
                names = [p["functionCall"]["args"] for p in c["parts"] if "functionCall" in p]
                got = [p["functionResponse"]["response"]["args"] for p in last[k + 1]["parts"]]
                assert got == names


def test_openai_surface_history_not_replayed_twice(pair: Pair, sim: Sim) -> None:
    """Two conversations with the same prompt stay apart: each replays its own signatures."""
    loops = [OpenAILoop(pair, GEMINI, False, False, sim) for _ in range(2)]
    try:
        with Rejections(sim):
            histories: list[list[dict[str, Any]]] = [[{"role": "user", "content": "[[sim:tools=2]] twins"}]
                                                     for _ in loops]
            for _ in range(2):
                for loop, h in zip(loops, histories, strict=True):
                    answer = loop.send(copy.deepcopy(h))
                    h.append(answer.message)
                    h += tool_messages(answer)
    finally:
        for loop in loops:
            loop.close()
    assert len({loop.scids[-1] for loop in loops}) == 2


@pytest.mark.parametrize("case", ["faithful", "drop_extra_content"])
def test_openai_surface_with_records_expired(pair: Pair, sim: Sim, redis_server: RedisServer, case: str) -> None:
    """Records gone before every request: nothing vouches for a signature, so the current turn's first
    calls get the bypass value (never the client's unverifiable copy) and the simulator accepts."""
    loop = OpenAILoop(pair, GEMINI, False, True, sim)
    sends = loop.send

    def send_after_flush(history: list[dict[str, Any]]) -> Any:
        redis_server.flush()
        return sends(history)

    try:
        with Rejections(sim):
            answers, _ = run_loop(send_after_flush, f"[[sim:tools=2]] expired {case}", mangle=OPENAI[case])
    finally:
        loop.close()
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    for body in loop.bodies[1:]:
        calls = [p for c in body["contents"] if c["role"] == "model" for p in c["parts"] if "functionCall" in p]
        assert calls and all(p.get("thoughtSignature") == BYPASS for p in calls)

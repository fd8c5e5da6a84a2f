"""The OpenAI-compatible upstreams' acceptance matrix: per flavor, the ways OpenAI clients mangle
replayed history, stream and non-stream, with and without the SCID header, every request alternating
between two gateway processes on one redis-server. The simulator rejects nothing, and every request it
receives carries each earlier answer's provider fields exactly as they were relayed, with tool-only
assistant messages as ``content: null``. By default each (flavor, case) is played twice, pairwise over
stream and header (``tests/pairwise.py``); the rest of the product is marked ``slow``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gemini.helpers import COPILOT, DEEPSEEK, GEMINI_COMPAT, OPENROUTER, Answer, Rejections, run_loop
from tests.gemini.manglings import OPENAI
from tests.gemini.matrix import OpenAILoop, Pair
from tests.pairwise import run_label, stream_header_params
from tests.process_fixtures import Sim

CASES: dict[str, tuple[str, ...]] = {
    OPENROUTER: ("faithful", "drop_reasoning_details", "text_entries_only", "drop_all_reasoning",
                 "content_empty_list", "content_empty_string", "tool_ids_rewritten", "tool_results_reordered"),
    COPILOT: ("faithful", "drop_reasoning_opaque", "drop_all_reasoning", "content_empty_list",
              "content_empty_string", "tool_ids_rewritten_no_reasoning"),
    DEEPSEEK: ("faithful", "drop_reasoning_content", "drop_all_reasoning", "content_empty_string",
               "tool_ids_rewritten_no_reasoning"),
    GEMINI_COMPAT: ("faithful", "drop_extra_content", "copy_signature_to_parallel_calls", "drop_all_reasoning"),
}
FIELDS = {OPENROUTER: ("reasoning_details",), COPILOT: ("reasoning_opaque", "reasoning_text"),
          DEEPSEEK: ("reasoning_content",), GEMINI_COMPAT: ()}
MATRIX = [(model, case) for model, cases in CASES.items() for case in cases]


@pytest.fixture()
def pair(provider_pair: Pair) -> Pair:
    return provider_pair


def tool_runs(messages: list[dict[str, Any]]) -> list[tuple[list[str], list[str]]]:
    """Per assistant message: its tool-call ids and the ``tool_call_id``s of the tool messages after it."""
    runs = []
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            answered = []
            for t in messages[k + 1:]:
                if t["role"] != "tool":
                    break
                answered.append(t["tool_call_id"])
            runs.append(([c["id"] for c in m.get("tool_calls") or ()], answered))
    return runs


def assert_restored(model: str, answers: list[Answer], bodies: list[dict[str, Any]]) -> None:
    for n, body in enumerate(bodies):
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        assert len(sent) == n
        for (ids, answered), a in zip(tool_runs(body["messages"]), answers, strict=False):
            relayed = [c["id"] for c in a.tool_calls]
            assert ids == relayed, f"request {n}: the upstream's own tool-call ids go back, whatever the client sent"
            assert sorted(answered) == sorted(relayed), f"request {n}: tool results reference the upstream's ids"
        for m, a in zip(sent, answers, strict=False):
            for key in FIELDS[model]:
                assert m.get(key) == a.message.get(key), f"request {n}: {key} not replayed as relayed"
            assert m["content"] is None, "tool-only message sent with content null"
            if model == GEMINI_COMPAT:
                assert m["tool_calls"][0]["extra_content"] == a.tool_calls[0]["extra_content"]
                assert "extra_content" not in m["tool_calls"][1]


@pytest.mark.parametrize(("model", "case", "stream", "header"),
                         stream_header_params(MATRIX, [f"{m.split('/')[0]}-{c}" for m, c in MATRIX]))
def test_compat_matrix(pair: Pair, sim: Sim, model: str, case: str, stream: bool, header: bool) -> None:
    loop = OpenAILoop(pair, model, stream, header, sim, {"reasoning_effort": "low"})
    try:
        with Rejections(sim):
            answers, _ = run_loop(loop.send, f"[[sim:tools=2]] [[sim:parallel=2]] {model} case {case} "
                                  f"{run_label(stream, header)}",
                                  mangle=OPENAI[case])
    finally:
        loop.close()
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    assert len(set(loop.scids)) == 1, "the whole loop is one conversation"
    assert_restored(model, answers, loop.bodies)

"""A conversation that switches model family (Gemini -> Claude -> Gemini), at turn boundaries and in the
middle of a tool loop, through one OpenAI-surface client on two gateways sharing Redis: no signature or
reasoning minted for one family is ever sent to the other (it is degraded per the sanitize rules), and
the simulator rejects nothing."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.process_fixtures import Sim
from tests.support.gemini.helpers import CLAUDE, GEMINI, Answer, History, Rejections, tool_messages
from tests.support.gemini.matrix import OpenAILoop, Pair

BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
GEMINI_SIG_PREFIX = "dGdzMR"  # base64 of the simulator's Gemini signature envelope ("tgs1")
BYPASS = "skip_thought_signature_validator"


@pytest.fixture()
def pair(provider_pair: Pair) -> Pair:
    return provider_pair


def _walk(obj: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((k, v))
            out += _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _walk(v)
    return out


def check_no_foreign(body: dict[str, Any], claude_thoughts: set[str], gemini_thoughts: set[str]) -> None:
    raw = orjson.dumps(body).decode()
    pairs = _walk(body)
    assert not any(k == "_provider" for k, _ in pairs), "internal provider keys never leave thinkgate"
    if "contents" in body:  # to Gemini
        sigs = [v for k, v in pairs if k in ("thoughtSignature", "thought_signature")]
        assert all(s == BYPASS or s.startswith(GEMINI_SIG_PREFIX) for s in sigs), sigs
        assert not any(t in raw for t in claude_thoughts), "Claude thinking sent to Gemini"
        assert not any(b.get("type") == "thinking" for _, b in pairs if isinstance(b, dict))
    else:  # to Anthropic
        assert not any(k in ("thoughtSignature", "thought_signature") for k, _ in pairs)
        assert not any(t in raw for t in gemini_thoughts), "Gemini thoughts sent to Claude"
        assert not any(isinstance(v, str) and v.startswith(GEMINI_SIG_PREFIX) for _, v in pairs)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_switch_families_and_back(pair: Pair, sim: Sim, stream: bool) -> None:
    loop = OpenAILoop(pair, GEMINI, stream, True, sim)
    history: History = []
    thoughts: dict[str, set[str]] = {GEMINI: set(), CLAUDE: set()}
    models: list[str] = []

    def send(model: str) -> Answer:
        loop.model = model
        loop.params = {"extra_body": {"thinking": {"type": "enabled", "budget_tokens": 2048}},
                       "extra_headers": BETA} if model == CLAUDE else {"reasoning_effort": "low"}
        answer = loop.send(history)
        models.append(model)
        if answer.message.get("reasoning_content"):
            thoughts[model].add(answer.message["reasoning_content"].strip()[:40])
        history.append(answer.message)
        history.extend(tool_messages(answer))
        return answer

    try:
        with Rejections(sim):
            # (the first user message scripts two tool rounds per turn, for both simulated families)
            # turn 1 on Gemini, turn 2 on Claude, turn 3 on Gemini (whole tool loops)
            for n, model in enumerate((GEMINI, CLAUDE, GEMINI)):
                history.append({"role": "user", "content": f"[[sim:tools=2]] turn {n} family switch"})
                assert [send(model).finish_reason for _ in range(3)] == ["tool_calls", "tool_calls", "stop"]
            # turn 4 switches inside the tool loop: Gemini calls, Claude continues, Gemini finishes
            history.append({"role": "user", "content": "turn 3 mid-loop switch"})
            assert send(GEMINI).finish_reason == "tool_calls"
            assert send(CLAUDE).finish_reason == "tool_calls"
            assert send(GEMINI).finish_reason == "stop"
    finally:
        loop.close()
    assert all(thoughts[m] for m in thoughts), "both families reasoned"
    assert len(set(loop.scids)) == 1
    for body in loop.bodies:
        check_no_foreign(body, thoughts[CLAUDE], thoughts[GEMINI])
    last = loop.bodies[-1]
    sigs = [p.get("thoughtSignature") for c in last["contents"] if c["role"] == "model" for p in c["parts"]
            if "functionCall" in p]
    assert BYPASS in sigs, "Claude's call in the current Gemini turn gets the bypass value"
    assert any(s and s.startswith(GEMINI_SIG_PREFIX) for s in sigs), "Gemini's own signatures are restored"

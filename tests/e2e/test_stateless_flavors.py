"""The stateless path on every OpenAI-compatible flavor (issue 23 item 1): the openai SDK -> a gateway process -> the
strict simulator process, each flavor's tool loop replayed by a client that mangles it (``tests/manglings/openai``).

- With ``GATEWAY_STATE_MACHINE_ENABLED=false`` (the sanitizer alone) every mangling on every flavor gets no upstream
  4xx: what is whole goes as the client sent it, what is not is degraded the way the flavor's upstream accepts
  (``gateway/sanitize_compat.py``), and each degrade is counted as a sanitize action.
- With a store that holds no record (the shared redis-server flushed before every request) the same.
- A client that turns reasoning off mid-loop: on Gemini flavors the model thinks all the same and its reasoning is kept;
  on DeepSeek (``thinking: {"type": "disabled"}``) no ``reasoning_content`` goes upstream any more.
- Thinking is kept wherever it is whole: a faithful client's loop, stateless, replays each answer's fields as relayed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.gemini import helpers as gemini_helpers
from tests.gemini.helpers import COPILOT, DEEPSEEK, GEMINI_COMPAT, OPENROUTER, Rejections, gateway_env
from tests.gemini.matrix import OpenAILoop, Pair
from tests.manglings import openai as openai_manglings
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer

FLAVORS = {"openrouter": OPENROUTER, "copilot": COPILOT, "deepseek": DEEPSEEK, "generic": GEMINI_COMPAT}
FIELDS = {"openrouter": ("reasoning_details",), "copilot": ("reasoning_opaque", "reasoning_text"),
          "deepseek": ("reasoning_content",), "generic": ()}
CASES = sorted(openai_manglings.MANGLINGS)
# the manglings that remove what the flavor's upstream requires back: each must be degraded, not forwarded
DEGRADED = {"openrouter": {"drop_reasoning_details", "text_entries_only", "text_entries_only_no_content",
                           "drop_all_reasoning", "content_empty_string_no_reasoning",
                           "tool_ids_rewritten_no_reasoning"},
            "copilot": {"drop_reasoning_opaque", "drop_all_reasoning", "content_empty_string_no_reasoning",
                        "tool_ids_rewritten_no_reasoning"},
            "deepseek": {"drop_reasoning_content", "drop_all_reasoning", "content_empty_string_no_reasoning",
                         "text_entries_only_no_content", "tool_ids_rewritten_no_reasoning"}}
PROMPT = "[[sim:tools=2]] [[sim:parallel=2]]"


@pytest.fixture(scope="module")
def stateless(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    return gateways.start(sim.url, gateway_env(sim, GATEWAY_STATE_MACHINE_ENABLED="false"))


def _play(loop: OpenAILoop, prompt: str, mangle: Callable[[Any], Any], send: Callable[..., Any] | None = None
          ) -> list[gemini_helpers.Answer]:
    try:
        with Rejections(loop.sim):
            answers, _ = gemini_helpers.run_loop(send or loop.send, prompt, mangle=mangle)
    finally:
        loop.close()
    assert [a.finish_reason for a in answers][-1] == "stop"
    return answers


def _textualized(gw: ServerProcess) -> float:
    return metric_sum(gw, "gateway_sanitize_actions_total", action="tool_loop_textualized")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_every_mangling_state_machine_off(stateless: ServerProcess, sim: Sim, flavor: str, case: str,
                                          stream: bool) -> None:
    before = _textualized(stateless)
    loop = OpenAILoop(Pair(stateless, stateless), FLAVORS[flavor], stream, False, sim, {"reasoning_effort": "low"})
    _play(loop, f"{PROMPT} stateless {flavor} {case} {stream}", openai_manglings.MANGLINGS[case])
    if case in DEGRADED.get(flavor, ()):
        assert _textualized(stateless) > before, "the degrade is counted as a sanitize action"


@pytest.fixture
def flushed(provider_pair: Pair, redis_server: RedisServer) -> Iterator[Callable[[OpenAILoop], Callable[..., Any]]]:
    """A send that empties the store first: every request finds no record."""
    def wrap(loop: OpenAILoop) -> Callable[..., Any]:
        def send(history: Any) -> Any:
            redis_server.flush()
            return loop.send(history)
        return send
    yield wrap


@pytest.mark.parametrize(("flavor", "case"), [(f, c) for f in sorted(FLAVORS) for c in CASES])
def test_every_mangling_no_record(provider_pair: Pair, sim: Sim, flushed: Callable[[OpenAILoop], Callable[..., Any]],
                                  flavor: str, case: str) -> None:
    stream = CASES.index(case) % 2 == 1
    loop = OpenAILoop(provider_pair, FLAVORS[flavor], stream, True, sim, {"reasoning_effort": "low"})
    _play(loop, f"{PROMPT} no-record {flavor} {case}", openai_manglings.MANGLINGS[case], flushed(loop))


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_faithful_stateless_keeps_thinking(stateless: ServerProcess, sim: Sim, flavor: str) -> None:
    """Nothing to degrade: every request replays each earlier answer's reasoning fields exactly as relayed."""
    before = _textualized(stateless)
    loop = OpenAILoop(Pair(stateless, stateless), FLAVORS[flavor], False, False, sim, {"reasoning_effort": "low"})
    answers = _play(loop, f"{PROMPT} faithful kept {flavor}", openai_manglings.MANGLINGS["faithful"])
    for n, body in enumerate(loop.bodies):
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        assert len(sent) == n and all(m.get("tool_calls") for m in sent), "no step was written out as text"
        for m, a in zip(sent, answers, strict=False):
            for key in FIELDS[flavor]:
                assert m.get(key) == a.message.get(key), f"request {n}: {key} not replayed as relayed"
    assert _textualized(stateless) == before


@pytest.fixture(scope="module")
def modes(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> dict[str, ServerProcess]:
    """A gateway on the shared redis-server with the state machine on, and one with it off."""
    return {on: gateways.start(sim.url, gateway_env(sim, GATEWAY_REDIS_URL=redis_server.url,
                                                    GATEWAY_SECRET="stateless-flavors-secret-0123456789",
                                                    GATEWAY_STATE_MACHINE_ENABLED=on)) for on in ("true", "false")}


@pytest.mark.parametrize("state_machine", ["true", "false"])
@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_reasoning_off_mid_loop(modes: dict[str, ServerProcess], sim: Sim, flavor: str, state_machine: str) -> None:
    """The first request asks for reasoning, the later ones do not (DeepSeek: turn it off, its default is on)."""
    gw = modes[state_machine]
    loop = OpenAILoop(Pair(gw, gw), FLAVORS[flavor], False, True, sim, {"reasoning_effort": "low"})

    def send(history: Any) -> Any:
        answer = loop.send(history)
        loop.params = {"extra_body": {"thinking": {"type": "disabled"}}} if flavor == "deepseek" else {}
        return answer

    answers = _play(loop, f"{PROMPT} reasoning off mid-loop {flavor} {state_machine}",
                    openai_manglings.MANGLINGS["faithful"], send)
    later = loop.bodies[1:]
    assert later and all("reasoning_effort" not in b for b in later)
    for body in later:
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        if flavor == "deepseek":
            assert body["thinking"] == {"type": "disabled"}
            assert all("reasoning_content" not in m for m in sent), "thinking off: no reasoning goes upstream"
        else:  # Gemini thinks all the same: its reasoning is kept
            for m, a in zip(sent, answers, strict=False):
                assert all(m.get(k) == a.message.get(k) for k in FIELDS[flavor])

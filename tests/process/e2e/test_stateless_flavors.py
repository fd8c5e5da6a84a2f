"""The stateless path on every OpenAI-compatible flavor (issue 23 item 1): the openai SDK -> a gateway process -> the
strict simulator process, each flavor's tool loop replayed by a client that mangles it
(``tests/support/manglings/openai``).

- With ``GATEWAY_STATE_MACHINE_ENABLED=false`` (the sanitizer alone) every mangling on every flavor gets no upstream
  4xx: what is whole goes as the client sent it, what is not is degraded the way the flavor's upstream accepts
  (``gateway/dialects/openai_compat.py``), and each degrade is counted as a sanitize action.
- With a store that holds no record (the shared redis-server flushed before every request), and with the store
  unavailable (Redis not there), the same.
- A client that turns reasoning off mid-loop: on Gemini flavors the model thinks all the same and its reasoning is kept;
  on DeepSeek (``thinking: {"type": "disabled"}``) and an Anthropic model on OpenRouter no reasoning goes upstream
  any more (with a prefill, Anthropic's "When thinking is disabled ..." otherwise).
- Thinking is kept wherever it is whole: a faithful client's loop, stateless, replays each answer's fields as relayed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.dialects.openai_compat import unsealed
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.gemini import helpers as gemini_helpers
from tests.support.gemini.helpers import (
    COPILOT,
    DEEPSEEK,
    GEMINI_COMPAT,
    OPENROUTER,
    OPENROUTER_CLAUDE,
    Rejections,
    gateway_env,
)
from tests.support.gemini.matrix import OpenAILoop, Pair
from tests.support.manglings import openai as openai_manglings

# the flavor, and the family of model behind it where the flavor serves several
FLAVORS = {"openrouter": OPENROUTER, "openrouter-claude": OPENROUTER_CLAUDE, "copilot": COPILOT, "deepseek": DEEPSEEK,
           "generic": GEMINI_COMPAT}
FIELDS = {"openrouter": ("reasoning_details",), "openrouter-claude": ("reasoning_details",),
          "copilot": ("reasoning_opaque", "reasoning_text"), "deepseek": ("reasoning_content",), "generic": ()}
# how each flavor's upstream is kept from a 400 when a loop's reasoning is not whole
DEGRADE = {"openrouter": "tool_loop_textualized", "copilot": "tool_loop_textualized",
           "deepseek": "tool_loop_textualized", "openrouter-claude": "thinking_disabled"}
# (a dropped turn's results, statelessly, become text: the loop goes on calling tools; ``test_a_dropped_turn_...``)
CASES = sorted(set(openai_manglings.MANGLINGS) - {"drop_latest_assistant"})
# one turn's opaque reasoning repeated on the messages its calls were split into: no message is that turn (issue 31)
SPLIT = "split_parallel_calls"
# the manglings that remove what the flavor's upstream requires back: each must be degraded, not forwarded
DEGRADED = {"openrouter": {"drop_reasoning_details", "text_entries_only", "text_entries_only_no_content",
                           "drop_all_reasoning", "content_empty_string_no_reasoning",
                           "tool_ids_rewritten_no_reasoning", SPLIT},
            "openrouter-claude": {"drop_reasoning_details", "text_entries_only", "text_entries_only_no_content",
                                  "drop_all_reasoning", "content_empty_string_no_reasoning",
                                  "tool_ids_rewritten_no_reasoning", SPLIT, *openai_manglings.REASONING_TEXT},
            "copilot": {"drop_reasoning_opaque", "drop_all_reasoning", "content_empty_string_no_reasoning",
                        "tool_ids_rewritten_no_reasoning", SPLIT},
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


def _degrades(gw: ServerProcess, flavor: str) -> float:
    return metric_sum(gw, "gateway_sanitize_actions_total", action=DEGRADE.get(flavor, "tool_loop_textualized"))


def _cases(flavor: str) -> list[str]:
    """The manglings a flavor's client can play: those of signed reasoning text only where the answers carry it."""
    return [c for c in CASES if c not in openai_manglings.REASONING_TEXT or flavor.startswith("openrouter")]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize(("flavor", "case"), [(f, c) for f in sorted(FLAVORS) for c in _cases(f)])
def test_every_mangling_state_machine_off(stateless: ServerProcess, sim: Sim, flavor: str, case: str,
                                          stream: bool) -> None:
    before = _degrades(stateless, flavor)
    loop = OpenAILoop(Pair(stateless, stateless), FLAVORS[flavor], stream, False, sim, {"reasoning_effort": "low"})
    _play(loop, f"{PROMPT} stateless {flavor} {case} {stream}", openai_manglings.MANGLINGS[case])
    assert (_degrades(stateless, flavor) > before) == (case in DEGRADED.get(flavor, ())), \
        "degraded exactly where the reasoning is not whole, and counted as a sanitize action"


@pytest.fixture
def flushed(provider_pair: Pair, redis_server: RedisServer) -> Iterator[Callable[[OpenAILoop], Callable[..., Any]]]:
    """A send that empties the store first: every request finds no record."""
    def wrap(loop: OpenAILoop) -> Callable[..., Any]:
        def send(history: Any) -> Any:
            redis_server.flush()
            return loop.send(history)
        return send
    yield wrap


@pytest.mark.parametrize(("flavor", "case"), [(f, c) for f in sorted(FLAVORS) for c in _cases(f)])
def test_every_mangling_no_record(provider_pair: Pair, sim: Sim, flushed: Callable[[OpenAILoop], Callable[..., Any]],
                                  flavor: str, case: str) -> None:
    stream = CASES.index(case) % 2 == 1
    loop = OpenAILoop(provider_pair, FLAVORS[flavor], stream, True, sim, {"reasoning_effort": "low"})
    _play(loop, f"{PROMPT} no-record {flavor} {case}", openai_manglings.MANGLINGS[case], flushed(loop))


@pytest.fixture(scope="module")
def redis_stopped(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    """A gateway whose Redis is not there: every request is served statelessly (the store unavailable)."""
    return gateways.start(sim.url, gateway_env(sim, GATEWAY_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
                                               GATEWAY_SECRET="stateless-flavors-secret-0123456789"))


@pytest.mark.parametrize("case", ["drop_all_reasoning", "text_entries_only_no_content", "faithful"])
@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_manglings_with_the_store_unavailable(redis_stopped: ServerProcess, sim: Sim, flavor: str, case: str) -> None:
    before = _degrades(redis_stopped, flavor)
    loop = OpenAILoop(Pair(redis_stopped, redis_stopped), FLAVORS[flavor], case == "faithful", True, sim,
                      {"reasoning_effort": "low"})
    _play(loop, f"{PROMPT} redis stopped {flavor} {case}", openai_manglings.MANGLINGS[case])
    assert metric_sum(redis_stopped, "gateway_stateless_requests_total") > 0, "served without the store"
    assert (_degrades(redis_stopped, flavor) > before) == (case in DEGRADED.get(flavor, ())), \
        "degraded exactly where the reasoning is not whole"


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_faithful_stateless_keeps_thinking(stateless: ServerProcess, sim: Sim, flavor: str) -> None:
    """Nothing to degrade: every request replays each earlier answer's reasoning fields exactly as relayed."""
    before = _degrades(stateless, flavor)
    loop = OpenAILoop(Pair(stateless, stateless), FLAVORS[flavor], False, False, sim, {"reasoning_effort": "low"})
    answers = _play(loop, f"{PROMPT} faithful kept {flavor}", openai_manglings.MANGLINGS["faithful"])
    for n, body in enumerate(loop.bodies):
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        assert len(sent) == n and all(m.get("tool_calls") for m in sent), "no step was written out as text"
        for m, a in zip(sent, answers, strict=False):
            for key in FIELDS[flavor]:
                assert m.get(key) == unsealed(a.message).get(key), f"request {n}: {key} not replayed as relayed"
    assert _degrades(stateless, flavor) == before


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
        if flavor in ("deepseek", "openrouter-claude"):  # thinking off: no reasoning goes upstream
            assert (body.get("thinking") == {"type": "disabled"}) == (flavor == "deepseek")
            assert "reasoning" not in body
            assert all(k not in m for m in sent for k in FIELDS[flavor])
        else:  # Gemini thinks all the same: its reasoning is kept
            for m, a in zip(sent, answers, strict=False):
                assert all(m.get(k) == unsealed(a.message).get(k) for k in FIELDS[flavor])


@pytest.mark.parametrize("state_machine", ["true", "false"])
def test_anthropic_on_openrouter_prefill_after_reasoning_turned_off(modes: dict[str, ServerProcess], sim: Sim,
                                                                    state_machine: str) -> None:
    """A client that stops sending reasoning and ends its history with the model's earlier answer (a prefill) that
    still carries reasoning_details: thinking is off, so none go upstream (else Anthropic's "When thinking is
    disabled, an `assistant` message in the final position cannot contain `thinking`", relayed by OpenRouter)."""
    gw = modes[state_machine]
    loop = OpenAILoop(Pair(gw, gw), OPENROUTER_CLAUDE, False, True, sim, {"reasoning_effort": "low"})
    try:
        with Rejections(sim):
            history: list[dict[str, Any]] = [{"role": "user", "content": f"prefill off {state_machine}"}]
            first = loop.send(history)
            assert first.message["reasoning_details"][0]["signature"]
            loop.params = {}
            loop.send([*history, first.message])
    finally:
        loop.close()
    sent = loop.bodies[-1]["messages"][-1]
    assert sent["role"] == "assistant" and "reasoning_details" not in sent and "reasoning" not in loop.bodies[-1]


@pytest.mark.parametrize("case", ["drop_all_reasoning", "text_entries_only"])
@pytest.mark.parametrize("flavor", sorted(set(FLAVORS) - {"generic"}))
def test_recorded_reasoning_is_kept_not_degraded(modes: dict[str, ServerProcess], sim: Sim, flavor: str,
                                                 case: str) -> None:
    """With the records there (the state machine on) the same manglings lose nothing: every request replays each
    earlier answer's reasoning fields as relayed, restored from the records, and nothing is degraded."""
    gw = modes["true"]
    before = _degrades(gw, flavor)
    loop = OpenAILoop(Pair(gw, gw), FLAVORS[flavor], False, True, sim, {"reasoning_effort": "low"})
    answers = _play(loop, f"{PROMPT} recorded {flavor} {case}", openai_manglings.MANGLINGS[case])
    for n, body in enumerate(loop.bodies):
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        assert len(sent) == n and all(m.get("tool_calls") for m in sent)
        for m, a in zip(sent, answers, strict=False):
            assert all(m.get(k) == unsealed(a.message).get(k) for k in FIELDS[flavor]), \
                f"request {n}: reasoning restored"
    assert _degrades(gw, flavor) == before


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_a_dropped_turn_with_kept_results_goes_as_text_statelessly(stateless: ServerProcess, sim: Sim,
                                                                   flavor: str) -> None:
    """Issue 31, item 4: without a record, a client that drops the latest assistant message and keeps its results
    gets them as text (no call to pair them with), never an upstream 400."""
    loop = OpenAILoop(Pair(stateless, stateless), FLAVORS[flavor], False, False, sim, {"reasoning_effort": "low"})
    mangle = openai_manglings.MANGLINGS["drop_latest_assistant"]
    history: list[dict[str, Any]] = [{"role": "user", "content": f"{PROMPT} stateless dropped {flavor}"}]
    try:
        with Rejections(sim):
            for _ in range(3):
                answer = loop.send(mangle(history))
                history.append(answer.message)
                if answer.finish_reason != "tool_calls":
                    break
                history += gemini_helpers.tool_messages(answer)
    finally:
        loop.close()
    assert any("[tool result for " in str(body["messages"]) for body in loop.bodies[1:]), "the results as text"

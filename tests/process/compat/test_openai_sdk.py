"""The official openai SDK -> real `thinkgate serve` -> the simulator's OpenAI-compatible profiles:
OpenRouter-style (``reasoning_details``), Copilot-style (``reasoning_opaque``), DeepSeek-style
(``reasoning_content``) and Gemini's own OpenAI-compatibility layer (``extra_content``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.dialects.openai_compat import SEAL_KEY, unsealed
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.support.gemini.helpers import (
    COPILOT,
    DEEPSEEK,
    GEMINI_COMPAT,
    OPENROUTER,
    Rejections,
    ask,
    gateway_env,
    run_loop,
    tool_messages,
)
from tests.support.manglings.openai import MANGLINGS as OPENAI

FIELDS = {OPENROUTER: "reasoning_details", COPILOT: "reasoning_opaque", DEEPSEEK: "reasoning_content"}


@pytest.fixture()
def gw(provider_gateway: ServerProcess) -> ServerProcess:
    return provider_gateway


@pytest.fixture()
def client(gw: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test-compat", max_retries=0) as c:
        yield c


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("model", [OPENROUTER, COPILOT, DEEPSEEK])
def test_tool_loop_carries_reasoning_fields(client: openai.OpenAI, sim: Sim, model: str, stream: bool) -> None:
    with Rejections(sim):
        answers, _ = run_loop(lambda h: ask(client, model, h, stream=stream, reasoning_effort="low"),
                              "[[sim:tools=2]] [[sim:parallel=2]] weather?")
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    for a in answers[:2]:
        assert a.message[FIELDS[model]], f"{FIELDS[model]} relayed to the client"
        assert "\r\n" in a.message["reasoning_content"], "reasoning text relayed byte-exact"
        assert a.message.get("content") is None, "tool-only answers have content null"
    body = sim.last()["body"]
    sent = [m for m in body["messages"] if m["role"] == "assistant"]
    for m, a in zip(sent, answers, strict=False):
        # carried back exactly as the upstream gave them: thinkgate's seals (``openai_compat.Seals``) never go up
        assert m[FIELDS[model]] == unsealed(a.message)[FIELDS[model]], "carried back exactly as received"
        assert SEAL_KEY not in json.dumps(m)
        if model == OPENROUTER:
            assert all(SEAL_KEY in d for d in a.message[FIELDS[model]] if d.get("type") == "reasoning.encrypted")
        assert m["content"] is None
    if model == OPENROUTER:
        kinds = [d["type"] for d in answers[0].message["reasoning_details"]]
        assert kinds == ["reasoning.text", "reasoning.encrypted"]
    if model == COPILOT:
        assert all(m["reasoning_text"] for m in sent)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_gemini_openai_compat_layer(client: openai.OpenAI, sim: Sim, stream: bool) -> None:
    with Rejections(sim):
        answers, _ = run_loop(lambda h: ask(client, GEMINI_COMPAT, h, stream=stream),
                              "[[sim:tools=2]] [[sim:parallel=2]] weather?")
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    calls = answers[0].tool_calls
    assert calls[0]["extra_content"]["google"]["thought_signature"] and "extra_content" not in calls[1]
    assert answers[-1].message["extra_content"]["google"]["thought_signature"], "a text answer's signature"
    assert sim.last()["path"] == "/v1beta/openai/chat/completions"


def test_swapped_reasoning_without_a_record_is_answered_by_one_degraded_retry(
        gateways: GatewayFactory, sim: Sim) -> None:
    """Issue 31 item 4's last resort. With the state machine off, a client swaps two Gemini turns' whole
    reasoning_details (intact: their seals open). The upstream binds the encrypted reasoning to the turn's calls,
    thinkgate's seal only to the value (a client's renamed tool ids must not cost the reasoning), so they go and
    OpenRouter's 400 comes back; thinkgate answers it with one retry in which every replayed reasoning is degraded
    (the steps as text), and the client gets the answer instead of the 400."""
    gw = gateways.start(sim.url, gateway_env(sim, GATEWAY_STATE_MACHINE_ENABLED="false"))
    with openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-swapper", max_retries=0) as c:
        history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=2]] swapped"}]
        first = ask(c, OPENROUTER, history, stream=False)
        history += [first.message, *tool_messages(first)]
        second = ask(c, OPENROUTER, history, stream=False)
        history[1] = {**first.message, "reasoning_details": second.message["reasoning_details"]}  # the two swapped
        history += [{**second.message, "reasoning_details": first.message["reasoning_details"]},
                    *tool_messages(second)]
        before = sum(sim.stats()["rejections"].values())
        third = ask(c, OPENROUTER, history, stream=True)
    assert third.finish_reason == "stop"
    assert sum(sim.stats()["rejections"].values()) == before + 1, "the swap met the upstream's 400 once"
    sent = json.dumps(sim.last()["body"])
    assert "reasoning_details" not in sent and "tool_calls" not in sent, "the retry replays no reasoning"
    assert metric_sum(gw, "gateway_thinking_retries_total", kind="reasoning_not_preserved", outcome="ok") == 1
    assert metric_sum(gw, "gateway_upstream_errors_total", kind="reasoning_not_preserved") == 1


def test_relayed_openrouter_error_keeps_the_openai_envelope(client: openai.OpenAI) -> None:
    """An upstream 400 that is no thinking 400 (a parameter Anthropic refuses with thinking on, relayed by OpenRouter)
    comes back in the OpenAI envelope, with the provider's own message."""
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="anthropic/claude-opus-4.5", temperature=0.2,
                                       messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"reasoning": {"max_tokens": 2048}})
    assert "`temperature` may only be set to 1 when thinking is enabled" in e.value.message
    assert e.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_altered_reasoning_of_a_conversation_without_a_record_is_degraded_not_sent(
        client: openai.OpenAI, sim: Sim) -> None:
    """A client that alters the reasoning_details of a conversation thinkgate has no record of (another key): the
    altered value no longer opens its seal (``openai_compat.Seals``), so it is degraded (the step as text) instead of
    being sent for the upstream's 400."""
    with openai.OpenAI(base_url=client.base_url, api_key="sk-other", max_retries=0) as other:
        first = ask(other, OPENROUTER, [{"role": "user", "content": "[[sim:tools=1]] x"}], stream=False)
    msg = {**first.message, "reasoning_details": [{**d, "data": "dGdvMWFsdGVyZWQ="} if "data" in d else d
                                                  for d in first.message["reasoning_details"]]}
    history = [{"role": "user", "content": "[[sim:tools=1]] x"}, msg,
               {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "ok"}]
    with Rejections(sim):
        ask(client, OPENROUTER, history, stream=False)
    assert "dGdvMWFsdGVyZWQ=" not in json.dumps(sim.last()["body"])


@pytest.fixture(scope="module")
def default_route_gw(gateways: GatewayFactory, sim: Sim) -> ServerProcess:
    return gateways.start(sim.url, gateway_env(sim, GATEWAY_OPENAI_BASE_URL=f"{sim.url}/openrouter/api/v1",
                                               GATEWAY_OPENAI_FLAVOR="openrouter"))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_model_matching_no_prefix_goes_to_the_default_openai_upstream(
        default_route_gw: ServerProcess, sim: Sim, client: openai.OpenAI, stream: bool) -> None:
    """GATEWAY_OPENAI_BASE_URL (here an OpenRouter-style upstream) serves every model no route claims,
    with its flavor's reasoning fields restored when the client drops them."""
    model = "vendor-x/unrouted-model-1"
    with openai.OpenAI(base_url=default_route_gw.url + "/v1", api_key="sk-test-default-route",
                       max_retries=0) as c, Rejections(sim):
        answers, _ = run_loop(lambda h: ask(c, model, h, stream=stream, reasoning_effort="low"),
                              "[[sim:tools=2]] default route", mangle=OPENAI["drop_reasoning_details"])
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    last = sim.last()
    assert last["path"] == "/openrouter/api/v1/chat/completions" and last["body"]["model"] == model
    sent = [m for m in last["body"]["messages"] if m["role"] == "assistant"]
    assert [m["reasoning_details"] for m in sent] == [unsealed(a.message)["reasoning_details"] for a in answers[:2]]
    with pytest.raises(openai.BadRequestError) as e:  # the shared gateway has no default upstream
        ask(client, model, [{"role": "user", "content": "hi"}], stream=stream)
    assert e.value.code == "model_not_supported"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_deepseek_text_answers_get_their_reasoning_back_in_later_turns(
        client: openai.OpenAI, sim: Sim, stream: bool) -> None:
    """Rule 23 covers text-only answers too: a client that drops ``reasoning_content`` from every
    replayed message (a generic OpenAI client) continues a conversation past a final text answer;
    the gateway restores it on the text answer as on the tool calls."""
    drop = OPENAI["drop_reasoning_content"]
    with Rejections(sim):
        first, history = run_loop(lambda h: ask(client, DEEPSEEK, h, stream=stream), "[[sim:tools=1]] weather?",
                                  mangle=drop)
        later, _ = run_loop(lambda h: ask(client, DEEPSEEK, h, stream=stream), "and tomorrow?", mangle=drop,
                            history=history)
    assert [a.finish_reason for a in first] == ["tool_calls", "stop"] and later[-1].finish_reason == "stop"
    text_answer = first[-1].message
    assert text_answer["content"] and text_answer["reasoning_content"]
    sent = [m for m in sim.last()["body"]["messages"] if m["role"] == "assistant"]
    assert sent[1]["content"] == text_answer["content"]
    assert sent[1]["reasoning_content"] == text_answer["reasoning_content"], "restored byte-exact"
    # the same replay straight to the simulator is refused: the restoring is the gateway's work
    direct = openai.OpenAI(base_url=f"{sim.url}/deepseek/v1", api_key="sk-test-compat", max_retries=0)
    with direct, pytest.raises(openai.BadRequestError) as e:
        ask(direct, DEEPSEEK, drop([*history, {"role": "user", "content": "and then?"}]), stream=False)
    assert e.value.message.endswith("The `reasoning_content` in the thinking mode must be passed back to the API.")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_completion_ids_are_not_doubled(client: openai.OpenAI, stream: bool) -> None:
    """Issue 34 item 4: an OpenAI-compatible upstream's id is a ``chatcmpl-`` id already: it is not prefixed again."""
    params: dict[str, Any] = {"model": OPENROUTER, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        ids = {c.id for c in client.chat.completions.create(stream=True, **params)}
    else:
        ids = {client.chat.completions.create(**params).id}
    assert len(ids) == 1 and all(i.startswith("chatcmpl-") and "chatcmpl-" not in i[9:] for i in ids), ids

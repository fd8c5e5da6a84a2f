"""An OpenAI Responses upstream behind thinkgate: the official ``openai`` chat client ->
two real `thinkgate serve` replicas on one real redis-server (alternating) -> the simulator's strict Responses
profile. Zero 4xx, the upstream's reasoning items replayed exactly as it minted them on every turn, never shown to
the chat client; a turn without a record degrades (its reasoning left out, no item id sent). The same client's
history sent straight to the simulator fails as the real API does."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.process_fixtures import Sim
from tests.support.gemini.helpers import RESPONSES, Rejections, ask, run_loop
from tests.support.gemini.matrix import OpenAILoop, Pair

PROMPT = "weather in Paris and Rome? [[sim:tools=2]] [[sim:parallel=2]]"
SCID = "x-ag-conversation-id"


def _reasoning(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["input"] if i.get("type") == "reasoning"]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_chat_client_tool_loop_keeps_reasoning_items_across_replicas(provider_pair: Pair, sim: Sim,
                                                                     stream: bool) -> None:
    loop = OpenAILoop(provider_pair, RESPONSES, stream, header=False, sim=sim, params={"reasoning_effort": "low"})
    try:
        with Rejections(sim):
            answers, _ = run_loop(loop.send, PROMPT + f" stream={stream}")
    finally:
        loop.close()
    assert [a.finish_reason for a in answers] == ["tool_calls", "tool_calls", "stop"]
    assert "gAAAAAB" not in json.dumps([a.message for a in answers]), "the chat client never sees encrypted content"
    sent = [_reasoning(b) for b in loop.bodies]
    assert [len(r) for r in sent] == [0, 1, 2], "every earlier turn's reasoning item goes back"
    assert sent[2][0] == sent[1][0], "the same item, replayed again unchanged"
    for body, answer_text in ((loop.bodies[1], answers[0].message["reasoning_content"]),
                              (loop.bodies[2], answers[1].message["reasoning_content"])):
        item = _reasoning(body)[-1]
        assert item["summary"][0]["text"] == answer_text  # the client saw the summary the item carries
        k = body["input"].index(item)
        follower = body["input"][k + 1]
        assert follower["type"] == "function_call" and follower["id"].startswith("fc_")
        assert "id" not in body["input"][k + 2], "only the call the reasoning item preceded carries an id"
    assert len({s for s in loop.scids}) == 1, "one conversation across both replicas"


def test_a_turn_no_record_vouches_for_degrades_instead_of_failing(provider_pair: Pair, sim: Sim) -> None:
    """Another tenant's key replays the history: no record of its turns, so no reasoning item and no item id is
    sent (the call goes as the client's own), and the upstream accepts it."""
    with openai.OpenAI(base_url=provider_pair.a.url + "/v1", api_key="sk-responses-tenant-a-0123456789abcdef",
                       max_retries=0) as a, \
            openai.OpenAI(base_url=provider_pair.b.url + "/v1", api_key="sk-responses-tenant-b-0123456789abcdef",
                          max_retries=0) as b:
        history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=2]] stateless responses"}]
        first = ask(a, RESPONSES, history, stream=False, reasoning_effort="low")
        history += [first.message] + [{"role": "tool", "tool_call_id": c["id"], "content": "ok"}
                                      for c in first.tool_calls]
        with Rejections(sim):
            second = ask(b, RESPONSES, history, stream=False, reasoning_effort="low")
    body = sim.last()["body"]
    assert second.finish_reason == "tool_calls"
    assert _reasoning(body) == [] and all("id" not in i for i in body["input"])


def test_the_same_history_straight_to_the_simulator_fails_as_the_real_api_does(provider_pair: Pair,
                                                                               sim: Sim) -> None:
    """What the chat client keeps of a turn (its calls, not the reasoning) sent straight to the Responses API: the
    call, sent with its item id, without its reasoning item, is refused; through thinkgate it is not (above)."""
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    with openai.OpenAI(base_url=sim.url + "/openai/v1", api_key="sk-responses-direct-0123456789abcdef",
                       max_retries=0) as direct:
        history: list[Any] = [{"role": "user", "content": PROMPT + " direct"}]
        first = direct.responses.create(model=RESPONSES, input=history, tools=tools, store=False,
                                        reasoning={"effort": "low", "summary": "auto"})
        output = [o.model_dump(exclude_none=True) for o in first.output]
        history += [o for o in output if o["type"] != "reasoning"]
        history += [{"type": "function_call_output", "call_id": o["call_id"], "output": "sunny"}
                    for o in output if o["type"] == "function_call"]
        before = sim.stats()["rejections"].get("responses-3", 0)
        with pytest.raises(openai.BadRequestError, match="was provided without its required 'reasoning' item"):
            direct.responses.create(model=RESPONSES, input=history, tools=tools, store=False)
    assert sim.stats()["rejections"]["responses-3"] == before + 1


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_responses_client_s_fields_reach_a_responses_upstream_as_sent(provider_pair: Pair, sim: Sim,
                                                                       stream: bool) -> None:
    """Same dialect: the openai SDK's ``client.responses.create`` with fields thinkgate does not need to change
    (``metadata``, ``text``, ``truncation``, ``user``, ``prompt_cache_key``, ``service_tier``, a field the SDK and
    thinkgate have never heard of) -> the upstream gets each as the client sent it (the order: the unit test); thinkgate
    sets only ``model``, ``input``, ``store: false`` and adds ``reasoning.encrypted_content`` to the client's
    ``include``. The second turn (on the other replica) too, its reasoning item restored."""
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}]
    sent: dict[str, Any] = {
        "metadata": {"run": "h25c", "note": "café 思考"}, "text": {"verbosity": "low", "format": {"type": "text"}},
        "truncation": "auto", "user": "user-1", "prompt_cache_key": "cache-key-1", "service_tier": "default",
        "include": ["message.output_text.logprobs"], "tools": tools, "tool_choice": "auto",
        "reasoning": {"effort": "low", "summary": "detailed"}, "parallel_tool_calls": False, "top_p": 0.5}
    unknown = {"x_future_field": {"nested": [1, 2.5, None, "ü"]}}
    clients = [openai.OpenAI(base_url=g.url + "/v1", api_key="sk-responses-passthrough-0123456789abcdef",
                             max_retries=0) for g in (provider_pair.a, provider_pair.b)]
    history: list[Any] = [{"role": "user", "content": "[[sim:tools=1]] passthrough " + str(stream)}]
    bodies, shown, read = [], [], []
    with Rejections(sim):
        for client in clients:
            if stream:
                with client.responses.stream(model=RESPONSES, input=history, store=True, extra_body=unknown,
                                             **sent) as events:
                    answer = events.get_final_response()
            else:
                answer = client.responses.create(model=RESPONSES, input=history, store=True, extra_body=unknown,
                                                 **sent)
            bodies.append(sim.last()["body"])
            output = [o.model_dump(exclude_none=True) for o in answer.output]
            shown.append(output[0])
            history += output + [{"type": "function_call_output", "call_id": o["call_id"], "output": "sunny"}
                                 for o in output if o["type"] == "function_call"]
            # read back (on the other replica, asking for the encrypted content this time): the same upstream item
            read.append(clients[len(read) % 2 - 1].responses.retrieve(
                answer.id, include=["reasoning.encrypted_content"]).output[0].model_dump(exclude_none=True))
    for client in clients:
        client.close()
    # the client did not ask for encrypted_content: the gateway's item without it; read back with it (sealed, the
    # same id), and the upstream gets its own item back as minted, with the summary the client was shown
    assert shown[0]["type"] == "reasoning" and "encrypted_content" not in shown[0]
    assert read[0]["encrypted_content"].startswith("tg1.") and {**read[0], "encrypted_content": None} == {
        **shown[0], "encrypted_content": None}
    minted = next(i for i in bodies[1]["input"] if i.get("type") == "reasoning")
    assert minted["encrypted_content"].startswith("gAAAA") and minted["id"] != shown[0]["id"]
    assert [p["text"] for p in minted["summary"]] == [p["text"] for p in shown[0]["summary"]]
    for body in bodies:
        for key, value in {**sent, **unknown}.items():
            if key != "include":
                assert body[key] == value, key
        assert body["include"] == ["message.output_text.logprobs", "reasoning.encrypted_content"]
        assert body["store"] is False and body["model"] == RESPONSES
    assert "instructions" not in bodies[0]
    items = bodies[1]["input"]
    call = next(n for n, i in enumerate(items) if i.get("type") == "function_call")
    assert items[call - 1]["type"] == "reasoning" and items[call - 1]["encrypted_content"]

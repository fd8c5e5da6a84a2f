"""The Responses surface through a real gateway process in front of the simulator: ``GET /v1/responses/{id}`` for
its tenant only, previous_response_id that names nothing, malformed requests and upstream failures, each in the
OpenAI envelope (or as ``error`` + ``response.failed`` mid-stream), and the surface's metric label."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port, metric_sum
from tests.support.responses.helpers import INCLUDE, REASONING, WEATHER, create

KEY_A = "sk-responses-tenant-a-0123456789abcdef"
KEY_B = "sk-responses-tenant-b-0123456789abcdef"
MODEL = "claude-opus-4-5"


def _post(gw: ServerProcess, body: Any, key: str = KEY_A) -> httpx.Response:
    return httpx.post(gw.url + "/v1/responses", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30)


def _openai_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    return err  # type: ignore[no-any-return]


def test_a_recorded_response_is_retrievable_by_its_tenant_only(gateway: ServerProcess) -> None:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0) as a:
        made = create(a, stream=False, model=MODEL, input="[[sim:tools=1]] weather", tools=[WEATHER],
                      reasoning=REASONING, include=INCLUDE)
        got = a.responses.retrieve(made.response["id"]).model_dump(mode="json", exclude_none=True)
        sealed = a.responses.retrieve(made.response["id"], include=INCLUDE).output[0]
    assert "encrypted_content" not in got["output"][0]
    assert sealed.type == "reasoning" and sealed.encrypted_content == made.output[0]["encrypted_content"]
    assert got["id"] == made.response["id"]
    assert [(i["type"], i["id"]) for i in got["output"]] == [(i["type"], i["id"]) for i in made.output]
    assert got["output"][0]["summary"] == made.output[0]["summary"]
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_B, max_retries=0) as b, \
            pytest.raises(openai.NotFoundError) as e:
        b.responses.retrieve(made.response["id"])
    assert e.value.body == {"message": f"Response with id '{made.response['id']}' not found.",  # type: ignore[comparison-overlap]
                            "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}
    unknown = httpx.get(gateway.url + "/v1/responses/resp_nope", headers={"authorization": f"Bearer {KEY_A}"})
    _openai_error(unknown, 404)


def test_previous_response_id_that_names_nothing_is_the_api_400(gateway: ServerProcess) -> None:
    for prev in ("resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b", "resp_AAAAAAAAAAAAAAAAAAAAAA.4"):
        err = _openai_error(_post(gateway, {"model": MODEL, "input": "hi", "previous_response_id": prev}), 400)
        assert err["message"] == f"Previous response with id '{prev}' not found."
        assert err["code"] == "previous_response_not_found"


@pytest.mark.parametrize(("body", "status"), [
    ({"model": MODEL, "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]}, 400),
    ({"model": MODEL, "input": 7}, 400),
    ({"model": MODEL, "store": False, "input": [{"type": "item_reference", "id": "rs_AAAAAAAAAAAAAAAAAAAAAA.0.0"}]},
     404),
    ([1, 2], 400),
])
def test_malformed_requests_get_the_openai_envelope(gateway: ServerProcess, body: Any, status: int) -> None:
    _openai_error(_post(gateway, body), status)


def test_upstream_failures_keep_the_openai_shape(gateway: ServerProcess, sim: Sim) -> None:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as e:
            client.responses.create(model=MODEL, input="[[sim:fault=overloaded]] hi")
        assert e.value.status_code == 529 and isinstance(e.value.body, dict) and "message" in e.value.body
        with client.responses.with_streaming_response.create(model=MODEL, input="[[sim:fault=midstream]] hi",
                                                             stream=True) as raw:
            types = [line.removeprefix("event: ") for line in raw.iter_lines() if line.startswith("event: ")]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-2:] == ["error", "response.failed"], types


def test_the_surface_is_counted_under_its_own_label(gateway: ServerProcess) -> None:
    before = metric_sum(gateway, "gateway_requests_total", endpoint="responses")
    assert _post(gateway, {"model": MODEL, "input": "hi"}).status_code == 200
    assert metric_sum(gateway, "gateway_requests_total", endpoint="responses") == before + 1


def test_another_tenant_cannot_use_a_response_its_ids_or_its_sealed_reasoning(gateway: ServerProcess, sim: Sim) -> None:
    """B holds A's whole answer (ids, sealed reasoning): previous_response_id and item references name nothing
    for B, and A's encrypted_content does not open for B, so nothing of A's thinking reaches the upstream."""
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0) as a:
        made = create(a, stream=False, model=MODEL, input="[[sim:tools=2]] isolation", tools=[WEATHER],
                      reasoning=REASONING, include=INCLUDE, store=False)
    call = made.calls[0]
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    thinking = made.output[0]["summary"][0]["text"]
    base = {"model": MODEL, "tools": [WEATHER], "reasoning": REASONING, "include": INCLUDE, "store": False}
    err = _openai_error(_post(gateway, {**base, "previous_response_id": made.response["id"], "input": [result]},
                              KEY_B), 400)
    assert err["code"] == "previous_response_not_found"
    refs = [{"type": "item_reference", "id": i["id"]} for i in made.output]
    _openai_error(_post(gateway, {**base, "input": [{"role": "user", "content": "[[sim:tools=2]] isolation"},
                                                   *refs, result]}, KEY_B), 404)
    replay = _post(gateway, {**base, "input": [{"role": "user", "content": "[[sim:tools=2]] isolation"},
                                               *made.output, result]}, KEY_B)
    assert replay.status_code == 200, replay.text
    sent = sim.last()["body"]
    text = json.dumps(sent)
    assert thinking.split("\r\n")[0].strip() not in text and made.output[0]["encrypted_content"] not in text
    assert not any(b.get("type") == "thinking" for m in sent["messages"] if isinstance(m["content"], list)
                   for b in m["content"])
    # A itself, with the same replay, gets its thinking back
    assert _post(gateway, {**base, "input": [{"role": "user", "content": "[[sim:tools=2]] isolation"},
                                              *made.output, result]}, KEY_A).status_code == 200
    first = next(m for m in sim.last()["body"]["messages"] if m["role"] == "assistant")["content"][0]
    assert first["type"] == "thinking" and first["thinking"] == thinking


@pytest.mark.parametrize("model", [MODEL, "gemini-3-pro-preview"])
def test_the_sdks_stream_accumulator_reads_the_event_sequence(provider_gateway: ServerProcess, model: str) -> None:
    """``client.responses.stream`` rebuilds the Response from the events (item by item, delta by delta) and
    fails on an event that names an item or part it was not told about; its snapshot equals the final object."""
    with openai.OpenAI(base_url=provider_gateway.url + "/v1", api_key=KEY_A, max_retries=0) as client, \
            client.responses.stream(model=model, input="[[sim:tools=1]] accumulate", tools=[WEATHER],
                                    reasoning=REASONING, include=INCLUDE) as stream:
        deltas = [ev.delta for ev in stream if ev.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and "".join(deltas) in final.output_text
    kinds = [i.type for i in final.output]
    assert kinds[0] == "reasoning" and kinds[-1] == "function_call", kinds
    call = final.output[-1]
    assert call.type == "function_call" and json.loads(call.arguments)


def test_the_access_log_names_the_surface_and_never_the_key_or_the_thinking(sim: Sim, gateways: GatewayFactory) -> None:
    gw = gateways.start(sim.url, {"GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_LOG_FORMAT": "json"})
    try:
        with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY_A, max_retries=0) as client:
            made = create(client, stream=True, model=MODEL, input="[[sim:tools=1]] logged", tools=[WEATHER],
                          reasoning=REASONING, include=INCLUDE)
        thinking = made.output[0]["summary"][0]["text"].split("\r\n")[0].strip()
        deadline = time.monotonic() + 5
        while not (lines := [json.loads(line) for line in gw.log_lines() if '"thinkgate.access"' in line]):
            assert time.monotonic() < deadline, gw.log()
            time.sleep(0.02)  # the gateway is another process: poll its log
        assert lines[-1]["endpoint"] == "responses" and lines[-1]["status"] == 200, lines[-1]
        log = gw.log()
        assert KEY_A not in log and thinking not in log and made.output[0]["encrypted_content"] not in log
    finally:
        gw.stop()


@pytest.mark.parametrize("mode", ["state-machine-off", "store-down"])
def test_previous_response_id_without_records_is_refused_not_answered_from_the_new_items(
        sim: Sim, gateways: GatewayFactory, mode: str) -> None:
    """With nothing to rebuild the conversation from (the state machine off: nothing recorded; Redis unreachable),
    a ``previous_response_id`` continuation is refused in the OpenAI envelope before any upstream request, never
    answered from its new items alone (function call outputs without their calls or the first message: the model
    would answer a conversation it never saw). Off: the API's 400 for an id that names nothing; store down: 503."""
    env = {"GATEWAY_STATE_MACHINE_ENABLED": "false"} if mode == "state-machine-off" else \
        {"GATEWAY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "GATEWAY_STORE_TIMEOUT_MS": "300"}
    gw = gateways.start(sim.url, {"GATEWAY_SECRET": "responses-no-records-0123456789abcdef", **env})
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY_A, max_retries=0) as client:
        first = create(client, stream=False, model=MODEL, input=f"[[sim:tools=1]] weather ({mode})", tools=[WEATHER],
                       reasoning=REASONING, include=INCLUDE, store=True)
    before = sim.last()
    call = first.calls[0]
    resp = _post(gw, {"model": MODEL, "previous_response_id": first.response["id"], "store": True, "tools": [WEATHER],
                      "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]})
    if mode == "state-machine-off":
        err = _openai_error(resp, 400)
        assert err["message"] == f"Previous response with id '{first.response['id']}' not found."
        assert err["code"] == "previous_response_not_found"
    else:
        err = _openai_error(resp, 503)
        assert err["message"] == "the conversation store is unavailable"
    assert sim.last() == before, "nothing went upstream"


def _stateless(gw: ServerProcess) -> float:
    return metric_sum(gw, "gateway_stateless_requests_total")


@pytest.mark.parametrize("mode", ["state-machine-off", "store-down"])
def test_a_refused_reference_is_not_counted_as_a_stateless_request(sim: Sim, gateways: GatewayFactory,
                                                                   mode: str) -> None:
    """``gateway_stateless_requests_total`` counts requests *served* without state (its help text; the
    ``ThinkgateStatelessRequests`` alert divides it by all requests and says their histories were not repaired). A
    ``previous_response_id`` and a bare ``store: false`` item reference that need records there are none of are
    refused before any upstream request, streamed or not: neither is served, so neither is counted (the previous
    release counted the first, not the second); the same turn replayed whole is served, and counted once each."""
    env = {"GATEWAY_STATE_MACHINE_ENABLED": "false"} if mode == "state-machine-off" else \
        {"GATEWAY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "GATEWAY_STORE_TIMEOUT_MS": "300"}
    gw = gateways.start(sim.url, {"GATEWAY_SECRET": "responses-refused-not-served-0123456789", **env})
    refused = {"state-machine-off": (400, 404), "store-down": (503, 503)}[mode]
    base = {"model": MODEL, "tools": [WEATHER], "reasoning": REASONING, "include": INCLUDE}
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY_A, max_retries=0) as client:
        first = create(client, stream=False, input=f"[[sim:tools=1]] counted ({mode})", store=False, **base)
        before = _stateless(gw)  # (a first turn has nothing to look up: with the store down it may not count)
        call = first.calls[0]
        result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        upstream = sim.last()
        for stream in (False, True):
            previous = _post(gw, {**base, "stream": stream, "previous_response_id": first.response["id"],
                                  "store": True, "input": [result]})
            _openai_error(previous, refused[0])
            bare = _post(gw, {**base, "stream": stream, "store": False, "input": [
                {"role": "user", "content": f"[[sim:tools=1]] counted ({mode})"},
                *({"type": "item_reference", "id": item["id"]} for item in first.output), result]})
            _openai_error(bare, refused[1])
        assert sim.last() == upstream, "nothing refused went upstream"
        assert _stateless(gw) == before, "a refused request is not served: not counted"
        for stream in (False, True):  # the same turn replayed whole: served without records, counted once each
            create(client, stream=stream, input=[{"role": "user", "content": f"[[sim:tools=1]] counted ({mode})"},
                                                 *first.output, result], store=False, **base)
        assert _stateless(gw) == before + 2

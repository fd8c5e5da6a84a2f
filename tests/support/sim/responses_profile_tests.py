"""The simulator's strict OpenAI Responses profile (``thinkgate_sim.responses``): pure rules with their exact texts
(docs/upstream-rules.md, "OpenAI Responses"), then the official ``openai`` SDK against the simulator process."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.process_fixtures import Sim
from thinkgate_sim.responses import NOT_PERSISTED, Memory, ResponsesMinter, check, plan

TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object",
                                                                   "properties": {"city": {"type": "string"}}}}]
PROMPT = "weather? [[sim:tools=1]]"


def _turn(memory: Memory, minter: ResponsesMinter, store: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    body = {"model": "gpt-5", "input": PROMPT, "tools": TOOLS, "store": store,
            "reasoning": {"effort": "low", "summary": "auto"}}
    checked = check(body, minter, memory)
    assert isinstance(checked, list)
    response = plan(body, checked, minter, memory)
    rs, fc = response["output"]
    history = [{"type": "message", "role": "user", "content": PROMPT}, rs, fc,
               {"type": "function_call_output", "call_id": fc["call_id"], "output": "sunny"}]
    return history, response


def _rejection(history: list[dict[str, Any]], memory: Memory, minter: ResponsesMinter, **extra: Any) -> tuple[
        int, str, str]:
    out = check({"model": "gpt-5", "input": history, "store": False, **extra}, minter, memory)
    assert isinstance(out, tuple), "accepted"
    return out[0], out[1]["error"]["message"], out[2]


def test_sim_tools_and_the_arg_marker_apply_to_the_responses_profile_too() -> None:
    """``thinkgate sim --tools N`` calls tools without a marker when the request declares tools (as the other
    profiles do); ``[[sim:arg=TEXT]]`` is the calls' string argument (what an agent's shell tool runs)."""
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)

    def first_output(prompt: str, tools: list[dict[str, Any]], default_tools: int) -> dict[str, Any]:
        body = {"model": "gpt-5", "input": prompt, "tools": tools, "store": False}
        checked = check(body, minter, memory)
        assert isinstance(checked, list)
        return plan(body, checked, minter, memory, default_tools)["output"][-1]

    assert first_output("weather?", TOOLS, 1)["type"] == "function_call"
    assert first_output("weather?", TOOLS, 0)["type"] == "message"
    assert first_output("weather?", [], 1)["type"] == "message"  # no tool declared: none called
    call = first_output("weather? [[sim:tools=1]] [[sim:arg=echo done]]", TOOLS, 0)
    assert call["type"] == "function_call" and call["arguments"] == '{"city":"echo done"}'


def test_a_minted_turn_replayed_unchanged_is_accepted() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, _ = _turn(memory, minter)
    assert isinstance(check({"model": "gpt-5", "input": history, "store": False}, minter, memory), list)


def test_changed_encrypted_content_summary_or_model_is_invalid_encrypted_content() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, _ = _turn(memory, minter)
    rs = history[1]
    blob = rs["encrypted_content"]
    for changed in ({**rs, "encrypted_content": blob[:-8] + "AAAAAAAA"},
                    {**rs, "summary": [{"type": "summary_text", "text": rs["summary"][0]["text"].strip()}]}):
        status, message, rule = _rejection([history[0], changed, *history[2:]], memory, minter)
        assert (status, rule) == (400, "responses-1")
        assert message == f"The encrypted content {changed['encrypted_content'][:4]}..." \
                          f"{changed['encrypted_content'][-4:]} could not be verified."
    out = check({"model": "gpt-4.1", "input": history, "store": False}, minter, memory)
    assert isinstance(out, tuple) and out[1]["error"]["code"] == "invalid_encrypted_content"


def test_a_reference_to_an_item_of_a_store_false_response_is_not_found() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, _ = _turn(memory, minter)
    bare = {k: v for k, v in history[1].items() if k != "encrypted_content"}
    status, message, rule = _rejection([history[0], bare, *history[2:]], memory, minter)
    assert (status, rule) == (404, "responses-2")
    assert message == f"Item with id '{bare['id']}' not found." + NOT_PERSISTED
    status, message, _ = _rejection([history[0], {"type": "item_reference", "id": bare["id"]}, *history[2:]],
                                    memory, minter)
    assert status == 404 and message.endswith("or remove this item from your input.")


def test_with_store_true_a_bare_reference_and_previous_response_id_work() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, response = _turn(memory, minter, store=True)
    bare = {k: v for k, v in history[1].items() if k != "encrypted_content"}
    assert isinstance(check({"model": "gpt-5", "input": [history[0], bare, *history[2:]]}, minter, memory), list)
    out = check({"model": "gpt-5", "input": [history[3]], "previous_response_id": response["id"]}, minter, memory)
    assert isinstance(out, list) and out[1] == history[1]


def test_previous_response_id_of_a_store_false_response_is_not_found() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, response = _turn(memory, minter)
    status, message, rule = _rejection([history[3]], memory, minter, previous_response_id=response["id"])
    assert (status, rule, message) == (400, "responses-5", f"Previous response with id '{response['id']}' not found.")


def test_a_call_with_its_id_but_without_its_reasoning_item_is_refused() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, _ = _turn(memory, minter)
    rs, fc = history[1], history[2]
    status, message, rule = _rejection([history[0], fc, history[3]], memory, minter)
    assert (status, rule) == (400, "responses-3")
    assert message == f"Item '{fc['id']}' of type 'function_call' was provided without its required 'reasoning' " \
                      f"item: '{rs['id']}'."
    # without its id the call is the client's own: accepted, reasoning or not
    anonymous = {k: v for k, v in fc.items() if k != "id"}
    assert isinstance(check({"model": "gpt-5", "input": [history[0], anonymous, history[3]], "store": False},
                            minter, memory), list)


def test_a_reasoning_item_without_its_following_item_is_refused() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, _ = _turn(memory, minter)
    status, message, rule = _rejection([history[0], history[1]], memory, minter)
    assert (status, rule) == (400, "responses-4")
    assert message == f"Item '{history[1]['id']}' of type 'reasoning' was provided without its required following " \
                      "item."


def test_an_output_without_its_call_is_refused() -> None:
    memory, minter = Memory(), ResponsesMinter(b"k" * 32)
    history, _ = _turn(memory, minter)
    status, message, rule = _rejection([history[0], history[3]], memory, minter)
    assert (status, rule) == (400, "responses-6")
    assert message == f"No tool call found for function call output with call_id {history[3]['call_id']}."


# ------------------------------------------------------------------ the simulator process, the official SDK

@pytest.fixture
def client(sim: Sim) -> Any:
    c = openai.OpenAI(base_url=sim.url + "/openai/v1", api_key="sk-responses-profile-0123456789abcdef",
                      max_retries=0)
    yield c
    c.close()


@pytest.mark.parametrize("stream", [False, True])
def test_sdk_tool_loop_with_reasoning_kept_then_the_same_loop_without_reasoning_fails(client: openai.OpenAI,
                                                                                      stream: bool) -> None:
    history: list[Any] = [{"role": "user", "content": "weather? [[sim:tools=2]] [[sim:parallel=2]]"}]
    kinds: list[list[str]] = []
    for _ in range(3):
        kwargs: dict[str, Any] = {"model": "gpt-5", "input": history, "tools": TOOLS, "store": False,
                                  "reasoning": {"effort": "low", "summary": "auto"},
                                  "include": ["reasoning.encrypted_content"]}
        if stream:
            with client.responses.stream(**kwargs) as s:
                seen = [e.type for e in s]
                response = s.get_final_response()
            assert seen[0] == "response.created" and seen[-1] == "response.completed"
            assert "response.reasoning_summary_text.delta" in seen
        else:
            response = client.responses.create(**kwargs)
        output = [o.model_dump(exclude_none=True) for o in response.output]
        kinds.append([o["type"] for o in output])
        history += output
        history += [{"type": "function_call_output", "call_id": o["call_id"], "output": "sunny"}
                    for o in output if o["type"] == "function_call"]
    assert kinds == [["reasoning", "function_call", "function_call"]] * 2 + [["reasoning", "message"]]
    assert all(o["encrypted_content"].startswith("gAAAAAB") for o in history if o.get("type") == "reasoning")
    dropped = [o for o in history if o.get("type") != "reasoning"]  # what a chat-shaped client keeps
    with pytest.raises(openai.BadRequestError, match="without its required 'reasoning' item"):
        client.responses.create(model="gpt-5", input=dropped, tools=TOOLS, store=False)
    bare = [{k: v for k, v in o.items() if k != "encrypted_content"} for o in history]
    with pytest.raises(openai.NotFoundError, match="Items are not persisted when `store` is set to false"):
        client.responses.create(model="gpt-5", input=bare, tools=TOOLS, store=False)


def test_sdk_previous_response_id_works_only_with_store_true(client: openai.OpenAI) -> None:
    kept = client.responses.create(model="gpt-5", input="hello")
    assert client.responses.create(model="gpt-5", input="again", previous_response_id=kept.id).output[-1].type \
        == "message"
    gone = client.responses.create(model="gpt-5", input="hello", store=False)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="gpt-5", input="again", previous_response_id=gone.id)
    assert err.value.code == "previous_response_not_found"
    assert [m.id for m in client.models.list()] == ["gpt-5", "gpt-5-codex", "gpt-5.1"]

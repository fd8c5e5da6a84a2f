"""Item ids do not depend on ``include``: a client that asked without ``include: ["reasoning.encrypted_content"]``
and then names the items it saw (bare ``item_reference``s, ``GET /v1/responses/{id}``) gets exactly those items,
whatever reasoning items of their own (a Gemini ``thoughtSignature`` riding on a call or a text) were left out of
its answer. The official openai SDK, two gateway replicas on one real redis-server (alternating), the strict
simulator's Gemini profile natively and through its OpenAI-compatibility layer."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.process_fixtures import Sim
from tests.support.gemini.helpers import GEMINI, GEMINI_COMPAT, RESPONSES, Rejections
from tests.support.responses.helpers import INCLUDE, KEY, REASONING, WEATHER, Items, create


def _calls_sent(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (name, arguments) of every function call an upstream request replays, in order."""
    if "contents" in body:  # Gemini
        return [(p["functionCall"]["name"], p["functionCall"].get("args") or {}) for c in body["contents"]
                for p in c.get("parts", []) if "functionCall" in p]
    return [(tc["function"]["name"], json.loads(tc["function"]["arguments"] or "{}"))
            for m in body["messages"] if m["role"] == "assistant" for tc in m.get("tool_calls") or []]


def _get(client: openai.OpenAI, rid: str, include: bool) -> dict[str, Any]:
    params = {"include[]": INCLUDE[0]} if include else {}
    r = httpx.get(f"{client.base_url}responses/{rid}", params=params, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _same_item(seen: dict[str, Any], got: dict[str, Any]) -> None:
    keys = ("id", "type", "call_id", "name", "arguments", "content", "encrypted_content")
    assert {k: seen.get(k) for k in keys} == {k: got.get(k) for k in keys}, (seen, got)


def _all_referenced(items: Items) -> Items:
    return [{"type": "item_reference", "id": i["id"]} for i in items]


def _last_call_referenced(items: Items) -> Items:
    """The items as received, but the last call as a bare reference (a client that keeps only some items)."""
    last = max(n for n, i in enumerate(items) if i["type"] == "function_call")
    return [{"type": "item_reference", "id": i["id"]} if n == last else i for n, i in enumerate(items)]


REPLAYS = {"all_referenced": _all_referenced, "last_call_referenced": _last_call_referenced}


@pytest.mark.parametrize("replay", list(REPLAYS))
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("model", [GEMINI, GEMINI_COMPAT])
def test_items_answered_without_include_resolve_to_the_items_the_client_saw(
        sim: Sim, clients: list[openai.OpenAI], model: str, stream: bool, replay: str) -> None:
    """A tool round of two parallel calls (the first one signed) answered without ``include``: the call ids the
    client saw name those very calls when it replays them as bare references (the upstream gets both calls back,
    in order, with the arguments the client saw), and ``GET`` (with ``include`` or without) shows them under the
    same ids; the answer with ``include`` has the same ids for the same items, plus the signatures' own items."""
    prompt = f"[[sim:tools=1]] [[sim:parallel=2]] ids without include ({model}, {stream}, {replay})"
    kw: dict[str, Any] = {"model": model, "tools": [WEATHER], "reasoning": REASONING, "max_output_tokens": 8192,
                          "store": False}
    with Rejections(sim):
        first = create(clients[0], stream=stream, input=[{"role": "user", "content": prompt}], **kw)
        seen = first.output
        calls = first.calls
        assert len(calls) == 2 and calls[0]["call_id"] != calls[1]["call_id"], seen
        assert all("encrypted_content" not in i for i in seen), seen
        if stream:  # the stream names each item as the answer does
            assert [i for e, i in first.streamed if e == "done"] == [i["id"] for i in seen], first.streamed
        for n, client in enumerate(clients):  # either replica, with include or without
            shown = _get(client, first.response["id"], include=bool(n))["output"]
            by_id = {i["id"]: i for i in shown}
            for item in seen:
                _same_item({k: v for k, v in item.items() if k != "encrypted_content"},
                           {k: v for k, v in by_id[item["id"]].items() if k != "encrypted_content"})
            if n:  # with include: the signatures' own items are there too, the client's items keep their ids
                assert len(shown) > len(seen) and [i["id"] for i in shown if i["id"] in by_id] == list(by_id)
        refs = REPLAYS[replay](seen)
        outputs: Items = [{"type": "function_call_output", "call_id": c["call_id"], "output": f"sunny {n}"}
                          for n, c in enumerate(calls)]
        second = create(clients[1], stream=stream, input=[{"role": "user", "content": prompt}, *refs, *outputs],
                        **kw)
        body = sim.last()["body"]
        assert _calls_sent(body) == [(c["name"], json.loads(c["arguments"])) for c in calls], body
        assert second.response["status"] == "completed" and not second.calls, second.response
        with_include = create(clients[0], stream=stream, input=[{"role": "user", "content": prompt + " again"}],
                              include=INCLUDE, **kw)
        both = {i["id"]: i["type"] for i in with_include.output}
        without = [(i["id"], i["type"]) for i in seen]
        assert all(both.get(iid.replace(first.response["id"][5:], with_include.response["id"][5:])) == t
                   for iid, t in without), (with_include.output, seen)


def test_a_responses_upstream_s_own_reasoning_ids_handed_out_before_still_resolve(
        sim: Sim, clients: list[openai.OpenAI]) -> None:
    """An earlier release showed a Responses upstream's reasoning items as minted (the upstream's ``rs_...`` id): a
    client still holding such an id gets that very item back by a bare reference (looked for in the conversation
    its other references name), and the upstream gets its own reasoning item before the call it preceded."""
    prompt = "[[sim:tools=1]] old upstream ids"
    kw: dict[str, Any] = {"model": RESPONSES, "tools": [WEATHER], "reasoning": REASONING, "include": INCLUDE,
                          "max_output_tokens": 8192, "store": False}
    user = {"role": "user", "content": prompt}
    with Rejections(sim):
        first = create(clients[0], stream=False, input=[user], **kw)
        (call,) = first.calls
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        create(clients[1], stream=False, input=[user, *first.output, output], **kw)
        minted = [i for i in sim.last()["body"]["input"] if i.get("type") == "reasoning"]
        assert len(minted) == 1 and "." not in minted[0]["id"], minted
        old = [{"type": "item_reference", "id": minted[0]["id"]}, {"type": "item_reference", "id": call["id"]}]
        again = create(clients[0], stream=False, input=[user, *old, output], **kw)
        assert again.response["status"] == "completed" and not again.calls, again.response
        sent = sim.last()["body"]["input"]
        assert sent[1] == minted[0] and sent[2]["type"] == "function_call" and sent[2]["call_id"] == call["call_id"]


def test_a_responses_loop_sends_the_clients_fields_byte_for_byte(sim: Sim, provider_pair: Any) -> None:
    """A Responses client in front of a Responses upstream (issue 33 item 3): the rebuilt input is spliced into the
    client's own JSON, the fields thinkgate passes reach the upstream as the bytes the client wrote (raw bytes: the
    SDK writes its own canonical JSON)."""
    odd = (b'"metadata" : {"z": "\\u00e9t\\u00e9", "a": "1"}, "text": { "verbosity" : "low" }, '
           b'"reasoning": ' + json.dumps(REASONING).encode() + b', "include": ' + json.dumps(INCLUDE).encode())
    user = {"role": "user", "content": "[[sim:tools=1]] bytes"}

    def post(url: str, items: list[Any]) -> dict[str, Any]:
        body = b'{"model": "' + RESPONSES.encode() + b'", ' + odd + b', "tools": ' + json.dumps([WEATHER]).encode() + \
            b', "store": false, "input": ' + json.dumps(items).encode() + b'}'
        r = httpx.post(url + "/v1/responses", content=body, timeout=30,
                       headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    with Rejections(sim):
        first = post(provider_pair.a.url, [user])
        (call,) = [i for i in first["output"] if i["type"] == "function_call"]
        mangled = [i for i in first["output"] if i["type"] != "reasoning"]  # the client dropped its reasoning
        post(provider_pair.b.url, [user, *mangled,
                                   {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}])
    last = httpx.get(sim.url + "/_sim/last", params={"raw": "1"}).json()
    assert '"metadata" : {"z": "\\u00e9t\\u00e9", "a": "1"}' not in last["raw"]  # the key is thinkgate's: compact
    assert '{"z": "\\u00e9t\\u00e9", "a": "1"}' in last["raw"] and '{ "verbosity" : "low" }' in last["raw"]
    assert any(i.get("type") == "reasoning" for i in last["body"]["input"]), "the dropped reasoning is restored"

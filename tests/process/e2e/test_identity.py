"""Conversation identity through a real gateway: SCID in responses, body-only recognition, tenants."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx

from tests.process.e2e.test_passthrough import sse_events
from tests.process_fixtures import ServerProcess, Sim
from tests.support.e2e.helpers import WEATHER_TOOL, block_dicts, tool_results

MODEL = "claude-opus-4-5"
SCID = "x-ag-conversation-id"


def _body(messages: list[dict[str, Any]], stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 4096, "stream": stream, "tools": [WEATHER_TOOL],
            "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": messages}


def test_scid_in_header_body_and_message_start(gateway: ServerProcess) -> None:
    key = {"x-api-key": "sk-ident-1"}
    msgs = [{"role": "user", "content": "[[sim:tools=1]] hello"}]
    r = httpx.post(gateway.url + "/v1/messages", json=_body(msgs), headers=key)
    assert r.status_code == 200
    assert r.json()["_gateway"]["conversation_id"] == r.headers[SCID]
    s = httpx.post(gateway.url + "/v1/messages", json=_body(msgs, stream=True), headers=key)
    start = sse_events(s.text)[0]
    assert start[0] == "message_start"
    assert start[1]["message"]["_gateway"]["conversation_id"] == s.headers[SCID]


def test_headerless_client_is_recognised_from_the_body(gateway: ServerProcess) -> None:
    """Cursor's servers send no custom header: the SCID must still be stable across the loop."""
    client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ident-cursor", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=3]] body only"}]
    scids = []
    while True:
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=4096, tools=[WEATHER_TOOL], messages=history,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 2048})
        scids.append(raw.headers[SCID])
        answer = raw.parse()
        if answer.stop_reason != "tool_use":
            break
        # Strip signatures the way IDEs do: recognition must not depend on them.
        content = [{k: v for k, v in b.items() if k != "signature"} for b in block_dicts(answer)]
        history += [{"role": "assistant", "content": content}, {"role": "user", "content": tool_results(answer)}]
    client.close()
    assert len(scids) == 4 and len(set(scids[1:])) == 1 and scids[1] == scids[0]


def test_foreign_scid_is_a_miss_and_leaks_nothing(sim: Sim, gateway: ServerProcess) -> None:
    owner = {"x-api-key": "sk-tenant-a"}
    first = [{"role": "user", "content": "[[sim:tools=1]] secret plans of tenant A"}]
    r = httpx.post(gateway.url + "/v1/messages", json=_body(first), headers=owner)
    a_scid = r.headers[SCID]
    answer = r.json()
    # Tenant B presents A's SCID and replays no history: nothing of A's may be rebuilt or returned.
    other = {"x-api-key": "sk-tenant-b", SCID: a_scid}
    mine = [{"role": "user", "content": "[[sim:tools=0]] hello from B"}]
    r2 = httpx.post(gateway.url + "/v1/messages", json=_body(mine), headers=other)
    assert r2.status_code == 200
    # B's first turn is recorded under the id B chose, in B's own tenant namespace (pipeline
    # ``_plan_record``): echoing it leaks nothing (tests/support/augment/scid_rule_tests.py checks A's thread).
    assert r2.headers[SCID] == a_scid
    assert sim.last()["body"]["messages"] == mine
    assert "secret plans" not in r2.text and answer["content"][0]["thinking"] not in r2.text
    # B replays A's assistant turn verbatim (forged from B's view): not verified under B's tenant.
    replay = [*first, {"role": "assistant", "content": answer["content"]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": answer["content"][-1]["id"],
                                            "content": "x"}]}]
    r3 = httpx.post(gateway.url + "/v1/messages", json=_body(replay), headers={"x-api-key": "sk-tenant-b"})
    assert r3.status_code == 200
    sent = sim.last()["body"]
    assert "thinking" not in sent  # B could not prove the thinking: thinking disabled, blocks dropped
    assert all(b.get("type") != "thinking" for m in sent["messages"] if isinstance(m["content"], list)
               for b in m["content"])


def test_malformed_scid_header_is_ignored(gateway: ServerProcess) -> None:
    r = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": "sk-x", SCID: "../../etc/passwd"},
                   json=_body([{"role": "user", "content": "hi"}]))
    assert r.status_code == 200 and r.headers[SCID] != "../../etc/passwd"
    json.dumps(r.json())


def test_server_side_thread_state_rebuilds_history(sim: Sim, gateway: ServerProcess) -> None:
    """Augment-style: the client sends the SCID and only its new message; thinkgate replays the rest."""
    key = {"x-api-key": "sk-ident-thread", "anthropic-beta": "interleaved-thinking-2025-05-14"}
    before = sum(sim.stats()["rejections"].values())
    r = httpx.post(gateway.url + "/v1/messages", headers=key,
                   json=_body([{"role": "user", "content": "[[sim:tools=2]] remember me"}]))
    scid, answer = r.headers[SCID], r.json()
    rounds = 1
    while answer["stop_reason"] == "tool_use":
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
                   for b in answer["content"] if b["type"] == "tool_use"]
        r = httpx.post(gateway.url + "/v1/messages", headers={**key, SCID: scid},
                       json=_body([{"role": "user", "content": results}]))
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["content"][0]["type"] == "thinking"  # thinking stays on: the rebuilt turns verify
        sent = sim.last()["body"]["messages"]
        assert sent[0]["content"] == "[[sim:tools=2]] remember me" and len(sent) == 2 * rounds + 1
        rounds += 1
    assert rounds == 3 and answer["stop_reason"] == "end_turn"
    assert sum(sim.stats()["rejections"].values()) == before

"""The first turn of a thread the client named is recorded under the client's SCID."""

from __future__ import annotations

import uuid

import httpx

from gateway.dialects.canonical import Message, Request, TextBlock, ToolUseBlock
from gateway.pipeline.exchange import ClientRequest, Exchange, Identity
from gateway.pipeline.stages import _plan_record
from tests.process_fixtures import ServerProcess, Sim
from tests.support.e2e.helpers import WEATHER_TOOL

CLIENT_SCID = "c0ffee00-0000-4000-8000-000000000002"


def exchange(*messages: Message, header_scid: str | None, via: str = "none") -> Exchange:
    ex = Exchange(ClientRequest(endpoint="messages", dialect="anthropic", request_id="r", headers={}, query="",
                                raw_body=b""), request=Request("claude-opus-4-5", list(messages)),
                  identity=Identity(header_scid=header_scid, via=via, stateful=True))
    return ex


def test_first_turn_uses_the_client_scid() -> None:
    ex = exchange(Message("user", [TextBlock("hi")]), header_scid=CLIENT_SCID)
    _plan_record(ex, {}, None)
    assert (ex.identity.scid, ex.identity.expected_position) == (CLIENT_SCID, 0)


def test_unmatched_replayed_history_still_gets_a_fresh_scid() -> None:
    ex = exchange(Message("user", [TextBlock("hi")]), Message("assistant", [ToolUseBlock("t", "x", {})]),
                  Message("user", [TextBlock("more")]), header_scid=CLIENT_SCID)
    _plan_record(ex, {}, None)
    assert ex.identity.scid not in (None, CLIENT_SCID) and ex.identity.expected_position == 0
    nameless = exchange(Message("user", [TextBlock("hi")]), header_scid=None)
    _plan_record(nameless, {}, None)
    assert nameless.identity.scid is not None and nameless.identity.expected_position == 0


def test_anthropic_client_names_a_new_thread_then_replays_nothing(sim: Sim, gateway: ServerProcess) -> None:
    scid = str(uuid.uuid4())
    headers = {"x-api-key": "sk-scid-rule", "x-ag-conversation-id": scid}
    body = {"model": "claude-opus-4-5", "max_tokens": 4096, "tools": [WEATHER_TOOL],
            "thinking": {"type": "enabled", "budget_tokens": 2048}}
    before = sum(sim.stats()["rejections"].values())
    first = httpx.post(gateway.url + "/v1/messages", headers=headers,
                       json={**body, "messages": [{"role": "user", "content": "[[sim:tools=1]] new thread"}]})
    assert first.status_code == 200 and first.headers["x-ag-conversation-id"] == scid
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
               for b in first.json()["content"] if b["type"] == "tool_use"]
    second = httpx.post(gateway.url + "/v1/messages", headers=headers,
                        json={**body, "messages": [{"role": "user", "content": results}]})
    assert second.status_code == 200, second.text
    assert second.headers["x-ag-conversation-id"] == scid
    assert "Final answer after 1 tool round" in second.json()["content"][-1]["text"]
    assert sum(sim.stats()["rejections"].values()) == before


def test_same_id_in_two_tenants_are_two_threads(sim: Sim, gateway: ServerProcess) -> None:
    """Tenant B naming tenant A's id starts B's own thread; neither sees the other's turns."""
    scid = str(uuid.uuid4())
    body = {"model": "claude-opus-4-5", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    for key, text in (("sk-scid-a", "secret plans of A"), ("sk-scid-b", "hello from B")):
        r = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": key, "x-ag-conversation-id": scid},
                       json={**body, "messages": [{"role": "user", "content": text}]})
        assert r.status_code == 200 and r.headers["x-ag-conversation-id"] == scid
        assert sim.last()["body"]["messages"] == [{"role": "user", "content": text}]  # nothing rebuilt from A
    for key, mine, theirs in (("sk-scid-a", "secret plans", "hello from B"), ("sk-scid-b", "hello from B",
                                                                             "secret plans")):
        export = httpx.get(f"{gateway.url}/gateway/conversations/{scid}", headers={"x-api-key": key})
        assert export.status_code == 200 and len(export.json()["turns"]) == 1
        assert mine in export.text and theirs not in export.text

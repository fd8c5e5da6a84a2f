"""Acceptance of the Responses client surface: the official openai SDK (``client.responses.create``, streamed and
not) drives tool loops with reasoning through two gateway replicas on one real redis-server to the Anthropic and
Gemini simulators, alternating replicas every request: no 4xx, and the upstream gets the turn's reasoning back on
every request (Claude's signed thinking byte-exact, Gemini's genuine thought signatures), also when the client drops
the reasoning items, drops their ``encrypted_content``, replays bare item references with ``store: false``, or
continues by ``previous_response_id`` alone. Without records (the state machine off, Redis not there) the sealed
reasoning items carry the turn to every upstream kind, the OpenAI-compatible flavors' message-level fields too."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, free_port, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.e2e.traffic import thinking_lost
from tests.support.gemini.helpers import (
    COPILOT,
    DEEPSEEK,
    OPENROUTER,
    OPENROUTER_CLAUDE,
    RESPONSES,
    Rejections,
    gateway_env,
)
from tests.support.reliability.recording_proxy import Exchange
from tests.support.responses.helpers import INCLUDE, KEY, REASONING, Items, create, run_loop

CLAUDE, GEMINI = "claude-opus-4-5", "gemini-3-pro-preview"
BYPASS = "skip_thought_signature_validator"


def _claude_kept(body: dict[str, Any]) -> None:
    """The first assistant turn of the loop (the one that thought) goes back with its signed thinking first."""
    turns = [m for m in body["messages"] if m["role"] == "assistant"]
    first = turns[0]["content"]
    assert first[0]["type"] == "thinking" and first[0]["signature"], first[0]
    assert body.get("thinking", {}).get("type") == "enabled"


def _gemini_kept(body: dict[str, Any]) -> None:
    """Every step's first call of the current turn carries its genuine thought signature (not the bypass)."""
    for content in body["contents"]:
        calls = [p for p in content.get("parts", []) if "functionCall" in p]
        if content.get("role") == "model" and calls:
            assert calls[0].get("thoughtSignature") not in (None, BYPASS), calls[0]


def _responses_kept(body: dict[str, Any]) -> None:
    """Every function call goes back right after the reasoning item the upstream minted before it (its own id and
    encrypted_content)."""
    items = body["input"]
    calls = [n for n, i in enumerate(items) if i.get("type") == "function_call"]
    assert calls, items
    for n in calls:
        before = items[n - 1]
        assert before.get("type") == "reasoning" and before.get("encrypted_content") and before["id"].startswith(
            "rs_"), items


def _shown_sealed(turns: list[Any], body: dict[str, Any]) -> None:
    """The client saw the gateway's reasoning items (its ids, the upstream's item sealed in ``encrypted_content``,
    the upstream's summary text), the upstream gets back its own items (its ids, its encrypted_content)."""
    minted = [i for i in body["input"] if i.get("type") == "reasoning"]
    shown = [i for t in turns if t.calls for i in t.output if i["type"] == "reasoning"]
    assert len(shown) == len(minted) and all(
        i["encrypted_content"].startswith("tg1.") and re.fullmatch(r"rs_[\w-]+\.\d+\.\d+", i["id"]) for i in shown
    ) and all(m["encrypted_content"].startswith("gAAAA") and "." not in m["id"] for m in minted), (shown, minted)
    assert [[p["text"] for p in i["summary"]] for i in shown] == [[p["text"] for p in m["summary"]] for m in minted]


KEPT = {CLAUDE: _claude_kept, GEMINI: _gemini_kept, RESPONSES: _responses_kept}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("mangle", ["faithful", "drop_reasoning", "drop_encrypted", "references", "previous"])
@pytest.mark.parametrize("model", [CLAUDE, GEMINI, RESPONSES])
def test_a_responses_tool_loop_keeps_its_reasoning_on_every_turn(
        sim: Sim, clients: list[openai.OpenAI], model: str, mangle: str, stream: bool) -> None:
    rejected = sum(sim.stats()["rejections"].values())
    turns = run_loop(clients, model, f"[[sim:tools=3]] weather in three cities ({mangle}, {stream})",
                     stream=stream, mangle=mangle)
    assert [len(t.calls) for t in turns] == [1, 1, 1, 0], [t.response for t in turns]
    assert all(t.response["status"] == "completed" for t in turns)
    assert len({t.scid for t in turns}) == 1
    assert sum(sim.stats()["rejections"].values()) == rejected, sim.stats()["rejections"]
    assert turns[0].output[0]["type"] == "reasoning" and turns[0].output[0]["summary"], turns[0].output
    body = sim.last()["body"]  # the last request: the whole loop replayed
    KEPT[model](body)
    if model == RESPONSES:
        _shown_sealed(turns, body)
        for t in turns if stream else ():  # each streamed item has one id, from added to done and in the response
            assert [i for e, i in t.streamed if e == "added"] == [i for e, i in t.streamed if e == "done"] == [
                i["id"] for i in t.output], t.streamed
    if stream:
        events = turns[0].events
        assert events[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
        assert "response.reasoning_summary_text.delta" in events and "response.function_call_arguments.delta" in \
            events and events[-1] == "response.completed"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
def test_with_the_records_gone_the_sealed_reasoning_carries_the_turn(
        sim: Sim, clients: list[openai.OpenAI], redis_server: RedisServer, model: str, stream: bool) -> None:
    """Redis flushed before every request: nothing to restore from, yet a client that replays the reasoning items
    as received still gets its thinking (Claude's signed blocks, Gemini's genuine signatures) to the upstream: the
    encrypted_content carries them. Without it (the same loop with encrypted_content dropped) they are degraded,
    never forged: still no 4xx."""
    rejected = sum(sim.stats()["rejections"].values())
    redacted = " [[sim:redacted]]" if model == CLAUDE else ""  # a redacted block after the thinking, sealed too
    kept = run_loop(clients, model, f"[[sim:tools=2]]{redacted} sealed, records gone ({stream})", stream=stream,
                    mangle="faithful", sim=sim, before=redis_server.flush)
    assert [len(t.calls) for t in kept] == [1, 1, 0]
    last = kept[-1].upstream
    assert last is not None
    (_claude_kept if model == CLAUDE else _gemini_kept)(last)
    if model == CLAUDE:
        first = next(m for m in last["messages"] if m["role"] == "assistant")["content"]
        assert [b["type"] for b in first[:2]] == ["thinking", "redacted_thinking"], first
    lost = run_loop(clients, model, f"[[sim:tools=2]] unsealed, records gone ({stream})", stream=stream,
                    mangle="drop_encrypted", sim=sim, before=redis_server.flush)
    assert [len(t.calls) for t in lost] == [1, 1, 0]
    body = lost[-1].upstream
    assert body is not None
    if model == CLAUDE:
        assert not any(b.get("type") == "thinking" for m in body["messages"] if isinstance(m["content"], list)
                       for b in m["content"])
    else:
        calls = [p for c in body["contents"] for p in c.get("parts", []) if "functionCall" in p]
        assert all(p.get("thoughtSignature") in (None, BYPASS) for p in calls)
    assert sum(sim.stats()["rejections"].values()) == rejected, sim.stats()["rejections"]


COMPAT_FIELD = {OPENROUTER: "reasoning_details", COPILOT: "reasoning_text", DEEPSEEK: "reasoning_content"}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("mangle", ["faithful", "drop_reasoning", "references", "previous"])
@pytest.mark.parametrize("model", list(COMPAT_FIELD))
def test_openai_compatible_upstreams_get_their_provider_fields_back(
        sim: Sim, clients: list[openai.OpenAI], model: str, mangle: str, stream: bool) -> None:
    """The same loops to OpenRouter-, Copilot- and DeepSeek-style upstreams: every assistant message goes back with
    the reasoning field its upstream returned (from the records, whatever the client kept of the items)."""
    rejected = sum(sim.stats()["rejections"].values())
    turns = run_loop(clients, model, f"[[sim:tools=2]] compat {model} ({mangle}, {stream})", stream=stream,
                     mangle=mangle, sim=sim)
    assert [len(t.calls) for t in turns] == [1, 1, 0]
    body = turns[-1].upstream
    assert body is not None
    assistants = [m for m in body["messages"] if m["role"] == "assistant"]
    assert len(assistants) == 2 and all(m.get(COMPAT_FIELD[model]) for m in assistants), assistants
    assert sum(sim.stats()["rejections"].values()) == rejected, sim.stats()["rejections"]


# how each OpenAI-compatible flavor degrades a loop whose reasoning fields are not whole (``sanitize_compat``)
COMPAT_DEGRADE = {OPENROUTER: "tool_loop_textualized", COPILOT: "tool_loop_textualized",
                  DEEPSEEK: "tool_loop_textualized", OPENROUTER_CLAUDE: "thinking_disabled"}
NO_RECORDS_SECRET = "responses-no-records-secret-0123456789"


class NoRecords:
    """Two replicas that serve without records, started on first use: ``off`` (``GATEWAY_STATE_MACHINE_ENABLED=false``
    on the shared redis-server) and ``redis_down`` (a Redis URL nothing listens on); one secret, so either replica
    opens what the other sealed."""

    def __init__(self, sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> None:
        self.env = {"off": gateway_env(sim, GATEWAY_REDIS_URL=redis_server.url, GATEWAY_SECRET=NO_RECORDS_SECRET,
                                       GATEWAY_STATE_MACHINE_ENABLED="false"),
                    "redis_down": gateway_env(sim, GATEWAY_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
                                              GATEWAY_SECRET=NO_RECORDS_SECRET)}
        self.sim, self.gateways = sim, gateways
        self.pairs: dict[str, tuple[ServerProcess, ServerProcess]] = {}

    def pair(self, mode: str) -> tuple[ServerProcess, ServerProcess]:
        if mode not in self.pairs:
            self.pairs[mode] = (self.gateways.start(self.sim.url, self.env[mode]),
                                self.gateways.start(self.sim.url, self.env[mode]))
        return self.pairs[mode]

    def clients(self, mode: str) -> list[openai.OpenAI]:
        return [openai.OpenAI(base_url=g.url + "/v1", api_key=KEY, max_retries=0) for g in self.pair(mode)]

    def degrades(self, mode: str, model: str) -> float:
        return sum(metric_sum(g, "gateway_sanitize_actions_total", action=COMPAT_DEGRADE[model])
                   for g in self.pair(mode))


@pytest.fixture(scope="module")
def no_records(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> NoRecords:
    return NoRecords(sim, gateways, redis_server)


def _lost(turn: Any) -> list[int]:
    """The replayed assistant messages of the upstream request of ``turn`` that went without their reasoning fields."""
    return thinking_lost(Exchange(None, turn.upstream_path, turn.upstream, 200))


def _tampered(items: Items) -> Items:
    """A client (or anyone on the way) that alters the sealed content of every reasoning item (its MAC reversed)."""
    def alter(token: str) -> str:
        head, _, tag = token.rpartition(".")
        return f"{head}.{tag[::-1]}"
    return [{**i, "encrypted_content": alter(i["encrypted_content"])} if i.get("encrypted_content") else i
            for i in items]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("model", list(COMPAT_DEGRADE))
@pytest.mark.parametrize("mode", ["off", "redis_down"])
def test_without_records_sealed_items_carry_an_openai_compatible_upstream_s_reasoning_fields(
        sim: Sim, no_records: NoRecords, mode: str, model: str, stream: bool) -> None:
    """No record to restore from: a client that replays the output items as received gets every earlier turn to the
    upstream with its reasoning fields (OpenRouter's encrypted ``reasoning_details``, Copilot's ``reasoning_opaque``,
    DeepSeek's ``reasoning_content``: the sealed item carries them), nothing degraded, no upstream 4xx. The same
    loop with the sealed content altered: the items are dropped, never forged, and each flavor degrades the way its
    upstream accepts (``sanitize_compat``), still no 4xx."""
    clients = no_records.clients(mode)
    try:
        with Rejections(sim):
            before = no_records.degrades(mode, model)
            kept = run_loop(clients, model, f"[[sim:tools=2]] sealed fields {mode} {model} {stream}", stream=stream,
                            mangle="faithful", sim=sim)
            assert [len(t.calls) for t in kept] == [1, 1, 0], [t.response for t in kept]
            for n, t in enumerate(kept):
                assert t.upstream is not None
                sent = [m for m in t.upstream["messages"] if m["role"] == "assistant"]
                assert len(sent) == n and all(m.get("tool_calls") for m in sent), f"request {n}: {sent}"
                assert _lost(t) == [], f"request {n}: reasoning fields lost {sent}"
            assert no_records.degrades(mode, model) == before, "nothing to degrade"
            altered = run_loop(clients, model, f"[[sim:tools=2]] altered fields {mode} {model} {stream}",
                               stream=stream, mangle="faithful", sim=sim, replay=_tampered)
            assert [len(t.calls) for t in altered] == [1, 1, 0], [t.response for t in altered]
            last = altered[-1]
            assert last.upstream is not None and _lost(last), "altered content carries nothing"
            assert no_records.degrades(mode, model) > before, "degraded the flavor's way, and counted"
    finally:
        for c in clients:
            c.close()


# how the real API fails each replay style thinkgate repairs: (status, simulator rule, the error text's start)
STRAIGHT_FAILS = {
    "drop_reasoning": (400, "responses-3", "Item 'fc_"),
    "drop_encrypted": (404, "responses-2", "Item with id 'rs_"),
    "references": (404, "responses-2", "Item with id 'rs_"),
    "previous": (400, "responses-5", "Previous response with id 'resp_"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("mangle", list(STRAIGHT_FAILS))
def test_the_same_loops_straight_to_the_simulator_fail_with_its_errors(
        sim: Sim, clients: list[openai.OpenAI], mangle: str, stream: bool) -> None:
    """Each replay style thinkgate repairs, ``store: false`` throughout (``previous_response_id`` too, as Codex
    sends it): sent straight to the simulator's Responses profile the second request gets the real API's error;
    the very same loop through thinkgate (two replicas, alternating) completes with no 4xx and the upstream's
    reasoning item before every call."""
    status, rule, text = STRAIGHT_FAILS[mangle]
    prompt = f"[[sim:tools=2]] straight or through ({mangle}, {stream})"
    with openai.OpenAI(base_url=sim.url + "/openai/v1", api_key=KEY, max_retries=0) as direct:
        before = sim.stats()["rejections"].get(rule, 0)
        with pytest.raises(openai.APIStatusError) as failed:
            run_loop([direct], RESPONSES, prompt + " direct", stream=stream, mangle=mangle, store=False)
    assert failed.value.status_code == status and failed.value.message.startswith(f"Error code: {status}")
    assert text in str(failed.value.body), failed.value.body
    assert sim.stats()["rejections"][rule] == before + 1
    rejected = sum(sim.stats()["rejections"].values())
    turns = run_loop(clients, RESPONSES, prompt, stream=stream, mangle=mangle, store=False, sim=sim)
    assert [len(t.calls) for t in turns] == [1, 1, 0] and len({t.scid for t in turns}) == 1
    assert sum(sim.stats()["rejections"].values()) == rejected, sim.stats()["rejections"]
    last = turns[-1].upstream
    assert last is not None and last["store"] is False and "previous_response_id" not in last
    _responses_kept(last)


def _asked(body: dict[str, Any]) -> list[str]:
    """The markers of the user messages an upstream request carries, in order."""
    users = [m for m in body.get("messages") or body.get("input") or [] if m.get("role") == "user"]
    return re.findall(r"branch-[a-z]", json.dumps(users))


@pytest.mark.parametrize("model", [CLAUDE, RESPONSES])
def test_previous_response_id_naming_an_earlier_response_branches_there(
        sim: Sim, clients: list[openai.OpenAI], model: str) -> None:
    """``previous_response_id`` naming an earlier response (``store: false``, alternating replicas): the upstream
    gets the conversation up to that response only, and the answer starts a branch that continues on its own; the
    original branch goes on as it was."""
    def ask(n: int, marker: str, previous: str | None) -> dict[str, Any]:
        kw: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        turn = create(clients[n % 2], stream=n % 2 == 1, model=model, input=f"say hi ({marker})", store=False,
                      reasoning=REASONING, include=INCLUDE, max_output_tokens=4096, **kw)
        assert turn.response["status"] == "completed"
        return turn.response

    with Rejections(sim):
        r0 = ask(0, "branch-a", None)
        r1 = ask(1, "branch-b", r0["id"])
        assert _asked(sim.last()["body"]) == ["branch-a", "branch-b"]
        r2 = ask(2, "branch-c", r0["id"])  # back to the first response: turn b is not part of this path
        assert _asked(sim.last()["body"]) == ["branch-a", "branch-c"]
        ask(3, "branch-d", r2["id"])
        assert _asked(sim.last()["body"]) == ["branch-a", "branch-c", "branch-d"]
        ask(4, "branch-e", r1["id"])  # the original branch is untouched
        assert _asked(sim.last()["body"]) == ["branch-a", "branch-b", "branch-e"]
    assert r2["id"] != r1["id"]


@pytest.mark.parametrize("mangle", ["faithful", "drop_reasoning", "drop_encrypted"])
def test_to_a_responses_upstream_with_the_records_gone_sealed_items_carry_the_turn(
        sim: Sim, clients: list[openai.OpenAI], redis_server: RedisServer, mangle: str) -> None:
    """Redis flushed before every request: replayed as received, the gateway's reasoning items carry the upstream's
    own (sealed in their ``encrypted_content``), so every call goes back after the reasoning item minted before it.
    Without them (dropped, or ``encrypted_content`` dropped) the calls go without reasoning and without item ids:
    no 4xx, never a forged or mismatched reasoning item (docs/responses-api.md, "To an OpenAI Responses upstream")."""
    rejected = sum(sim.stats()["rejections"].values())
    turns = run_loop(clients, RESPONSES, f"[[sim:tools=2]] records gone ({mangle})", stream=False, mangle=mangle,
                     sim=sim, before=redis_server.flush)
    assert [len(t.calls) for t in turns] == [1, 1, 0]
    last = turns[-1].upstream
    assert last is not None
    if mangle == "faithful":
        _responses_kept(last)
        _shown_sealed(turns, last)
    else:
        assert all("id" not in i for i in last["input"] if i.get("type") == "function_call"), last["input"]
        assert not any(i.get("type") == "reasoning" for i in last["input"]), last["input"]
    assert sum(sim.stats()["rejections"].values()) == rejected, sim.stats()["rejections"]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("mode", ["off", "redis_down"])
def test_without_records_sealed_items_carry_a_responses_upstream_s_reasoning(
        sim: Sim, no_records: NoRecords, mode: str, stream: bool) -> None:
    """No record to restore from (the state machine off, Redis not there), two replicas alternating: a client that
    replays the output items as received gets every earlier call to the Responses upstream right after the
    reasoning item the upstream minted before it (its id, its encrypted_content, opened from the gateway's sealed
    item), on every request, with no upstream 4xx. The same loop with the sealed content altered: the items are
    dropped (never forwarded), the calls go without reasoning and without ids, still no 4xx."""
    clients = no_records.clients(mode)
    try:
        with Rejections(sim):
            kept = run_loop(clients, RESPONSES, f"[[sim:tools=2]] sealed upstream items {mode} {stream}",
                            stream=stream, mangle="faithful", sim=sim)
            assert [len(t.calls) for t in kept] == [1, 1, 0], [t.response for t in kept]
            for n, t in enumerate(kept[1:], 1):
                assert t.upstream is not None
                assert len([i for i in t.upstream["input"] if i.get("type") == "function_call"]) == n
                _responses_kept(t.upstream)
            _shown_sealed(kept, kept[-1].upstream or {})
            altered = run_loop(clients, RESPONSES, f"[[sim:tools=2]] altered upstream items {mode} {stream}",
                               stream=stream, mangle="faithful", sim=sim, replay=_tampered)
            assert [len(t.calls) for t in altered] == [1, 1, 0], [t.response for t in altered]
            last = altered[-1].upstream
            assert last is not None and not any(i.get("type") == "reasoning" for i in last["input"]), last["input"]
            assert all("id" not in i for i in last["input"] if i.get("type") == "function_call"), last["input"]
    finally:
        for c in clients:
            c.close()

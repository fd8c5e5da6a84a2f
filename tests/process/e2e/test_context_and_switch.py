"""Model switches, context management and compaction end to end: the official ``anthropic`` SDK -> two gateway
replicas on one redis-server (requests alternate between them) -> the strict simulator (``thinkgate_sim``).

- A conversation that moves to another model mid tool loop completes with no 4xx: to a model that binds thinking
  (it drops what it cannot read) the recorded blocks go back unchanged and ``model_binding_mismatch`` is counted;
  to an older model (which 400s on another model's block, as it does straight to the simulator) they are not
  restored.
- ``context_management`` edits reach the upstream unchanged and the ``applied_edits`` report reaches the client.
- A ``compaction`` block round-trips byte-exact; a client that drops or re-encodes it gets it restored (on a
  bound model the thinking after it is bound to it: without it the request is the binding 400, as straight to
  the simulator).
- Thinking a client omits from turns that ``clear_thinking_20251015`` clears is not restored (without the edit,
  it is)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import anthropic
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import WEATHER_TOOL

KEY = "sk-ant-context-and-switch-test-key"
SECRET = "context-and-switch-secret-0123456789abcdef"
ACTIONS = "gateway_sanitize_actions_total"
COMPACT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}
CLEAR = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]}
PAD = "The quick brown fox jumps over the lazy dog. " * 4800  # about 54,000 tokens: compaction triggers


@pytest.fixture(scope="module")
def replicas(gateways: GatewayFactory, sim: Sim, redis_server: RedisServer) -> list[ServerProcess]:
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": SECRET}
    return [gateways.start(sim.url, env) for _ in range(2)]


class Client:
    """Alternates every request between the replicas (only the shared Redis connects a conversation's turns)."""

    def __init__(self, replicas: list[ServerProcess], stream: bool = False) -> None:
        self.clients = [anthropic.Anthropic(base_url=r.url, api_key=KEY, max_retries=0) for r in replicas]
        self.n = 0
        self.stream = stream

    def create(self, betas: list[str], **params: Any) -> Any:
        client = self.clients[self.n % len(self.clients)]
        self.n += 1
        if self.stream:
            with client.beta.messages.stream(betas=betas, **params) as s:
                return s.get_final_message()
        return client.beta.messages.create(betas=betas, **params)


def counted(replicas: list[ServerProcess], action: str) -> float:
    return sum(metric_sum(r, ACTIONS, action=action) for r in replicas)


def blocks(reply: Any) -> list[dict[str, Any]]:
    """The answer's blocks as a client sends them back (what the SDK's stream accumulator leaves unset or
    null, e.g. a compaction block's ``encrypted_content``, left out)."""
    return [b.model_dump(exclude_none=True) for b in reply.content]


def results(reply: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "sunny"}
                                        for b in reply.content if b.type == "tool_use"]}


def drop_thinking(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in content if b["type"] not in ("thinking", "redacted_thinking")]


def loop(create: Callable[..., Any], first: str, models: Callable[[int], str], thinking: Callable[[int], Any], *,
         betas: list[str], mangle: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = lambda c: c,
         **extra: Any) -> list[Any]:
    """A tool loop to its final answer; the client replays each answer through ``mangle``."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    replies = []
    for n in range(8):
        params = {"model": models(n), "max_tokens": 4096, "messages": messages, "tools": [WEATHER_TOOL], **extra}
        if thinking(n) is not None:
            params["thinking"] = thinking(n)
        reply = create(betas, **params)
        replies.append(reply)
        if reply.stop_reason != "tool_use":
            return replies
        messages = [*messages, {"role": "assistant", "content": mangle(blocks(reply))}, results(reply)]
    raise AssertionError("the tool loop did not finish")


@pytest.fixture(params=["json", "stream"])
def client(replicas: list[ServerProcess], request: pytest.FixtureRequest) -> Iterator[Client]:
    c = Client(replicas, stream=request.param == "stream")
    yield c
    for each in c.clients:
        each.close()


@pytest.mark.parametrize("mangle", [lambda c: c, drop_thinking], ids=["faithful", "drops_thinking"])
def test_switch_to_a_model_that_cannot_read_the_blocks_completes_and_is_counted(
        client: Client, replicas: list[ServerProcess], sim: Sim, mangle: Callable[..., Any]) -> None:
    # Opus 5.5 blocks cannot be read by Sonnet 5.5: the API drops them; a Cursor-like client drops thinking, so
    # the gateway restores the recorded Opus blocks and passes them back unchanged
    before, rejected = counted(replicas, "model_binding_mismatch"), sum(sim.stats()["rejections"].values())
    replies = loop(client.create, f"Fix the failing test {uuid4()} [[sim:tools=3]]",
                   lambda n: "claude-opus-5-5" if n < 2 else "claude-sonnet-5-5", lambda n: {"type": "adaptive"},
                   betas=[], mangle=mangle)
    assert [r.stop_reason for r in replies] == ["tool_use"] * 3 + ["end_turn"]
    assert sum(sim.stats()["rejections"].values()) == rejected
    assert counted(replicas, "model_binding_mismatch") > before
    last = sim.last()["body"]
    assert any(b["type"] == "thinking" for b in last["messages"][1]["content"])  # passed back, unchanged


@pytest.mark.parametrize("mangle", [lambda c: c, drop_thinking], ids=["faithful", "drops_thinking"])
def test_switch_to_an_older_model_does_not_restore_the_other_models_thinking(
        client: Client, replicas: list[ServerProcess], sim: Sim, mangle: Callable[..., Any]) -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    models: Callable[[int], str] = lambda n: "claude-sonnet-4-5" if n < 2 else "claude-opus-4-5"  # noqa: E731
    with anthropic.Anthropic(base_url=sim.url, api_key=KEY, max_retries=0) as direct, \
            pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
        loop(lambda betas, **p: direct.beta.messages.create(betas=betas, **p),
             f"Check the weather {uuid4()} [[sim:tools=3]]", models, lambda n: thinking, betas=[])
    before = counted(replicas, "dropped")
    replies = loop(client.create, f"Check the weather again {uuid4()} [[sim:tools=3]]", models,
                   lambda n: thinking, betas=[], mangle=mangle)
    assert replies[-1].stop_reason == "end_turn"
    assert counted(replicas, "dropped") > before


def test_context_management_and_compaction_round_trip_byte_exact(
        client: Client, replicas: list[ServerProcess], sim: Sim) -> None:
    betas = ["compact-2026-01-12"]
    first = f"Summarize the repo {uuid4()} [[sim:tools=2]]\n{PAD}"
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    params = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "tools": [WEATHER_TOOL],
              "thinking": {"type": "adaptive"}, "context_management": COMPACT}
    reply = client.create(betas, messages=messages, **params)
    assert sim.last()["body"]["context_management"] == COMPACT  # the edits reach the upstream unchanged
    assert reply.context_management is not None and reply.context_management.applied_edits == []
    compaction = blocks(reply)[0]
    assert compaction["type"] == "compaction" and "\r\n" in compaction["content"]
    messages += [{"role": "assistant", "content": blocks(reply)}, results(reply)]
    client.create(betas, messages=messages, **params)
    assert sim.last()["body"]["messages"][1]["content"][0] == compaction  # replayed byte-exact


@pytest.mark.parametrize("mangle", ["dropped", "re-encoded"])
def test_a_dropped_or_re_encoded_compaction_block_is_restored(
        client: Client, replicas: list[ServerProcess], sim: Sim, mangle: str) -> None:
    betas = ["compact-2026-01-12"]
    model = "claude-opus-5-5"  # the thinking after the compaction block is bound to it
    first = f"Audit the code {uuid4()} [[sim:tools=2]]\n{PAD}"
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    params = {"model": model, "max_tokens": 4096, "tools": [WEATHER_TOOL], "thinking": {"type": "adaptive"},
              "context_management": COMPACT}
    reply = client.create(betas, messages=messages, **params)
    content = blocks(reply)
    assert content[0]["type"] == "compaction"
    if mangle == "dropped":
        mangled, error = content[1:], "bound to a different conversation"
    else:  # a client that normalises line endings in the summary
        mangled = [{**content[0], "content": content[0]["content"].replace("\r\n", "\n")}, *content[1:]]
        error = "Invalid `signature` in `compaction` block"
    messages += [{"role": "assistant", "content": mangled}, results(reply)]
    with anthropic.Anthropic(base_url=sim.url, api_key=KEY, max_retries=0) as direct, \
            pytest.raises(anthropic.BadRequestError, match=error):
        direct.beta.messages.create(betas=betas, messages=messages, **params)
    before = counted(replicas, "compaction_restored")
    final = client.create(betas, messages=messages, **params)
    assert final.stop_reason == "tool_use"
    upstream = sim.last()["body"]
    assert upstream["messages"][1]["content"] == content  # the recorded turn, compaction block first
    assert upstream["context_management"] == COMPACT  # a repaired (re-encoded) request keeps the edits
    assert counted(replicas, "compaction_restored") > before


@pytest.mark.parametrize("edit", [True, False])
def test_thinking_cleared_by_clear_thinking_is_not_restored(
        client: Client, replicas: list[ServerProcess], sim: Sim, edit: bool) -> None:
    betas = ["context-management-2025-06-27"]
    extra = {"context_management": CLEAR} if edit else {}
    params = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "tools": [WEATHER_TOOL],
              "thinking": {"type": "adaptive"}, **extra}
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Plan the trip {uuid4()} [[sim:tools=1]]"}]
    for _ in range(2):  # turn 1: one tool round and the answer
        reply = client.create(betas, messages=messages, **params)
        messages += [{"role": "assistant", "content": blocks(reply)}]
        if reply.stop_reason == "tool_use":
            messages.append(results(reply))
    messages.append({"role": "user", "content": "And the return trip?"})
    reply = client.create(betas, messages=messages, **params)  # turn 2 opens its tool loop
    assert reply.stop_reason == "tool_use"
    messages += [{"role": "assistant", "content": blocks(reply)}, results(reply)]
    # the client leaves out the thinking of the turns the edit clears (all but the latest)
    sent = copy.deepcopy(messages)
    for m in sent[:-2]:
        if m["role"] == "assistant":
            m["content"] = drop_thinking(m["content"])
    before = counted(replicas, "thinking_cleared")
    final = client.create(betas, messages=sent, **params)
    assert final.stop_reason == "end_turn"
    upstream = sim.last()["body"]["messages"]
    older = [m for m in upstream[:-2] if m["role"] == "assistant"]
    assert len(older) == 2
    has_thinking = [any(b["type"] == "thinking" for b in m["content"]) for m in older]
    if edit:
        assert has_thinking == [False, False]
        assert counted(replicas, "thinking_cleared") >= before + 2
        assert final.context_management is not None
    else:  # without the edit the recorded thinking is restored, as always
        assert has_thinking == [True, True]
    assert any(b["type"] == "thinking" for b in upstream[-2]["content"])

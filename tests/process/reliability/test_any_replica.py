"""Issue 31: any replica, any moment. Two replicas on one redis-server, every request of a conversation served
by the other replica than the one before, official SDKs as clients.

Case 1: a client that drops the latest assistant message but keeps its tool results (a history trimmer that
cuts at message granularity). On a four-round tool loop the replica serving a request holds in its
per-worker cache every turn the request replays, but not the newest one, which the other replica recorded:
a cache that decides by itself that it is current answers the load from memory, the dropped turn is not
found, and the upstream gets its results without it (400 on every surface). A cache entry serves only when
it is the conversation's current head in Redis (``state.coherence``).

Case 2: a client that collapses a message's text blocks into one, on a loop whose thinking is
``redacted_thinking``, streamed.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, next_round, send
from tests.support.e2e.traffic import replayed_turns
from tests.support.gemini.helpers import (
    CLAUDE,
    COPILOT,
    GEMINI_COMPAT,
    OPENROUTER_CLAUDE,
    ask,
    gateway_env,
    tool_messages,
)
from tests.support.manglings.anthropic import HISTORY_MANGLINGS, collapse_text_blocks, drop_latest_assistant
from tests.support.reliability.recording_proxy import RecordingProxy

SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
ROUNDS = 4
TEXTUALIZED = "[tool result for "
History = list[dict[str, Any]]


@dataclass
class Pair:
    proxy: RecordingProxy  # between the replicas and the simulator: what the upstream received, per conversation
    replicas: tuple[ServerProcess, ServerProcess]

    @property
    def urls(self) -> list[str]:
        return [sp.url for sp in self.replicas]


@pytest.fixture(scope="module")
def pair(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[Pair]:
    proxy = RecordingProxy(sim.url).start()
    env = {k: v.replace(sim.url, proxy.url) for k, v in gateway_env(sim).items()}
    env |= {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "issue-31-any-replica-0123456789ab",
            "GATEWAY_STORE_TIMEOUT_MS": "1000"}
    replicas = (gateways.start(proxy.url, env), gateways.start(proxy.url, env))
    yield Pair(proxy, replicas)
    for sp in replicas:
        sp.stop()
    proxy.close()


def upstream_findings(pair: Pair, name: str, rounds: int) -> list[str]:
    """What is wrong with what the upstream received for conversation ``name``: a 4xx, a tool result turned
    into text (the dropped turn was not restored), a replayed turn without its thinking, or fewer replayed
    turns than the loop had played."""
    out = []
    for n, e in enumerate(pair.proxy.of(name)):
        if e.status != 200:
            out.append(f"upstream request {n}: {e.status} {bytes(e.answer)[:200]!r}")
        if TEXTUALIZED in json.dumps(e.body):
            out.append(f"upstream request {n}: a tool result turned into text")
        turns = replayed_turns(e)
        if len(turns) != min(n, rounds):
            out.append(f"upstream request {n}: {len(turns)} replayed turns, the loop had played {min(n, rounds)}")
        if lost := [k for k, kept in enumerate(turns) if not kept]:
            out.append(f"upstream request {n}: replayed turns {lost} without their thinking")
    return out


@dataclass
class Run:
    requests: int = 0
    errors: list[str] = field(default_factory=list)


def loop(clients: list[Any], first: int, step: Callable[[Any], bool]) -> Run:
    """Play ``step(client)`` (True: the final answer came) until the loop ends, each request on the other replica
    than the one before: what happened."""
    run = Run()
    try:
        for _ in range(ROUNDS + 2):
            client = clients[(first + run.requests) % 2]
            run.requests += 1
            if step(client):
                return run
        run.errors.append("the loop did not finish")
    except (anthropic.APIStatusError, openai.APIStatusError) as e:
        run.errors.append(f"request {run.requests}: {e.status_code} {str(e.message)[:300]}")
    finally:
        for c in clients:
            c.close()
    return run


def anthropic_loop(urls: list[str], key: str, prompt: str, mangle: Callable[[History], History], *,
                   stream: bool, header: bool, first: int) -> Run:
    # the question in two text blocks, as agent CLIs send a prompt with a reminder beside it
    history: History = [{"role": "user", "content": [{"type": "text", "text": prompt},
                                                     {"type": "text", "text": "<reminder>be brief</reminder>"}]}]
    scid: list[str] = []

    def step(client: anthropic.Anthropic) -> bool:
        params = {"model": CLAUDE, "max_tokens": 4096, "tools": [WEATHER_TOOL], "thinking": THINKING,
                  "messages": mangle(history), "extra_headers": {SCID: scid[-1]} if header and scid else {}}
        answer, headers = send(client, params, stream=stream)
        scid.append(headers.get(SCID))
        if answer.stop_reason != "tool_use":
            return True
        history.extend(next_round(answer))
        return False

    return loop([anthropic.Anthropic(base_url=u, api_key=key, max_retries=0, timeout=30, default_headers=BETA)
                 for u in urls], first, step)


def openai_loop(urls: list[str], key: str, prompt: str, mangle: Callable[[History], History], *, model: str,
                stream: bool, header: bool, first: int) -> Run:
    extra: dict[str, Any] = {"extra_body": {"thinking": THINKING}} if model == CLAUDE else {"reasoning_effort": "low"}
    history: History = [{"role": "user", "content": prompt}]
    scid: list[str | None] = []

    def step(client: openai.OpenAI) -> bool:
        answer = ask(client, model, mangle(history), stream=stream,
                     headers={SCID: scid[-1]} if header and scid and scid[-1] else {}, max_tokens=4096, **extra)
        scid.append(answer.scid)
        history.append(answer.message)
        if answer.finish_reason != "tool_calls":
            return True
        history.extend(tool_messages(answer))
        return False

    return loop([openai.OpenAI(base_url=u + "/v1", api_key=key, max_retries=0, timeout=30, default_headers=BETA)
                 for u in urls], first, step)


SURFACES: dict[str, Callable[..., Run]] = {
    "anthropic": anthropic_loop,
    "openai-claude": lambda *a, **k: openai_loop(*a, model=CLAUDE, **k),
    "openrouter-claude": lambda *a, **k: openai_loop(*a, model=OPENROUTER_CLAUDE, **k),
    "gemini-compat": lambda *a, **k: openai_loop(*a, model=GEMINI_COMPAT, **k),
    "copilot": lambda *a, **k: openai_loop(*a, model=COPILOT, **k),
}


def play_many(pair: Pair, surface: str, mangle: Callable[[History], History],
              conversations: int, tag: str, marker: str = "") -> list[str]:
    """``conversations`` loops in flight at once, one tenant, each alternating replicas, streamed and not, with
    and without the SCID header: every failure, named."""
    uid = uuid.uuid4().hex[:8]
    key = f"sk-issue31-{tag}-{uid}"
    urls = pair.urls
    shapes = list(itertools.islice(itertools.cycle(itertools.product((False, True), (False, True))), conversations))
    runs: list[Run | None] = [None] * conversations

    def one(k: int) -> None:
        stream, header = shapes[k]
        prompt = f"[[sim:tools={ROUNDS}]] {marker}[[sim:conv={tag}{k}-{uid}]] What's the weather like? Check it for me."
        try:
            runs[k] = SURFACES[surface](urls, key, prompt, mangle, stream=stream, header=header, first=k % 2)
        except Exception as e:  # a failure of the harness is a finding too
            runs[k] = Run(errors=[f"{type(e).__name__}: {str(e)[:300]}"])

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return [f"{surface} conversation {k} (stream={shapes[k][0]}, header={shapes[k][1]}): {e}"
            for k, r in enumerate(runs)
            for e in [*(r.errors if r else ["did not return"]), *upstream_findings(pair, f"{tag}{k}-{uid}", ROUNDS)]]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("surface", list(SURFACES))
def test_a_dropped_latest_turn_recorded_by_the_other_replica_is_restored(
        pair: Pair, sim: Sim, surface: str) -> None:
    before = dict(sim.stats()["rejections"])
    failures = play_many(pair, surface, drop_latest_assistant, 16, "d")
    assert not failures, "\n".join(failures)
    assert dict(sim.stats()["rejections"]) == before



@pytest.mark.timeout(180)
def test_text_blocks_collapsed_on_a_redacted_thinking_loop_across_replicas(pair: Pair, sim: Sim) -> None:
    """Case 2: the client joins a message's text blocks into one; the loop's thinking carries redacted_thinking."""
    before = dict(sim.stats()["rejections"])
    failures = play_many(pair, "anthropic", collapse_text_blocks, 16, "r", marker="[[sim:redacted]] ")
    assert not failures, "\n".join(failures)
    assert dict(sim.stats()["rejections"]) == before


@pytest.mark.timeout(180)
@pytest.mark.parametrize("grouped", [False, True], ids=["pairs", "grouped"])
def test_a_split_parallel_turn_goes_upstream_whole(pair: Pair, sim: Sim, grouped: bool) -> None:
    """Case 3: each tool round calls three tools in one message; the client replays it as three assistant
    messages repeating the signed thinking. The recorded turn goes upstream as one message, its results gathered."""
    before = dict(sim.stats()["rejections"])
    case = "split_parallel_calls_grouped" if grouped else "split_parallel_calls"
    failures = play_many(pair, "anthropic", HISTORY_MANGLINGS[case], 8, "p", marker="[[sim:parallel=3]] ")
    assert not failures, "\n".join(failures)
    assert dict(sim.stats()["rejections"]) == before

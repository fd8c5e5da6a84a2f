"""Issue 20's concurrency acceptance: one tenant (one API key) runs many tool-loop conversations at once
through two gateway replicas on one redis-server, every conversation's requests alternating between the
replicas. The conversations are identical on purpose: the same scenario (``[[sim:tools=3]]``), the same
tool, the same prompt but for its ``[[sim:conv=NAME]]`` marker, so their visible texts and tool calls
match. The clients differ (``BEHAVIOURS``): faithful ones; ones that rewrite tool ids (with and without
thinking, numbered per conversation or per message); OpenAI-chat clients to OpenRouter-, DeepSeek-,
Gemini- and Anthropic-style upstreams; native Gemini clients (function calls carry no ids); clients that
drop a tool round or edit their first message (keeping the marker).

A recording proxy (``recording_proxy``) between the replicas and the simulator shows what the upstream
received for each conversation; it relays every answer as it arrives, cut into small pieces at seeded offsets
(inside events, JSON strings, multi-byte characters, CRLF line ends). Acceptance:

- the simulator's oracle counts no request carrying another conversation's content (``foreign``);
- no upstream 4xx (the simulator's rejections unchanged, every proxied exchange 200);
- every conversation completes; no two conversations ever share a conversation id (SCID);
- thinking is kept wherever the record is unambiguous (faithful clients, clients that keep tool ids):
  every replayed turn the upstream receives carries its thinking (Anthropic ``thinking`` blocks, Gemini
  thought parts with genuine ``thoughtSignature``, DeepSeek ``reasoning_content``, OpenRouter encrypted
  reasoning), and every Anthropic answer starts with thinking.

The default run plays ``WAVES`` waves of every behaviour, all conversations in flight at once (76 by
default, well under a minute on two cores); ``test_many_conversations_soak`` (marked ``slow``) plays
``TG_ISSUE20_WAVES`` waves (default 12). ``test_the_same_conversations_one_at_a_time`` is the control: each
behaviour once, one conversation after the other.
"""

from __future__ import annotations

import copy
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import httpx
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, next_round, send
from tests.support.e2e.rewrites import ANTHROPIC, EDIT, strings
from tests.support.e2e.traffic import thinking_lost
from tests.support.gemini.helpers import (
    CLAUDE,
    DEEPSEEK,
    GEMINI,
    OPENROUTER,
    Answer,
    ask,
    function_responses,
    gateway_env,
    native_round,
    run_loop,
)
from tests.support.manglings.gemini import MANGLINGS as NATIVE
from tests.support.manglings.openai import MANGLINGS as OPENAI
from tests.support.reliability.loops import access_lines
from tests.support.reliability.recording_proxy import Exchange, RecordingProxy

SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
ROUNDS = 3
MAX_REQUESTS = 8  # a client that drops a round needs ROUNDS + 2 answers
WAVES = 4
PROMPT = "[[sim:tools={rounds}]] [[sim:conv={name}]] What's the weather like? Check it for me."
GEMINI_CONFIG = {
    "tools": [{"functionDeclarations": [
        {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}

Surface = Literal["anthropic", "openai", "gemini"]


@dataclass(frozen=True)
class Behaviour:
    name: str
    surface: Surface
    model: str
    mangle: str           # a key of the surface's table (``ANTHROPIC``, ``OPENAI``, ``GEMINI_NATIVE``)
    header: bool = False  # sends the SCID it was given back in ``x-ag-conversation-id``
    stream: bool = False
    unambiguous: bool = False  # faithful or keeps tool ids: thinking must be kept


Contents = list[dict[str, Any]]


def drop_first_model_round(contents: Contents) -> Contents:
    """Once two function-call rounds were answered, the first model content with calls and the function
    responses after it are left out."""
    out = copy.deepcopy(contents)
    calls = [k for k, c in enumerate(out) if c["role"] == "model" and any("functionCall" in p for p in c["parts"])]
    if len(calls) < 2:
        return out
    k = calls[0]
    return out[:k] + out[k + 2:]


def edit_first_content(contents: Contents) -> Contents:
    out = copy.deepcopy(contents)
    if len(out) > 1:
        out[0]["parts"][0]["text"] += EDIT
    return out


GEMINI_NATIVE: dict[str, Callable[[Contents], Contents]] = {
    **NATIVE, "drop_first_tool_round": drop_first_model_round, "edit_first_message": edit_first_content}

BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour("anthropic-faithful-header", "anthropic", CLAUDE, "faithful", header=True, unambiguous=True),
    Behaviour("anthropic-faithful-stream", "anthropic", CLAUDE, "faithful", stream=True, unambiguous=True),
    Behaviour("anthropic-no-thinking", "anthropic", CLAUDE, "no_thinking", unambiguous=True),
    Behaviour("anthropic-ids-per-conversation", "anthropic", CLAUDE, "ids_per_conversation"),
    Behaviour("anthropic-no-thinking-ids-per-conversation", "anthropic", CLAUDE,
              "no_thinking_ids_per_conversation", stream=True),
    Behaviour("anthropic-no-thinking-ids-per-message", "anthropic", CLAUDE, "no_thinking_ids_per_message",
              header=True),
    Behaviour("anthropic-drop-tool-round", "anthropic", CLAUDE, "drop_first_tool_round"),
    Behaviour("anthropic-edit-first", "anthropic", CLAUDE, "edit_first_message"),
    Behaviour("openai-openrouter-faithful", "openai", OPENROUTER, "faithful", header=True, unambiguous=True),
    Behaviour("openai-openrouter-ids", "openai", OPENROUTER, "tool_ids_rewritten"),
    Behaviour("openai-deepseek-faithful", "openai", DEEPSEEK, "faithful", stream=True, unambiguous=True),
    Behaviour("openai-deepseek-ids-no-reasoning", "openai", DEEPSEEK, "tool_ids_rewritten_no_reasoning"),
    Behaviour("openai-gemini-ids", "openai", GEMINI, "tool_ids_rewritten"),
    Behaviour("openai-gemini-ids-no-reasoning", "openai", GEMINI, "tool_ids_rewritten_no_reasoning", stream=True),
    Behaviour("openai-claude-ids", "openai", CLAUDE, "tool_ids_rewritten"),
    Behaviour("gemini-faithful-header", "gemini", GEMINI, "faithful", header=True, unambiguous=True),
    Behaviour("gemini-drop-tool-round", "gemini", GEMINI, "drop_first_tool_round"),
    Behaviour("gemini-edit-first", "gemini", GEMINI, "edit_first_message", stream=True),
    Behaviour("gemini-no-thoughts", "gemini", GEMINI, "drop_thoughts_and_signatures"),
)


@dataclass
class Conv:
    index: int
    name: str               # the ``[[sim:conv=NAME]]`` marker
    behaviour: Behaviour
    scids: list[str] = field(default_factory=list)
    requests: int = 0
    thinking_answers: int = 0  # answers (Anthropic surface) that start with thinking
    completed: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def prompt(self) -> str:
        return PROMPT.format(rounds=ROUNDS, name=self.name)


@dataclass
class Team:
    proxy: RecordingProxy
    replicas: tuple[ServerProcess, ServerProcess]


@pytest.fixture(scope="module")
def team(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[Team]:
    """Two replicas on one redis-server, every upstream kind reached through the recording proxy."""
    proxy = RecordingProxy(sim.url, split_seed=20).start()  # every answer relayed in small pieces
    env = {k: v.replace(sim.url, proxy.url) for k, v in gateway_env(sim).items()}
    env |= {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": "issue-20-team-0123456789abcdef01",
            "GATEWAY_STORE_TIMEOUT_MS": "1000", "GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_LOG_FORMAT": "json"}
    replicas = (gateways.start(proxy.url, env), gateways.start(proxy.url, env))
    try:
        yield Team(proxy, replicas)
    finally:
        for sp in replicas:
            sp.stop()
        proxy.close()


# ------------------------------------------------------------------ the three client surfaces


def play_anthropic(conv: Conv, urls: list[str], key: str) -> None:
    b = conv.behaviour
    clients = [anthropic.Anthropic(base_url=u, api_key=key, max_retries=0, timeout=30, default_headers=BETA)
               for u in urls]
    history: list[dict[str, Any]] = [{"role": "user", "content": conv.prompt}]
    try:
        for _ in range(MAX_REQUESTS):
            client = clients[(conv.index + conv.requests) % 2]
            params: dict[str, Any] = {
                "model": b.model, "max_tokens": 4096, "tools": [WEATHER_TOOL], "thinking": THINKING,
                "messages": ANTHROPIC[b.mangle](history),
                "extra_headers": {SCID: conv.scids[-1]} if b.header and conv.scids else {}}
            conv.requests += 1
            answer, headers = send(client, params, stream=b.stream)
            conv.scids.append(headers[SCID])
            if answer.content and answer.content[0].type == "thinking":
                conv.thinking_answers += 1
            if answer.stop_reason != "tool_use":
                conv.completed = True
                return
            history += next_round(answer)
    finally:
        for c in clients:
            c.close()


def play_openai(conv: Conv, urls: list[str], key: str) -> None:
    b = conv.behaviour
    clients = [openai.OpenAI(base_url=u + "/v1", api_key=key, max_retries=0, timeout=30, default_headers=BETA)
               for u in urls]
    params: dict[str, Any] = {"extra_body": {"thinking": THINKING}} if b.model == CLAUDE \
        else {"reasoning_effort": "low"}

    def send(history: list[dict[str, Any]]) -> Answer:
        client = clients[(conv.index + conv.requests) % 2]
        headers = {SCID: conv.scids[-1]} if b.header and conv.scids else {}
        conv.requests += 1
        answer = ask(client, b.model, history, stream=b.stream, headers=headers, **params)
        assert answer.scid, "every response carries the conversation id"
        conv.scids.append(answer.scid)
        return answer

    try:
        run_loop(send, conv.prompt, mangle=OPENAI[b.mangle], max_rounds=MAX_REQUESTS)
        conv.completed = True
    finally:
        for c in clients:
            c.close()


def play_gemini(conv: Conv, urls: list[str], key: str) -> None:
    b = conv.behaviour
    contents: Contents = [{"role": "user", "parts": [{"text": conv.prompt}]}]
    with httpx.Client(timeout=30) as http:
        for _ in range(MAX_REQUESTS):
            url = urls[(conv.index + conv.requests) % 2]
            headers = {"x-goog-api-key": key, **({SCID: conv.scids[-1]} if b.header and conv.scids else {})}
            conv.requests += 1
            content, scid = native_round(http, url, b.model, stream=b.stream, config=GEMINI_CONFIG,
                                         contents=GEMINI_NATIVE[b.mangle](contents), headers=headers)
            assert scid, "every response carries the conversation id"
            conv.scids.append(scid)
            if not (responses := function_responses(content)):
                conv.completed = True
                return
            contents += [content, responses]


PLAY: dict[Surface, Callable[[Conv, list[str], str], None]] = {
    "anthropic": play_anthropic, "openai": play_openai, "gemini": play_gemini}


# ------------------------------------------------------------------ what the upstream received


_NAMED = re.compile(r"(?m)^conversation ([A-Za-z0-9_-]{1,64})\r?$")


def named_others(exchange: Exchange) -> set[str]:
    """The other conversations whose thinking (the simulator's ``conversation NAME`` line) an upstream request
    carries: the oracle's thinking check, attributed per conversation (the simulator keeps few details)."""
    return {name for text in strings(exchange.body) if "conversation " in text
            for name in _NAMED.findall(text) if name != exchange.conversation}


def run_team(team: Team, sim: Sim, waves: int, *, concurrent: bool = True) -> None:
    uid = uuid.uuid4().hex[:8]
    key = f"sk-issue20-team-{uid}"
    urls = [sp.url for sp in team.replicas]
    convs = [Conv(k, f"c{k}-{uid}", b) for k, b in enumerate(b for _ in range(waves) for b in BEHAVIOURS)]
    stats = sim.stats()
    assert "foreign" in stats, "the simulator has no cross-conversation oracle (stats()['foreign'])"
    foreign0, details0, rejections0 = stats["foreign"], len(stats["foreign_details"]), dict(stats["rejections"])
    seen = [len(access_lines(sp.log_lines())) for sp in team.replicas]
    start = threading.Barrier(len(convs) if concurrent else 1)

    def play(conv: Conv) -> None:
        start.wait()
        try:
            PLAY[conv.behaviour.surface](conv, urls, key)
        except Exception as e:  # every failure is a finding: keep it, the other conversations go on
            conv.errors.append(f"request {conv.requests}: {type(e).__name__}: {str(e)[:300]}")

    began = time.monotonic()
    threads = [threading.Thread(target=play, args=(c,), daemon=True) for c in convs]
    for t in threads:
        t.start()
        if not concurrent:
            t.join(120)
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - began

    stats = sim.stats()
    problems: list[str] = []
    foreign = stats["foreign"] - foreign0
    if foreign:
        problems.append(f"{foreign} upstream request(s) carried another conversation's content: "
                        f"{stats['foreign_details'][details0:details0 + 12]}")
    if stats["rejections"] != rejections0:
        problems.append(f"the simulator rejected requests: {stats['rejections']} (before {rejections0})")
    owner: dict[str, str] = {}
    lost: Counter[str] = Counter()
    swapped: Counter[str] = Counter()
    for conv in convs:
        b = conv.behaviour
        exchanges = team.proxy.of(conv.name)
        bad = Counter(e.status for e in exchanges if e.status != 200)
        if conv.errors or not conv.completed:
            problems.append(f"{conv.name} ({b.name}) did not complete: {conv.errors}")
        if bad:
            problems.append(f"{conv.name} ({b.name}): upstream answered {dict(bad)}")
        for scid in set(conv.scids):
            if owner.setdefault(scid, conv.name) != conv.name:
                problems.append(f"{conv.name} ({b.name}) was given {owner[scid]}'s conversation id {scid}")
        for n, e in enumerate(exchanges):
            if others := named_others(e):
                swapped[b.name] += 1
                problems.append(f"{conv.name} ({b.name}): upstream request {n} carried the thinking of "
                                f"{sorted(others)}")
            if e.status == 200 and (turns := thinking_lost(e)):
                lost[b.name] += 1
                if b.unambiguous:
                    problems.append(f"{conv.name} ({b.name}): upstream request {n} without the thinking of "
                                    f"replayed turn(s) {turns}")
        if b.surface == "anthropic" and b.unambiguous and conv.thinking_answers != len(conv.scids):
            problems.append(f"{conv.name} ({b.name}): {conv.thinking_answers} of {len(conv.scids)} answers "
                            f"start with thinking")
    all_exchanges = [e for conv in convs for e in team.proxy.of(conv.name)]
    vias = Counter(line.get("via") for sp, n in zip(team.replicas, seen, strict=True)
                   for line in access_lines(sp.log_lines())[n:])
    figures = (f"{len(convs)} conversations ({waves} waves of {len(BEHAVIOURS)} behaviours) in {elapsed:.1f}s: "
               f"{sum(c.requests for c in convs)} requests, {sum(len(team.proxy.of(c.name)) for c in convs)} upstream "
               f"exchanges ({team.proxy.figures(all_exchanges)}), "
               f"foreign {foreign}, upstream requests with another conversation's thinking {dict(swapped)}, "
               f"identified via {dict(vias)}, upstream requests without some thinking "
               f"(all behaviours) {dict(lost)}")
    print(figures)
    assert not problems, figures + "\n" + "\n".join(problems)


@pytest.mark.timeout(150)
def test_one_tenant_many_conversations_two_replicas(team: Team, sim: Sim) -> None:
    run_team(team, sim, WAVES)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_many_conversations_soak(team: Team, sim: Sim) -> None:
    run_team(team, sim, int(os.environ.get("TG_ISSUE20_WAVES", "12")))


def test_the_same_conversations_one_at_a_time(team: Team, sim: Sim) -> None:
    """The control: every behaviour once, one conversation after the other (same tenant, same replicas). What
    fails here fails without concurrency."""
    run_team(team, sim, 1, concurrent=False)

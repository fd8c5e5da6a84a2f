"""The acceptance matrix: (client surface, upstream, mangling), with the official SDKs.

Every route (a client surface in front of an upstream dialect, ``ROUTES``) plays tool loops whose replayed
history a client mangles in one way (``tests/support/manglings/``: one module per wire shape) on every request, stream
and non-stream, with and without the SCID header. Every request of a conversation alternates between two real
gateway processes that share one real redis-server, in front of the strict simulator. In every cell the
simulator rejects nothing and every response carries the conversation id; then each route checks what its
wire shape makes checkable:

- ``anthropic-to-anthropic`` (the Anthropic SDK): thinking stays on for every turn (the interleaved beta makes
  every simulator answer start with thinking whenever thinking was enabled for that request), and every
  upstream body is inspected: a tool result is synthesised ("no result was returned") only where the client
  really lost one, and real results are never turned into text, so a repair that restores recorded tool ids
  without mapping the client's results back cannot hide behind the tool-chain rules. ``drop_redacted``
  conversations carry redacted_thinking, and ``drop_empty_signed_thinking`` runs with adaptive thinking at
  ``display: omitted`` (empty signed thinking). Beside the manglings it plays flows that are not a per-turn
  mangling (thinking toggled mid-loop, retries, a rewind, an edited first message).
- ``openai-to-anthropic`` (the openai SDK): reasoning comes back signed on every answer, the loop is one
  conversation, and every request the simulator received replays exactly this conversation's own thinking on
  every turn (restored from the records, never another conversation's).
- ``responses-to-responses`` (the openai SDK's ``client.responses.create`` to an OpenAI Responses upstream, the same
  replay styles): request n carries the n reasoning items the upstream minted, each exactly as minted and just
  before the calls it preceded (the upstream's own call ids), whatever the client kept of them.
- ``openai-to-{openrouter,openrouter-claude,copilot,deepseek,generic}`` (OpenAI-compatible upstreams;
  ``openrouter-claude`` is a Claude model behind OpenRouter, ``generic`` is Gemini's OpenAI-compatibility layer):
  one conversation, and every request carries each earlier answer's provider fields exactly as they were relayed,
  the upstream's own tool-call ids, and tool-only assistant messages as ``content: null``.
- ``openai-to-responses`` (an OpenAI Responses upstream): one conversation, and every request carries each earlier
  answer's reasoning item exactly as the upstream minted it, followed by the call it preceded (its item id on that
  call only) and the upstream's own call ids; the chat client never sees ``encrypted_content``.
- ``responses-to-{anthropic,gemini}`` (the openai SDK's ``client.responses.create``): the client replays the
  output items as received, without reasoning items, without ``encrypted_content``, as bare item references
  (``store: false``) or by ``previous_response_id`` alone; every Claude answer thinks and every request replays
  exactly this conversation's thinking, and every Gemini request carries each turn's thought and genuine
  signature.
- ``openai-to-gemini`` and ``gemini-to-gemini`` (the native surface, raw JSON so a mangling can touch every
  field): one conversation, and every request carries each earlier answer's thought part and its genuine
  signature on its first call (restored from the records, never the bypass value), function responses in call
  order.

With the records gone the Anthropic surface's manglings and the OpenAI surface's to the OpenAI-compatible upstreams
are played again, the store flushed before every request (``test_matrix_with_records_expired``) and with Redis
stopped (``test_matrix_with_redis_stopped``): still zero rejections (the stateless path per flavor,
``gateway/dialects/openai_compat.py``). Checks that belong to one route only have their own tests at the end.

By default every (route, case) row is played twice, pairwise over stream and header (``tests/pairwise.py``:
both stream modes and both header modes per row); the records-gone matrices play the two combinations the
with-records matrix leaves out, so between them every (case, stream, header) of the Anthropic surface is
played. The rest of each product is marked ``slow``. Every cell has its own prompt, so text-hash matching can
never land on another cell's conversation.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.dialects.openai_compat import unsealed
from gateway.dialects.toolchain import NO_RESULT
from tests.pairwise import run_label, stream_header_params
from tests.process_fixtures import GatewayFactory, Sim, free_port
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import WEATHER_TOOL, block_dicts, send, tool_results
from tests.support.gemini import helpers as gemini_helpers
from tests.support.gemini.helpers import (
    COPILOT,
    DEEPSEEK,
    GEMINI,
    GEMINI_COMPAT,
    OPENROUTER,
    OPENROUTER_CLAUDE,
    RESPONSES,
    Rejections,
    gateway_env,
    tool_messages,
)
from tests.support.gemini.matrix import NativeLoop, OpenAILoop, Pair
from tests.support.manglings import gemini as gemini_manglings
from tests.support.manglings import openai as openai_manglings
from tests.support.manglings.anthropic import (
    CASE_THINKING,
    FLOWS,
    HISTORY_MANGLINGS,
    MESSAGE_MANGLINGS,
    NO_KEEP_CHECK,
    REDACTED,
    as_sent,
)
from tests.support.openai import helpers as openai_helpers
from tests.support.responses import helpers as responses_helpers

CLAUDE = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}


@dataclass
class Cell:
    """One cell of the matrix: where it is played and how."""

    pair: Pair
    sim: Sim
    case: str
    stream: bool
    header: bool
    flush: Callable[[], None] | None = None  # called before every request: the records are gone
    label: str = ""                          # what else makes this cell's prompt its own


@dataclass
class Played:
    """What a cell's conversation left: the answers as its client saw them (the route's own type), the
    bodies the simulator received (one per request), the conversation ids, the last faithful history."""

    answers: list[Any]
    bodies: list[dict[str, Any]]
    scids: list[str | None]
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Route:
    surface: str  # the client's wire shape
    upstream: str  # the upstream dialect (flavor) the model routes to
    cases: tuple[str, ...]
    play: Callable[[Cell], Played]
    check: Callable[[str, Played], None]  # with the records present
    one_conversation: bool = True  # the whole loop keeps one conversation id
    records_gone: bool = False  # played with the records expired and with Redis stopped too

    @property
    def id(self) -> str:
        return f"{self.surface}-to-{self.upstream}"


# ------------------------------------------------------------------ anthropic surface -> anthropic upstream

THINKING = {"type": "enabled", "budget_tokens": 2048}
ANTHROPIC_CASES = (*sorted(MESSAGE_MANGLINGS), *sorted(HISTORY_MANGLINGS), *FLOWS)
# The only cases whose upstream bodies may hold a synthesised result or a result turned into text.
SYNTHESIZED_OK = {"tool_result_missing"}
TEXTUALIZED_OK = {"orphan_tool_result_at_start"}
TEXTUALIZED = "[tool result for "  # toolchain.result_as_text


class AnthropicLoop:
    """A Messages conversation whose consecutive requests alternate between two gateways."""

    def __init__(self, cell: Cell) -> None:
        self.clients = [anthropic.Anthropic(base_url=g.url, api_key="sk-matrix", max_retries=0,
                                            default_headers=BETA) for g in (cell.pair.a, cell.pair.b)]
        self.cell = cell
        self.scids: list[str | None] = []
        self.answers: list[anthropic.types.Message] = []
        self.upstream: list[dict[str, Any]] = []  # the body the simulator received, per request

    def send(self, messages: list[dict[str, Any]], thinking: dict[str, Any] | None = THINKING
             ) -> anthropic.types.Message:
        client = self.clients[len(self.scids) % 2]
        if self.cell.flush is not None:
            self.cell.flush()
        last = self.scids[-1] if self.scids else None
        extra = {SCID: last} if (self.cell.header and last) else {}
        params: dict[str, Any] = {"model": CLAUDE, "max_tokens": 4096, "tools": [WEATHER_TOOL],
                                  "messages": copy.deepcopy(messages), "extra_headers": extra}
        if thinking is not None:
            params["thinking"] = thinking
        answer, headers = send(client, params, stream=self.cell.stream)
        assert headers.get(SCID), "every response carries the conversation id"
        self.scids.append(headers[SCID])
        self.answers.append(answer)
        self.upstream.append(self.cell.sim.last()["body"])
        return answer

    def close(self) -> None:
        for c in self.clients:
            c.close()


def play_anthropic(cell: Cell, rounds: int = 3) -> Played:
    case = cell.case
    loop = AnthropicLoop(cell)
    label = f"{'stream' if cell.stream else 'create'}/{'scid' if cell.header else 'no-scid'}{cell.label}"
    redacted = " [[sim:redacted]]" if case in REDACTED else ""
    history: list[dict[str, Any]] = [{"role": "user", "content": f"[[sim:tools={rounds}]]{redacted} weather? "
                                                                 f"case {case} ({label})"}]
    base = CASE_THINKING.get(case, THINKING)

    try:
        step = 0
        while True:
            thinking: dict[str, Any] | None = base
            if case == "thinking_off_mid_loop" and step >= 1:
                thinking = None
            if case == "thinking_on_mid_loop":
                thinking = None if step == 0 else base
            answer = loop.send(as_sent(case, history), thinking)
            if case == "retry_twice":
                answer = loop.send(as_sent(case, history), thinking)
            if case == "rewind" and step == 2:
                history = history[:-2]  # drop the last assistant turn and its results, ask again
                answer = loop.send(as_sent(case, history), thinking)
            step += 1
            if answer.stop_reason != "tool_use":
                break
            assert step < 10, "tool loop did not finish"
            history.append({"role": "assistant", "content": block_dicts(answer)})
            history.append({"role": "user", "content": tool_results(answer)})
    finally:
        loop.close()
    if case in REDACTED:
        assert "redacted_thinking" in [b.type for b in loop.answers[0].content], "no redacted_thinking to mangle"
    if case in CASE_THINKING:
        assert loop.answers[0].content[0].type == "thinking" and loop.answers[0].content[0].thinking == ""
    played = Played(loop.answers, loop.upstream, loop.scids, history)
    check_upstream_tool_results(case, played)
    return played


def check_upstream_tool_results(case: str, played: Played) -> None:
    """No tool result synthesised or turned into text except where the case calls for it."""
    for n, body in enumerate(played.bodies):
        blocks = [b for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                  for b in m["content"]]
        if case not in SYNTHESIZED_OK:
            assert not [b for b in blocks if b.get("type") == "tool_result" and b.get("content") == NO_RESULT], \
                f"request {n}: a tool result was synthesised (the real one was lost)"
        if case not in TEXTUALIZED_OK:
            assert not [b for b in blocks if b.get("type") == "text" and b["text"].startswith(TEXTUALIZED)], \
                f"request {n}: a real tool result was turned into text"


def check_anthropic(case: str, played: Played) -> None:
    if case not in NO_KEEP_CHECK:
        starts = [a.content[0].type if a.content else None for a in played.answers]
        assert all(s == "thinking" for s in starts), f"thinking lost: {starts}"


# ------------------------------------------------------------------ openai surface -> anthropic upstream

def play_openai_to_anthropic(cell: Cell) -> Played:
    clients = [openai.OpenAI(base_url=g.url + "/v1", api_key="sk-openai-matrix", max_retries=0,
                             default_headers=BETA) for g in (cell.pair.a, cell.pair.b)]
    scids: list[str | None] = []
    bodies: list[dict[str, Any]] = []

    def send(history: openai_helpers.History) -> openai_helpers.Answer:
        last = scids[-1] if scids else None
        headers = {SCID: last} if cell.header and last else {}
        answer = openai_helpers.ask(clients[len(scids) % 2], history, stream=cell.stream, headers=headers,
                                    extra_body=openai_helpers.THINKING)
        assert answer.scid, "every response carries the conversation id"
        scids.append(answer.scid)
        bodies.append(cell.sim.last()["body"])  # the tests run one request at a time: the last one is ours
        return answer

    try:
        answers = openai_helpers.run_loop(send, f"[[sim:tools=3]] [[sim:parallel=2]] weather? openai case "
                                                f"{cell.case} {run_label(cell.stream, cell.header)}",
                                          mangle=openai_manglings.MANGLINGS[cell.case])
    finally:
        for c in clients:
            c.close()
    return Played(answers, bodies, scids)


def check_openai_to_anthropic(case: str, played: Played) -> None:
    answers: list[openai_helpers.Answer] = played.answers
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 3 + ["stop"]
    assert all(a.signed() and a.reasoning_content for a in answers), \
        f"reasoning lost: {[a.signed() for a in answers]}"
    own = [a.reasoning_content for a in answers]
    for n, body in enumerate(played.bodies):
        replayed = [b.get("thinking") for m in body["messages"] if m["role"] == "assistant"
                    for b in m["content"] if isinstance(b, dict) and b.get("type") == "thinking"]
        assert replayed == own[:n], f"request {n} did not replay this conversation's thinking"


# ------------------------------------------------------------------ openai surface -> gemini / openai-compatible

def play_openai_to_provider(model: str) -> Callable[[Cell], Played]:
    def play(cell: Cell) -> Played:
        loop = OpenAILoop(cell.pair, model, cell.stream, cell.header, cell.sim, {"reasoning_effort": "low"})
        # the prompt names the model as the Gemini and the OpenAI-compatible matrices did ("gemini", the model)
        name = "gemini" if model == GEMINI else model
        try:
            answers, history = gemini_helpers.run_loop(
                loop.send, f"[[sim:tools=2]] [[sim:parallel=2]] {name} case {cell.case} "
                           f"{run_label(cell.stream, cell.header)}",
                mangle=openai_manglings.MANGLINGS[cell.case])
        finally:
            loop.close()
        return Played(answers, loop.bodies, loop.scids, history)
    return play


def tool_runs(messages: list[dict[str, Any]]) -> list[tuple[list[str], list[str]]]:
    """Per assistant message: its tool-call ids and the ``tool_call_id``s of the tool messages after it."""
    runs = []
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            answered = []
            for t in messages[k + 1:]:
                if t["role"] != "tool":
                    break
                answered.append(t["tool_call_id"])
            runs.append(([c["id"] for c in m.get("tool_calls") or ()], answered))
    return runs


# The provider fields each OpenAI-compatible upstream's answers carry, replayed exactly as relayed.
PROVIDER_FIELDS = {OPENROUTER: ("reasoning_details",), OPENROUTER_CLAUDE: ("reasoning_details",),
                   COPILOT: ("reasoning_opaque", "reasoning_text"), DEEPSEEK: ("reasoning_content",), GEMINI_COMPAT: ()}


def check_openai_compatible(model: str) -> Callable[[str, Played], None]:
    def check(case: str, played: Played) -> None:
        answers: list[gemini_helpers.Answer] = played.answers
        assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
        for n, body in enumerate(played.bodies):
            sent = [m for m in body["messages"] if m["role"] == "assistant"]
            assert len(sent) == n
            for (ids, answered), a in zip(tool_runs(body["messages"]), answers, strict=False):
                relayed = [c["id"] for c in a.tool_calls]
                assert ids == relayed, \
                    f"request {n}: the upstream's own tool-call ids go back, whatever the client sent"
                assert sorted(answered) == sorted(relayed), f"request {n}: tool results reference the upstream's ids"
            for m, a in zip(sent, answers, strict=False):
                for key in PROVIDER_FIELDS[model]:
                    assert m.get(key) == unsealed(a.message).get(key), f"request {n}: {key} not replayed as relayed"
                if not a.message.get("content"):
                    assert m["content"] is None, "tool-only message sent with content null"
                if model == GEMINI_COMPAT:
                    assert m["tool_calls"][0]["extra_content"] == a.tool_calls[0]["extra_content"]
                    assert "extra_content" not in m["tool_calls"][1]
    return check


def check_openai_to_responses(case: str, played: Played) -> None:
    """Request n carries the n reasoning items the upstream minted before it, each exactly as minted (the same
    item in every later request), each followed by the call it preceded with its item id; the upstream's own
    call ids; the client never sees encrypted content."""
    answers: list[gemini_helpers.Answer] = played.answers
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    assert "encrypted_content" not in orjson.dumps([a.message for a in answers]).decode()
    kept: list[dict[str, Any]] = []
    for n, body in enumerate(played.bodies):
        items = body["input"]
        reasoning = [k for k, i in enumerate(items) if i.get("type") == "reasoning"]
        assert len(reasoning) == n, f"request {n}: every earlier turn's reasoning item goes back"
        assert [items[k] for k in reasoning[:len(kept)]] == kept, f"request {n}: reasoning items changed"
        kept = [items[k] for k in reasoning]
        for k, a in zip(reasoning, answers, strict=False):
            relayed = [c["id"] for c in a.tool_calls]
            calls = [i for i in items[k + 1:k + 1 + len(relayed)] if i.get("type") == "function_call"]
            assert [c["call_id"] for c in calls] == relayed, f"request {n}: the upstream's own call ids go back"
            assert calls[0]["id"].startswith("fc_") and all("id" not in c for c in calls[1:])


BYPASS = "skip_thought_signature_validator"


def assert_gemini_signatures_restored(bodies: list[dict[str, Any]]) -> None:
    """Request n replays n model turns, each with its thought and its own minted signature."""
    for n, body in enumerate(bodies):
        models = [c for c in body["contents"] if c["role"] == "model"]
        assert len(models) == n
        for content in models:
            parts = content["parts"]
            calls = [p for p in parts if "functionCall" in p]
            assert parts[0].get("thought") is True, "thought part restored"
            assert calls[0].get("thoughtSignature") not in (None, BYPASS), "genuine signature restored"
            assert all("thoughtSignature" not in p for p in calls[1:]), "parallel calls unsigned, as minted"


def assert_responses_in_call_order(body: dict[str, Any]) -> None:
    """Every model turn's function responses follow in the order of its calls (the tool messages say
    ``sunny in <arguments>``), however the client ordered its tool messages."""
    contents = body["contents"]
    for k, c in enumerate(contents):
        calls = [p["functionCall"]["args"] for p in c["parts"] if "functionCall" in p]
        if c["role"] == "model" and calls:
            assert len({orjson.dumps(a, option=orjson.OPT_SORT_KEYS) for a in calls}) == len(calls), "order shows"
            got = [orjson.loads(p["functionResponse"]["response"]["result"].removeprefix("sunny in "))
                   for p in contents[k + 1]["parts"]]
            assert got == calls, "function responses go upstream in call order"


def check_openai_to_gemini(case: str, played: Played) -> None:
    assert [a.finish_reason for a in played.answers] == ["tool_calls"] * 2 + ["stop"]
    assert_gemini_signatures_restored(played.bodies)
    assert_responses_in_call_order(played.bodies[-1])
    if case == "tool_results_reordered":  # the client really sent them out of call order
        sent = openai_manglings.MANGLINGS[case](played.history)
        k = next(k for k, m in enumerate(sent) if m.get("tool_calls"))
        assert [m["tool_call_id"] for m in sent[k + 1:k + 3]] == [c["id"] for c in sent[k]["tool_calls"][::-1]]


# ------------------------------------------------------------------ gemini surface -> gemini upstream

GEMINI_CONFIG = {"tools": [{"functionDeclarations": [  # two functions: parallel calls alternate between them
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}


def play_gemini(cell: Cell) -> Played:
    loop = NativeLoop(cell.pair, GEMINI, cell.stream, cell.header, cell.sim)
    mangle = gemini_manglings.MANGLINGS[cell.case]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [
        {"text": f"[[sim:tools=2]] [[sim:parallel=2]] native case {cell.case} {run_label(cell.stream, cell.header)}"}]}]
    answers = []
    for _ in range(6):
        content = loop.send(mangle(contents), GEMINI_CONFIG)
        answers.append(content)
        calls = [p["functionCall"] for p in content["parts"] if "functionCall" in p]
        if not calls:
            break
        contents.append(content)
        contents.append({"role": "user", "parts": [
            {"functionResponse": {"name": c["name"], "response": {"weather": "sunny", "args": c["args"]}}}
            for c in calls]})
    return Played(answers, loop.bodies, loop.scids, contents)


def check_gemini(case: str, played: Played) -> None:
    assert len(played.bodies) == 3
    assert_gemini_signatures_restored(played.bodies)
    if case == "responses_reordered":  # function responses go upstream in call order
        last = played.bodies[-1]["contents"]
        for k, c in enumerate(last):
            if c["role"] == "model":
                names = [p["functionCall"]["args"] for p in c["parts"] if "functionCall" in p]
                got = [p["functionResponse"]["response"]["args"] for p in last[k + 1]["parts"]]
                assert got == names


# ------------------------------------------------------------------ responses surface -> anthropic / gemini

def play_responses(model: str) -> Callable[[Cell], Played]:
    """``client.responses.create`` loops (``tests/support/responses/helpers.py``): each case is how the client replays
    (the output items as received, without reasoning items, without ``encrypted_content``, as bare item
    references, or by ``previous_response_id`` alone), ``store: false`` but for the last."""
    def play(cell: Cell) -> Played:
        clients = [openai.OpenAI(base_url=g.url + "/v1", api_key="sk-responses-matrix", max_retries=0,
                                 default_headers=BETA) for g in (cell.pair.a, cell.pair.b)]
        try:
            turns = responses_helpers.run_loop(
                clients, model, f"[[sim:tools=2]] [[sim:parallel=2]] weather? responses case {cell.case} "
                                f"{run_label(cell.stream, cell.header)}", stream=cell.stream, mangle=cell.case,
                header=cell.header, sim=cell.sim, before=cell.flush)
        finally:
            for c in clients:
                c.close()
        return Played(turns, [t.upstream or {} for t in turns], [t.scid for t in turns])
    return play


def check_responses_to_anthropic(case: str, played: Played) -> None:
    """Every answer thinks (the interleaved beta) and request n replays exactly this conversation's n thoughts."""
    turns: list[responses_helpers.Turn] = played.answers
    assert [len(t.calls) for t in turns] == [2, 2, 0]
    assert all(t.output[0]["type"] == "reasoning" and t.output[0]["summary"] for t in turns)
    own = [t.output[0]["summary"][0]["text"] for t in turns]
    for n, body in enumerate(played.bodies):
        replayed = [b.get("thinking") for m in body["messages"] if m["role"] == "assistant"
                    for b in m["content"] if isinstance(b, dict) and b.get("type") == "thinking"]
        assert replayed == own[:n], f"request {n} did not replay this conversation's thinking"


def check_responses_to_gemini(case: str, played: Played) -> None:
    turns: list[responses_helpers.Turn] = played.answers
    assert [len(t.calls) for t in turns] == [2, 2, 0]
    assert_gemini_signatures_restored(played.bodies)


def check_responses_to_responses(case: str, played: Played) -> None:
    """Request n carries the n reasoning items the upstream minted before it, each exactly as minted (the same item
    in every later request), each just before the calls it preceded, with the upstream's own call ids; whatever the
    client kept of them."""
    turns: list[responses_helpers.Turn] = played.answers
    assert [len(t.calls) for t in turns] == [2, 2, 0]
    assert all(t.output[0]["type"] == "reasoning" and t.output[0]["summary"] for t in turns)
    kept: list[dict[str, Any]] = []
    for n, body in enumerate(played.bodies):
        items = body["input"]
        reasoning = [k for k, i in enumerate(items) if i.get("type") == "reasoning"]
        assert len(reasoning) == n, f"request {n}: every earlier turn's reasoning item goes back"
        assert all(items[k]["id"].startswith("rs_") and items[k]["encrypted_content"] for k in reasoning)
        assert [items[k] for k in reasoning[:len(kept)]] == kept, f"request {n}: reasoning items changed"
        kept = [items[k] for k in reasoning]
        for k, t in zip(reasoning, turns, strict=False):
            calls = items[k + 1:k + 3]
            assert [c.get("call_id") for c in calls] == [c["call_id"] for c in t.calls], f"request {n}"
            assert calls[0]["id"].startswith("fc_") and "id" not in calls[1]


RESPONSES_CASES = responses_helpers.CASES


# ------------------------------------------------------------------ the routes

_BY_UPSTREAM = openai_manglings.BY_UPSTREAM
# In this order the default (pairwise) sample of every route is the one its own matrix played before the merge:
# the sample alternates down the rows, and every route before the OpenAI-compatible ones has an even number.
ROUTES = {r.id: r for r in (
    Route("anthropic", "anthropic", ANTHROPIC_CASES, play_anthropic, check_anthropic,
          one_conversation=False, records_gone=True),
    Route("openai", "anthropic", _BY_UPSTREAM["anthropic"], play_openai_to_anthropic, check_openai_to_anthropic),
    Route("openai", "gemini", _BY_UPSTREAM["gemini"], play_openai_to_provider(GEMINI), check_openai_to_gemini),
    Route("gemini", "gemini", tuple(sorted(gemini_manglings.MANGLINGS)), play_gemini, check_gemini),
    *(Route("openai", upstream, _BY_UPSTREAM[upstream], play_openai_to_provider(model),
            check_openai_compatible(model), records_gone=True)
      for upstream, model in (("openrouter", OPENROUTER), ("copilot", COPILOT), ("deepseek", DEEPSEEK),
                              ("generic", GEMINI_COMPAT))),
    Route("openai", "responses", _BY_UPSTREAM["responses"], play_openai_to_provider(RESPONSES),
          check_openai_to_responses),
    Route("responses", "anthropic", RESPONSES_CASES, play_responses(CLAUDE), check_responses_to_anthropic),
    Route("responses", "gemini", RESPONSES_CASES, play_responses(GEMINI), check_responses_to_gemini),
    # a Claude model behind OpenRouter (Anthropic's rules behind OpenRouter's translation): the OpenRouter habits
    Route("openai", "openrouter-claude", _BY_UPSTREAM["openrouter"], play_openai_to_provider(OPENROUTER_CLAUDE),
          check_openai_compatible(OPENROUTER_CLAUDE), records_gone=True),
    # (after the others: the pairwise sample of the routes above stays as it was)
    Route("responses", "responses", RESPONSES_CASES, play_responses(RESPONSES), check_responses_to_responses),
)}


# cases only a record can make whole: without one, a dropped turn's kept results go as text and the loop, whose
# upstream never sees them answered, goes on calling tools (tests/process/e2e/test_stateless_flavors.py: never a 400)
NEEDS_RECORDS = frozenset({"drop_latest_assistant"})


def _rows(routes: list[Route], leave_out: frozenset[str] = frozenset()) -> tuple[list[tuple[str, str]], list[str]]:
    rows = [(r.id, case) for r in routes for case in r.cases if case not in leave_out]
    return rows, [f"{route}-{case}" for route, case in rows]


WITH_RECORDS = stream_header_params(*_rows(list(ROUTES.values())))
# The records-gone matrices sample the two (stream, header) combinations the with-records matrix leaves out.
RECORDS_GONE = stream_header_params(*_rows([r for r in ROUTES.values() if r.records_gone], NEEDS_RECORDS), offset=1)


def play_cell(route: Route, cell: Cell, records: bool = True) -> Played:
    """``records``: the store holds the conversation's records (without them a client that sends no SCID header
    gets a new conversation id per request)."""
    with Rejections(cell.sim):
        played = route.play(cell)
    if route.one_conversation and records:
        assert len(set(played.scids)) == 1, "the whole loop is one conversation"
    return played


@pytest.fixture(scope="module")
def pair_without_redis(sim: Sim, gateways: GatewayFactory) -> Pair:
    env = gateway_env(sim, GATEWAY_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
                      GATEWAY_SECRET="provider-matrix-secret-012345678")
    return Pair(gateways.start(sim.url, env), gateways.start(sim.url, env))


@pytest.mark.parametrize(("route", "case", "stream", "header"), WITH_RECORDS)
def test_matrix_with_records(provider_pair: Pair, sim: Sim, route: str, case: str, stream: bool,
                             header: bool) -> None:
    r = ROUTES[route]
    r.check(case, play_cell(r, Cell(provider_pair, sim, case, stream, header)))


@pytest.mark.parametrize(("route", "case", "stream", "header"), RECORDS_GONE)
def test_matrix_with_records_expired(provider_pair: Pair, sim: Sim, redis_server: RedisServer, route: str,
                                     case: str, stream: bool, header: bool) -> None:
    play_cell(ROUTES[route], Cell(provider_pair, sim, case, stream, header, flush=redis_server.flush, label="/expired"),
              records=False)


@pytest.mark.parametrize(("route", "case", "stream", "header"), RECORDS_GONE)
def test_matrix_with_redis_stopped(pair_without_redis: Pair, sim: Sim, route: str, case: str, stream: bool,
                                   header: bool) -> None:
    play_cell(ROUTES[route], Cell(pair_without_redis, sim, case, stream, header, label="/no-redis"), records=False)


# ------------------------------------------------------------------ one route only

def test_openai_to_gemini_twins_not_replayed_twice(provider_pair: Pair, sim: Sim) -> None:
    """Two conversations with the same prompt stay apart: each replays its own signatures."""
    loops = [OpenAILoop(provider_pair, GEMINI, False, False, sim) for _ in range(2)]
    try:
        with Rejections(sim):
            histories: list[list[dict[str, Any]]] = [[{"role": "user", "content": "[[sim:tools=2]] twins"}]
                                                     for _ in loops]
            for _ in range(2):
                for loop, h in zip(loops, histories, strict=True):
                    answer = loop.send(copy.deepcopy(h))
                    h.append(answer.message)
                    h += tool_messages(answer)
    finally:
        for loop in loops:
            loop.close()
    assert len({loop.scids[-1] for loop in loops}) == 2


@pytest.mark.parametrize("case", ["faithful", "drop_extra_content"])
def test_openai_to_gemini_records_expired_sends_bypass(provider_pair: Pair, sim: Sim, redis_server: RedisServer,
                                                       case: str) -> None:
    """Records gone before every request: nothing vouches for a signature, so the current turn's first
    calls get the bypass value (never the client's unverifiable copy) and the simulator accepts."""
    loop = OpenAILoop(provider_pair, GEMINI, False, True, sim)
    sends = loop.send

    def send_after_flush(history: list[dict[str, Any]]) -> Any:
        redis_server.flush()
        return sends(history)

    try:
        with Rejections(sim):
            answers, _ = gemini_helpers.run_loop(send_after_flush, f"[[sim:tools=2]] expired {case}",
                                                 mangle=openai_manglings.MANGLINGS[case])
    finally:
        loop.close()
    assert [a.finish_reason for a in answers] == ["tool_calls"] * 2 + ["stop"]
    for body in loop.bodies[1:]:
        calls = [p for c in body["contents"] if c["role"] == "model" for p in c["parts"] if "functionCall" in p]
        assert calls and all(p.get("thoughtSignature") == BYPASS for p in calls)

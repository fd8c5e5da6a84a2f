"""Issue 23 item 4: the mangling matrices under realistic traffic.

Every client surface x upstream pair the gateway serves (``CELLS``: the Anthropic Messages surface in front of
Anthropic; OpenAI chat and Augment chat-stream in front of Anthropic, Gemini, and OpenRouter- (a Gemini and a Claude
model), Copilot-, DeepSeek- and Gemini-compat-style upstreams; the Gemini surface in front of Gemini) plays the
manglings of its wire shape (``tests/manglings/``, the same tables the acceptance matrix
``tests/e2e/test_mangling_matrix.py`` plays one at a time, with its Anthropic flows: thinking switched mid-loop, a
retry, a rewind, an edited first message) as tool-loop conversations, many at once: a thread pool of ``workers``
conversations in flight, two tenants (two API keys, alternating), every request of a conversation on the other
replica than the one before, streams and non-streams, with and without the conversation-id header. The replicas are
two gateway processes on one real redis-server; a recording proxy (``tests/reliability/recording_proxy.py``) between
them and the strict simulator keeps what the upstream received for each conversation (``[[sim:conv=NAME]]``) and
what it answered.

Measured per cell (``CellResult``): conversations (runs) and how many completed, requests, client-visible errors,
upstream 4xx (the proxy's record of the simulator's answers), replayed turns the upstream received and how many
of them carried their thinking (``replayed_turns``: Anthropic thinking blocks, Gemini thought parts with a genuine
``thoughtSignature``, OpenRouter encrypted reasoning, Copilot ``reasoning_opaque``, DeepSeek ``reasoning_content``,
Gemini-compat ``extra_content`` signatures; not counted for the flows that switch thinking mid-loop), and stateless
fallbacks (requests the gateway served without records, from its access log's ``stateful`` field). Run-wide: the
simulator's rejections and cross-conversation oracle (``foreign``), and the replicas'
``gateway_stateless_requests_total``.

The short form runs in the process tier (``tests/e2e/test_mangling_traffic.py``), the long form is
``bench/mangling_traffic.py``.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import httpx
import openai

from gateway.sim.gemini_rules import AISTUDIO
from gateway.sim.gemini_rules import BYPASS as GEMINI_BYPASS
from tests.augment.client import TOOL_DEFINITIONS, chat, exchange, tool_result_nodes
from tests.e2e.helpers import THINKING, WEATHER_TOOL, block_dicts, send, tool_results
from tests.gemini.helpers import (
    CLAUDE,
    COPILOT,
    DEEPSEEK,
    GEMINI,
    GEMINI_COMPAT,
    OPENROUTER,
    OPENROUTER_CLAUDE,
    ask,
    function_responses,
    native_round,
    tool_messages,
)
from tests.manglings import augment as augment_manglings
from tests.manglings import gemini as gemini_manglings
from tests.manglings import openai as openai_manglings
from tests.manglings.anthropic import (
    CASE_THINKING,
    FLOWS,
    HISTORY_MANGLINGS,
    MESSAGE_MANGLINGS,
    NO_KEEP_CHECK,
    REDACTED,
    mangle_assistants,
)
from tests.process_fixtures import ServerProcess, Sim, scrape
from tests.reliability.loops import access_lines
from tests.reliability.recording_proxy import Exchange, RecordingProxy

Surface = Literal["anthropic", "openai", "gemini", "augment"]
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
TENANTS = ("sk-traffic-tenant-a-0123456789abcdef0123456789", "sk-traffic-tenant-b-0123456789abcdef0123456789")
ROUNDS = 2
MAX_REQUESTS = ROUNDS + 3
REQUEST_TIMEOUT_S = 60
# The access log's endpoint label of each surface (``gateway.surfaces``).
ENDPOINTS: dict[Surface, str] = {"anthropic": "messages", "openai": "chat_completions",
                                 "gemini": "generate_content", "augment": "chat_stream"}
GEMINI_CONFIG = {"tools": [{"functionDeclarations": [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}


@dataclass(frozen=True)
class Cell:
    """One client surface in front of one upstream, and the manglings its client plays."""

    surface: Surface
    upstream: str  # anthropic | gemini | openrouter (Gemini) | openrouter-claude | copilot | deepseek | generic
    model: str
    cases: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.surface}->{self.upstream}"


# the upstreams behind the routing surfaces: (model, the ``BY_UPSTREAM`` row of the manglings its answers meet)
_UPSTREAMS = {"anthropic": (CLAUDE, "anthropic"), "gemini": (GEMINI, "gemini"),
              "openrouter": (OPENROUTER, "openrouter"), "openrouter-claude": (OPENROUTER_CLAUDE, "openrouter"),
              "copilot": (COPILOT, "copilot"), "deepseek": (DEEPSEEK, "deepseek"),
              "generic": (GEMINI_COMPAT, "generic")}
_AUGMENT_CASES = (*sorted(augment_manglings.MANGLINGS), augment_manglings.SERVER_SIDE_STATE)
CELLS: tuple[Cell, ...] = (
    Cell("anthropic", "anthropic", CLAUDE, (*sorted(MESSAGE_MANGLINGS), *sorted(HISTORY_MANGLINGS), *FLOWS)),
    *(Cell("openai", up, model, openai_manglings.BY_UPSTREAM[row]) for up, (model, row) in _UPSTREAMS.items()),
    Cell("gemini", "gemini", GEMINI, tuple(sorted(gemini_manglings.MANGLINGS))),
    *(Cell("augment", up, model, _AUGMENT_CASES) for up, (model, _) in _UPSTREAMS.items()),
)


@dataclass
class Conv:
    """One conversation: where it is played, how its client mangles, and what happened to it."""

    index: int
    name: str  # the ``[[sim:conv=NAME]]`` marker
    cell: Cell
    case: str
    stream: bool
    header: bool  # sends the conversation id back (Augment: a ``conversation_id`` in the body)
    key: str      # the tenant's API key
    requests: int = 0
    scids: list[str | None] = field(default_factory=list)
    completed: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def prompt(self) -> str:
        parallel = "" if self.cell.surface == "anthropic" else " [[sim:parallel=2]]"
        redacted = " [[sim:redacted]]" if self.cell.surface == "anthropic" and self.case in REDACTED else ""
        return (f"[[sim:tools={ROUNDS}]]{parallel}{redacted} [[sim:conv={self.name}]] weather? "
                f"{self.cell.id} case {self.case}")

    def url(self, urls: Sequence[str]) -> str:
        """The replica of the next request: the other one than the last."""
        return urls[(self.index + self.requests) % len(urls)]

    def header_scid(self) -> dict[str, str]:
        last = self.scids[-1] if self.scids else None
        return {SCID: last} if self.header and last else {}


def plan(cells: Sequence[Cell] = CELLS, *, per_cell: int | None = None, repeat: int = 1, offset: int = 0,
         tag: str = "") -> list[Conv]:
    """The conversations to play. ``per_cell`` None: every case of every cell in each of the four (stream,
    header) combinations, ``repeat`` times. Else ``per_cell`` conversations per cell, cases taken in turn from
    ``offset`` on, stream and header alternating. Within every cell the two tenants alternate; the cells are
    interleaved, so every stretch of the run mixes surfaces, upstreams and tenants."""
    tag = tag or uuid.uuid4().hex[:8]
    lanes: list[list[tuple[Cell, str, bool, bool, str]]] = []
    for c, cell in enumerate(cells):
        if per_cell is None:
            rows = [(case, stream, header) for _ in range(repeat) for case in cell.cases
                    for stream in (False, True) for header in (True, False)]
        else:
            rows = [(cell.cases[(offset + j) % len(cell.cases)], (offset + j) % 2 == 1, (offset + j) // 2 % 2 == 0)
                    for j in range(per_cell)]
        lanes.append([(cell, case, stream, header, TENANTS[(c + j) % 2])
                      for j, (case, stream, header) in enumerate(rows)])
    mixed = [lane[k] for k in range(max(map(len, lanes), default=0)) for lane in lanes if k < len(lane)]
    return [Conv(n, f"t{n}-{tag}", cell, case, stream, header, key)
            for n, (cell, case, stream, header, key) in enumerate(mixed)]


# ------------------------------------------------------------------ the four client surfaces


def play_anthropic(conv: Conv, urls: Sequence[str]) -> None:
    clients = {u: anthropic.Anthropic(base_url=u, api_key=conv.key, max_retries=0, timeout=REQUEST_TIMEOUT_S,
                                      default_headers=BETA) for u in urls}
    case = conv.case
    base = CASE_THINKING.get(case, THINKING)
    history: list[dict[str, Any]] = [{"role": "user", "content": conv.prompt}]

    def mangled(h: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if case in MESSAGE_MANGLINGS:
            return mangle_assistants(h, case)
        if case in HISTORY_MANGLINGS:
            return HISTORY_MANGLINGS[case](h)
        if case == "edit_earlier_user" and len(h) > 3:
            h = copy.deepcopy(h)
            h[0]["content"] += " (edited: and in Madrid)"
        return h

    def ask_(thinking: dict[str, Any] | None) -> anthropic.types.Message:
        params: dict[str, Any] = {"model": conv.cell.model, "max_tokens": 4096, "tools": [WEATHER_TOOL],
                                  "messages": mangled(history), "extra_headers": conv.header_scid()}
        if thinking is not None:
            params["thinking"] = thinking
        client = clients[conv.url(urls)]
        conv.requests += 1
        answer, headers = send(client, params, stream=conv.stream)
        conv.scids.append(headers.get(SCID))
        return answer

    try:
        for step in range(MAX_REQUESTS):  # the flows as the acceptance matrix plays them (``FLOWS``)
            thinking: dict[str, Any] | None = base
            if (case == "thinking_off_mid_loop" and step >= 1) or (case == "thinking_on_mid_loop" and step == 0):
                thinking = None
            answer = ask_(thinking)
            if case == "retry_twice":
                answer = ask_(thinking)
            if case == "rewind" and step == ROUNDS - 1:
                history = history[:-2]  # drop the last assistant turn and its results, ask again
                answer = ask_(thinking)
            if answer.stop_reason != "tool_use":
                conv.completed = True
                return
            history += [{"role": "assistant", "content": block_dicts(answer)},
                        {"role": "user", "content": tool_results(answer)}]
    finally:
        for c in clients.values():
            c.close()


def play_openai(conv: Conv, urls: Sequence[str]) -> None:
    clients = {u: openai.OpenAI(base_url=u + "/v1", api_key=conv.key, max_retries=0, timeout=REQUEST_TIMEOUT_S,
                                default_headers=BETA) for u in urls}
    params: dict[str, Any] = {"extra_body": {"thinking": THINKING}} if conv.cell.model == CLAUDE \
        else {"reasoning_effort": "low"}
    mangle = openai_manglings.MANGLINGS[conv.case]
    history: list[dict[str, Any]] = [{"role": "user", "content": conv.prompt}]
    try:
        for _ in range(MAX_REQUESTS):
            client = clients[conv.url(urls)]
            headers = conv.header_scid()
            conv.requests += 1
            answer = ask(client, conv.cell.model, mangle(history), stream=conv.stream, headers=headers, **params)
            conv.scids.append(answer.scid)
            history.append(answer.message)
            if answer.finish_reason != "tool_calls":
                conv.completed = True
                return
            history += tool_messages(answer)
    finally:
        for c in clients.values():
            c.close()


def play_gemini(conv: Conv, urls: Sequence[str]) -> None:
    mangle = gemini_manglings.MANGLINGS[conv.case]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": conv.prompt}]}]
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as http:
        for _ in range(MAX_REQUESTS):
            url = conv.url(urls)
            conv.requests += 1
            content, scid = native_round(http, url, conv.cell.model, stream=conv.stream, config=GEMINI_CONFIG,
                                         contents=mangle(contents), headers={"x-goog-api-key": conv.key,
                                                                             **conv.header_scid()})
            conv.scids.append(scid)
            if not (responses := function_responses(content)):
                conv.completed = True
                return
            contents += [content, responses]


def play_augment(conv: Conv, urls: Sequence[str]) -> None:
    server_side = conv.case == augment_manglings.SERVER_SIDE_STATE
    replay = None if server_side else augment_manglings.MANGLINGS[conv.case]
    # A client that replays nothing names its thread; one that replays may or may not.
    conversation_id = str(uuid.uuid4()) if server_side or conv.header else None
    headers = {"authorization": f"Bearer {conv.key}", **BETA}
    history: list[dict[str, Any]] = []
    message, nodes = conv.prompt, list[dict[str, Any]]()
    for _ in range(MAX_REQUESTS):
        body: dict[str, Any] = {"model": conv.cell.model, "message": message, "nodes": nodes,
                                "chat_history": replay(history) if replay else [],
                                "tool_definitions": TOOL_DEFINITIONS, "thinking": THINKING, "max_tokens": 4096,
                                "feature_detection_flags": {"support_tool_use_start": True}}
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        conv.requests += 1
        reply = chat(conv.url(urls), body, headers)
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status}: {str(reply.body)[:300]}")
        if reply.lines and "error" in reply.lines[-1]:
            raise RuntimeError(f"error line: {str(reply.lines[-1]['error'])[:300]}")
        conv.scids.append(reply.headers.get(SCID))
        history.append(exchange(message, nodes, reply))
        if reply.stop_reason != 3:
            conv.completed = True
            return
        message, nodes = "", tool_result_nodes(reply)


PLAY: dict[Surface, Callable[[Conv, Sequence[str]], None]] = {
    "anthropic": play_anthropic, "openai": play_openai, "gemini": play_gemini, "augment": play_augment}


# ------------------------------------------------------------------ what the upstream received


def _openai_turn_kept(path: str, m: dict[str, Any]) -> bool:
    if "/openrouter/" in path:  # Gemini's encrypted reasoning; a Claude model's signed (or redacted) thinking
        return any(isinstance(d, dict) and ((d.get("type") == "reasoning.encrypted" and d.get("data"))
                                            or (d.get("type") == "reasoning.text" and d.get("signature")))
                   for d in m.get("reasoning_details") or ())
    if "/copilot/" in path:
        return bool(m.get("reasoning_opaque"))
    if "/deepseek/" in path:
        return bool(m.get("reasoning_content"))
    # Gemini's OpenAI-compatibility layer: the first call's signature (a text answer's: the message's), genuine
    holder = (m.get("tool_calls") or [m])[0]
    sig = ((holder.get("extra_content") or {}).get("google") or {}).get("thought_signature")
    return bool(sig) and sig not in GEMINI_BYPASS[AISTUDIO]


def _anthropic_turn_kept(content: Any) -> bool:
    return isinstance(content, list) and bool(content) and (
        content[0].get("type") == "redacted_thinking"
        or (content[0].get("type") == "thinking" and bool(content[0].get("signature"))))


def _gemini_turn_kept(content: dict[str, Any]) -> bool:
    parts = content.get("parts") or [{}]
    calls = [p for p in parts if "functionCall" in p]
    sig = calls[0].get("thoughtSignature") if calls else None
    return parts[0].get("thought") is True and bool(sig) and sig not in GEMINI_BYPASS[AISTUDIO]


def replayed_turns(ex: Exchange) -> list[bool]:
    """Per replayed assistant/model turn of one upstream request: does it carry its thinking (Anthropic: a signed
    thinking block or redacted thinking first; Gemini: a thought part and a genuine ``thoughtSignature`` on the
    first call; OpenRouter: encrypted reasoning; Copilot: ``reasoning_opaque``; DeepSeek: ``reasoning_content``;
    Gemini's OpenAI layer: a genuine ``extra_content`` signature)."""
    body, path = ex.body, ex.path
    if not isinstance(body, dict):
        return []
    if path.startswith("/v1/messages"):
        return [_anthropic_turn_kept(m.get("content")) for m in body.get("messages", ())
                if m.get("role") == "assistant"]
    if path.startswith("/v1beta/models/"):
        return [_gemini_turn_kept(c) for c in body.get("contents", ()) if c.get("role") == "model"]
    return [_openai_turn_kept(path, m) for m in body.get("messages", ()) if m.get("role") == "assistant"]


def thinking_lost(ex: Exchange) -> list[int]:
    """Indexes of the replayed assistant/model turns in an upstream request that go without their thinking."""
    return [k for k, kept in enumerate(replayed_turns(ex)) if not kept]


# ------------------------------------------------------------------ the run


@dataclass
class CellResult:
    cell: str
    runs: int = 0            # conversations
    completed: int = 0       # conversations that reached their final answer
    requests: int = 0        # client requests
    errors: int = 0          # conversations ended by an error the client saw
    upstream_4xx: int = 0    # upstream answers 400-499 (the proxy's record)
    replayed: int = 0        # replayed assistant turns the upstream received
    kept: int = 0            # ... with their thinking
    stateless: int = 0       # requests served without records (access log ``stateful: false``)
    tenants: set[str] = field(default_factory=set)    # the API keys its conversations used
    samples: list[str] = field(default_factory=list)  # a few error texts

    @property
    def clean(self) -> bool:
        return self.errors == 0 and self.upstream_4xx == 0 and self.completed == self.runs


@dataclass
class Report:
    mode: str
    cells: dict[str, CellResult]
    elapsed: float
    max_in_flight: int
    workers: int
    tenants: int
    rejections: dict[str, int]     # the simulator's, during the run
    foreign: int                   # upstream requests carrying another conversation's content (the oracle)
    stateless_metric: float        # gateway_stateless_requests_total over both replicas, during the run
    requests: int

    def totals(self) -> CellResult:
        t = CellResult("total")
        for r in self.cells.values():
            for f in ("runs", "completed", "requests", "errors", "upstream_4xx", "replayed", "kept", "stateless"):
                setattr(t, f, getattr(t, f) + getattr(r, f))
        return t

    def failing(self) -> list[CellResult]:
        return [r for r in self.cells.values() if not r.clean]

    def problems(self, *, keep_thinking: bool, min_in_flight: int = 8) -> list[str]:
        """What breaks the promise: a cell with an upstream 4xx, an error or an unfinished conversation; fewer
        than ``min_in_flight`` conversations at once or one tenant; a simulator rejection; another conversation's
        content upstream; with ``keep_thinking`` (the state machine on: every replayed turn has a record), a
        replayed turn without its thinking or a stateless fallback."""
        out = [f"{r.cell}: {r.runs} runs, {r.completed} completed, {r.upstream_4xx} upstream 4xx, {r.errors} "
               f"errors {r.samples[:2]}" for r in self.failing()]
        if self.max_in_flight < min_in_flight:
            out.append(f"only {self.max_in_flight} conversations were in flight at once")
        if self.tenants < 2:
            out.append("one tenant only")
        if self.rejections:
            out.append(f"the simulator rejected requests: {self.rejections}")
        if self.foreign:
            out.append(f"{self.foreign} upstream requests carried another conversation's content")
        if keep_thinking:
            out += [f"{r.cell}: thinking kept on {r.kept} of {r.replayed} replayed turns"
                    for r in self.cells.values() if r.kept != r.replayed]
            out += [f"{r.cell}: {r.stateless} stateless fallbacks" for r in self.cells.values() if r.stateless]
        return out

    def table(self) -> str:
        lines = [f"state machine {self.mode}: {self.totals().runs} conversations, {self.requests} requests in "
                 f"{self.elapsed:.1f}s, {self.max_in_flight} in flight at most ({self.workers} workers), "
                 f"{self.tenants} tenants; simulator rejections {sum(self.rejections.values())}, foreign "
                 f"{self.foreign}, gateway_stateless_requests_total {self.stateless_metric:.0f}",
                 "",
                 "| surface -> upstream | runs | completed | requests | upstream 4xx | errors | thinking kept / "
                 "replayed turns | stateless fallbacks |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in [*self.cells.values(), self.totals()]:
            lines.append(f"| {r.cell} | {r.runs} | {r.completed} | {r.requests} | {r.upstream_4xx} | {r.errors} | "
                         f"{r.kept} / {r.replayed} | {r.stateless} |")
        return "\n".join(lines)


def _access_lines_after(replicas: Sequence[ServerProcess], seen: Sequence[int], n: int,
                        timeout: float = 10.0) -> list[dict[str, Any]]:
    """The replicas' access-log lines after the first ``seen`` of each, once there are ``n`` of them (a gateway
    writes a request's line just after its answer) or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for sp, k in zip(replicas, seen, strict=True) for line in access_lines(sp.log_lines())[k:]]
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)  # polling a child's log file: there is no event to await


def _stateless_total(replicas: Sequence[ServerProcess]) -> float:
    return sum(sum(scrape(sp).get("gateway_stateless_requests_total", {}).values()) for sp in replicas)


def run(replicas: Sequence[ServerProcess], proxy: RecordingProxy, sim: Sim, convs: Sequence[Conv], *,
        workers: int = 12, mode: str = "on") -> Report:
    """Play ``convs`` with ``workers`` conversations in flight at once through ``replicas``; measure each cell."""
    urls = [sp.url for sp in replicas]
    stats0 = sim.stats()
    seen = [len(access_lines(sp.log_lines())) for sp in replicas]
    stateless0 = _stateless_total(replicas)
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most
    first = {id(c) for c in convs[:workers]}  # these start at once (the pool's first tasks), then one per one done
    together = threading.Barrier(len(first))

    def play(conv: Conv) -> None:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        try:
            if id(conv) in first:
                together.wait(REQUEST_TIMEOUT_S)
            PLAY[conv.cell.surface](conv, urls)
        except Exception as e:  # every failure is a finding: keep it, the other conversations go on
            conv.errors.append(f"{conv.cell.id} {conv.case} request {conv.requests}: {type(e).__name__}: "
                               f"{str(e)[:400]}")
        finally:
            with lock:
                in_flight[0] -= 1

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(play, convs))
    elapsed = time.monotonic() - began
    stats = sim.stats()
    rejections = Counter(stats["rejections"])
    rejections.subtract(stats0["rejections"])
    # the access lines of this run, attributed to their cell by (endpoint, model)
    by_route: dict[tuple[str, str], str] = {(ENDPOINTS[c.cell.surface], c.cell.model): c.cell.id for c in convs}
    cells = {c.cell.id: CellResult(c.cell.id) for c in convs}
    for line in _access_lines_after(replicas, seen, sum(c.requests for c in convs)):
        cell = by_route.get((str(line.get("endpoint")), str(line.get("model"))))
        if cell is not None and line.get("stateful") is False:
            cells[cell].stateless += 1
    for conv in convs:
        r = cells[conv.cell.id]
        r.tenants.add(conv.key)
        r.runs += 1
        r.completed += conv.completed
        r.requests += conv.requests
        if conv.errors:
            r.errors += 1
            if len(r.samples) < 3:
                r.samples += conv.errors
        for ex in proxy.of(conv.name):
            r.upstream_4xx += 400 <= ex.status < 500
            if ex.status == 200 and conv.case not in NO_KEEP_CHECK:  # (thinking switched mid-loop: not kept)
                turns = replayed_turns(ex)
                r.replayed += len(turns)
                r.kept += sum(turns)
    return Report(mode, cells, elapsed, in_flight[1], workers, len({c.key for c in convs}),
                  {k: v for k, v in rejections.items() if v}, stats["foreign"] - stats0["foreign"],
                  _stateless_total(replicas) - stateless0, sum(c.requests for c in convs))

"""Issue 23 item 4: the mangling matrices under realistic traffic.

Every client surface x upstream pair the gateway serves (``CELLS``, 25: the Anthropic Messages surface in front of
Anthropic; OpenAI chat and Augment chat-stream in front of Anthropic, Gemini, OpenRouter- (a Gemini and a Claude
model), Copilot-, DeepSeek- and Gemini-compat-style upstreams and an OpenAI Responses upstream; the OpenAI Responses
surface in front of the same upstreams but its own dialect (that pair is another branch's); the Gemini surface in
front of Gemini) plays the manglings of its wire shape (``tests/support/manglings/``, and the Responses replay styles of
``tests/support/responses/helpers.py``: the same tables the acceptance matrix
``tests/process/e2e/test_mangling_matrix.py`` plays one
at a time, with its Anthropic flows: thinking switched mid-loop, a retry, a rewind, an edited first message) as
tool-loop conversations, many at once: a thread pool of ``workers`` conversations in flight, two tenants (two API
keys, alternating), every request of a conversation on the other replica than the one before, streams and
non-streams, with and without the conversation-id header. The replicas are two gateway processes on one real
redis-server; a recording proxy (``tests/support/reliability/recording_proxy.py``) between them and the strict simulator
keeps what the upstream received for each conversation (``[[sim:conv=NAME]]``) and what it answered, and relays
every answer as it arrives, cut into small pieces at offsets drawn from ``SPLIT_SEED``: the replicas read every
upstream stream split inside events, JSON strings, multi-byte characters and CRLF line ends (``Report.stream``
counts the streamed answers, their pieces and the cuts by class).

Measured per cell (``CellResult``): conversations (runs) and how many completed or were refused by design (a
Responses replay that names what only the records hold, bare ``store: false`` references or ``previous_response_id``
alone, without records: ``traffic_clients.REFUSALS``, the exact status and text), requests, client-visible errors,
upstream 4xx (the proxy's record of the simulator's answers), replayed turns the upstream received and how many
of them carried their thinking (``replayed_turns``: Anthropic thinking blocks, Gemini thought parts with a genuine
``thoughtSignature``, OpenRouter encrypted reasoning, Copilot ``reasoning_opaque``, DeepSeek ``reasoning_content``,
Gemini-compat ``extra_content`` signatures, OpenAI Responses reasoning items with ``encrypted_content`` before the
item they preceded; not counted for the flows that switch thinking mid-loop; also per case), and stateless
fallbacks (requests the gateway served without records, from its access log's ``stateful`` field, of those that went
upstream: a refused request is not served). Run-wide: the
simulator's rejections and cross-conversation oracle (``foreign``), and the replicas'
``gateway_stateless_requests_total``.

The clients are ``tests/support/e2e/traffic_clients.py``. The short form runs in the process tier
(``tests/process/e2e/test_mangling_traffic.py``), the long form is ``bench/mangling_traffic.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.process_fixtures import ServerProcess, Sim, scrape
from tests.support.cloud.helpers import BEDROCK_CLAUDE, CONVERSE_CLAUDE, VERTEX_CLAUDE, VERTEX_GEMINI, cloud_env
from tests.support.e2e.traffic_clients import PLAY, REQUEST_TIMEOUT_S, Cell, Conv, Surface
from tests.support.gemini.helpers import (
    CLAUDE,
    COPILOT,
    DEEPSEEK,
    GEMINI,
    GEMINI_COMPAT,
    OPENROUTER,
    OPENROUTER_CLAUDE,
    RESPONSES,
    gateway_env,
)
from tests.support.manglings import augment as augment_manglings
from tests.support.manglings import gemini as gemini_manglings
from tests.support.manglings import openai as openai_manglings
from tests.support.manglings.anthropic import FLOWS, HISTORY_MANGLINGS, MESSAGE_MANGLINGS, NO_KEEP_CHECK
from tests.support.reliability.loops import access_lines
from tests.support.reliability.recording_proxy import Exchange, Figures, RecordingProxy
from tests.support.responses.helpers import CASES as RESPONSES_CASES
from thinkgate_sim.gemini_rules import AISTUDIO
from thinkgate_sim.gemini_rules import BYPASS as GEMINI_BYPASS

SPLIT_SEED = 23  # the recording proxy's: where it cuts the upstream answers it relays
TENANTS = ("sk-traffic-tenant-a-0123456789abcdef0123456789", "sk-traffic-tenant-b-0123456789abcdef0123456789")
# The access log's endpoint label of each surface (``gateway.surfaces.table``).
ENDPOINTS: dict[Surface, str] = {"anthropic": "messages", "openai": "chat_completions", "responses": "responses",
                                 "gemini": "generate_content", "augment": "chat_stream"}

# the upstreams behind the routing surfaces: (model, the ``BY_UPSTREAM`` row of the manglings its answers meet)
_UPSTREAMS = {"anthropic": (CLAUDE, "anthropic"), "gemini": (GEMINI, "gemini"),
              "openrouter": (OPENROUTER, "openrouter"), "openrouter-claude": (OPENROUTER_CLAUDE, "openrouter"),
              "copilot": (COPILOT, "copilot"), "deepseek": (DEEPSEEK, "deepseek"),
              "generic": (GEMINI_COMPAT, "generic"), "responses": (RESPONSES, "responses"),
              # the cloud platforms (issue 36): Claude on Bedrock (InvokeModel, Converse) and Vertex AI, Gemini on
              # Vertex AI: Claude's manglings and Gemini's
              "bedrock": (BEDROCK_CLAUDE, "anthropic"), "bedrock-converse": (CONVERSE_CLAUDE, "anthropic"),
              "vertex-anthropic": (VERTEX_CLAUDE, "anthropic"), "vertex-gemini": (VERTEX_GEMINI, "gemini")}
_CLAUDE_PLATFORMS = ("bedrock", "bedrock-converse", "vertex-anthropic")
CLOUD_UPSTREAMS = frozenset({*_CLAUDE_PLATFORMS, "vertex-gemini"})  # their requests carry the gateway's credential
# the upstreams behind the Responses surface: every one
_RESPONSES_UPSTREAMS = tuple(_UPSTREAMS)
_AUGMENT_CASES = (*sorted(augment_manglings.MANGLINGS), augment_manglings.SERVER_SIDE_STATE)
CELLS: tuple[Cell, ...] = (
    *(Cell("anthropic", up, _UPSTREAMS[up][0], (*sorted(MESSAGE_MANGLINGS), *sorted(HISTORY_MANGLINGS), *FLOWS))
      for up in ("anthropic", *_CLAUDE_PLATFORMS)),
    *(Cell("openai", up, model, openai_manglings.BY_UPSTREAM[row]) for up, (model, row) in _UPSTREAMS.items()),
    *(Cell("responses", up, _UPSTREAMS[up][0], RESPONSES_CASES) for up in _RESPONSES_UPSTREAMS),
    *(Cell("gemini", up, _UPSTREAMS[up][0], tuple(sorted(gemini_manglings.MANGLINGS)))
      for up in ("gemini", "vertex-gemini")),
    *(Cell("augment", up, model, _AUGMENT_CASES) for up, (model, _) in _UPSTREAMS.items()),
)


def replica_env(sim: Sim, proxy: RecordingProxy, redis_url: str, secret: str, tmp: Path) -> dict[str, str]:
    """A replica's environment in the matrix: every upstream of ``gateway_env`` and the cloud platforms
    (``tests/support/cloud/helpers.py``; their credentials in ``tmp``) reached through ``proxy``, one redis-server, JSON
    access lines (``run`` reads them)."""
    env = {k: v.replace(sim.url, proxy.url) for k, v in gateway_env(sim).items()}
    cloud = cloud_env(sim, tmp, proxy.url)
    env |= {**cloud, "GATEWAY_ROUTES": env["GATEWAY_ROUTES"] + "," + cloud["GATEWAY_ROUTES"],
            "GATEWAY_GEMINI_BASE_URL": env["GATEWAY_GEMINI_BASE_URL"]}
    return env | {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": secret, "GATEWAY_STORE_TIMEOUT_MS": "1000",
                  "GATEWAY_LOG_LEVEL": "INFO", "GATEWAY_LOG_FORMAT": "json"}


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


def _converse_turn_kept(content: Any) -> bool:
    first = content[0] if isinstance(content, list) and content else {}
    reasoning = first.get("reasoningContent") or {}
    return "redactedContent" in reasoning or bool((reasoning.get("reasoningText") or {}).get("signature"))


def _gemini_turn_kept(content: dict[str, Any]) -> bool:
    parts = content.get("parts") or [{}]
    calls = [p for p in parts if "functionCall" in p]
    sig = calls[0].get("thoughtSignature") if calls else None
    return parts[0].get("thought") is True and bool(sig) and sig not in GEMINI_BYPASS[AISTUDIO]


_RESPONSES_ASSISTANT = ("reasoning", "function_call", "item_reference")


def _responses_turns(items: Sequence[Any]) -> list[list[dict[str, Any]]]:
    """The assistant turns of a Responses ``input``: each maximal run of output items (reasoning items, function
    calls, assistant messages) between the client's items (user messages, function call outputs)."""
    turns: list[list[dict[str, Any]]] = []
    run: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind in _RESPONSES_ASSISTANT or (kind == "message" and item.get("role") == "assistant"):
            run.append(item)
            continue
        if run:
            turns.append(run)
        run = []
    return [*turns, run] if run else turns


def _responses_turn_kept(turn: list[dict[str, Any]]) -> bool:
    """A reasoning item with its ``encrypted_content`` first, then the item it preceded (a call or the message)."""
    return (len(turn) >= 2 and turn[0].get("type") == "reasoning" and bool(turn[0].get("encrypted_content"))
            and turn[1].get("type") in ("function_call", "message"))


def replayed_turns(ex: Exchange) -> list[bool]:
    """Per replayed assistant/model turn of one upstream request: does it carry its thinking (Anthropic: a signed
    thinking block or redacted thinking first; Gemini: a thought part and a genuine ``thoughtSignature`` on the
    first call; OpenRouter: encrypted reasoning; Copilot: ``reasoning_opaque``; DeepSeek: ``reasoning_content``;
    Gemini's OpenAI layer: a genuine ``extra_content`` signature; an OpenAI Responses upstream: a reasoning item with
    its ``encrypted_content`` replayed just before the item it preceded)."""
    body, path = ex.body, ex.path
    if not isinstance(body, dict):
        return []
    if path.split("?")[0].endswith("/responses"):
        items = body.get("input")
        return [_responses_turn_kept(t) for t in _responses_turns(items if isinstance(items, list) else ())]
    if path.startswith("/model/") and "/converse" in path:  # Bedrock's Converse: its reasoning blocks
        return [_converse_turn_kept(m.get("content")) for m in body.get("messages", ()) if m.get("role") == "assistant"]
    if path.startswith(("/v1/messages", "/model/")) or "/publishers/anthropic/" in path:
        return [_anthropic_turn_kept(m.get("content")) for m in body.get("messages", ())
                if m.get("role") == "assistant"]
    if path.startswith("/v1beta/models/") or "/publishers/google/" in path:
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
    refused: int = 0         # conversations the gateway refused by design: their replay needs records (none there)
    upstream_4xx: int = 0    # upstream answers 400-499 (the proxy's record)
    replayed: int = 0        # replayed assistant turns the upstream received
    kept: int = 0            # ... with their thinking
    stateless: int = 0       # requests served without records (access log ``stateful: false``, sent upstream)
    tenants: set[str] = field(default_factory=set)    # the API keys its conversations used
    by_case: dict[str, list[int]] = field(default_factory=dict)  # case -> [kept, replayed]
    refused_cases: dict[str, int] = field(default_factory=dict)   # case -> conversations refused (not a Counter:
    # dataclasses.asdict rebuilds a Counter from its items, counting (key, value) pairs: the bench's --json broke)
    samples: list[str] = field(default_factory=list)  # a few error texts

    @property
    def clean(self) -> bool:
        return self.errors == 0 and self.upstream_4xx == 0 and self.completed + self.refused == self.runs


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
    stream: Figures                # the streamed upstream answers: how many, in how many pieces, cut where

    def totals(self) -> CellResult:
        t = CellResult("total")
        for r in self.cells.values():
            for f in ("runs", "completed", "requests", "errors", "refused", "upstream_4xx", "replayed", "kept",
                      "stateless"):
                setattr(t, f, getattr(t, f) + getattr(r, f))
        return t

    def failing(self) -> list[CellResult]:
        return [r for r in self.cells.values() if not r.clean]

    def problems(self, *, keep_thinking: bool, min_in_flight: int = 8) -> list[str]:
        """What breaks the promise: a cell with an upstream 4xx, an error or an unfinished conversation; fewer
        than ``min_in_flight`` conversations at once or one tenant; a simulator rejection; another conversation's
        content upstream; with ``keep_thinking`` (the state machine on: every replayed turn has a record), a
        replayed turn without its thinking or a stateless fallback."""
        out = [f"{r.cell}: {r.runs} runs, {r.completed} completed, {r.refused} refused, {r.upstream_4xx} upstream "
               f"4xx, {r.errors} errors {r.samples[:2]}" for r in self.failing()]
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
            out += [f"{r.cell}: {r.refused} conversations refused although records exist"
                    for r in self.cells.values() if r.refused]
        return out

    def table(self) -> str:
        lines = [f"state machine {self.mode}: {self.totals().runs} conversations, {self.requests} requests in "
                 f"{self.elapsed:.1f}s, {self.max_in_flight} in flight at most ({self.workers} workers), "
                 f"{self.tenants} tenants; simulator rejections {sum(self.rejections.values())}, foreign "
                 f"{self.foreign}, gateway_stateless_requests_total {self.stateless_metric:.0f}",
                 f"streamed upstream answers {self.stream.streamed}, relayed in {self.stream.pieces} pieces; cuts "
                 f"{self.stream.cuts}",
                 "",
                 "| surface -> upstream | runs | completed | refused | requests | upstream 4xx | errors | thinking "
                 "kept / replayed turns | stateless fallbacks |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in [*self.cells.values(), self.totals()]:
            lines.append(f"| {r.cell} | {r.runs} | {r.completed} | {r.refused} | {r.requests} | {r.upstream_4xx} | "
                         f"{r.errors} | {r.kept} / {r.replayed} | {r.stateless} |")
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
        # served (it went upstream) without records: what gateway_stateless_requests_total counts (``pipeline.served``)
        if cell is not None and line.get("stateful") is False and line.get("upstream_status") is not None:
            cells[cell].stateless += 1
    for conv in convs:
        r = cells[conv.cell.id]
        r.tenants.add(conv.key)
        r.runs += 1
        r.completed += conv.completed
        if conv.refused is not None:
            r.refused += 1
            r.refused_cases[conv.case] = r.refused_cases.get(conv.case, 0) + 1
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
                case = r.by_case.setdefault(conv.case, [0, 0])
                case[0] += sum(turns)
                case[1] += len(turns)
    return Report(mode, cells, elapsed, in_flight[1], workers, len({c.key for c in convs}),
                  {k: v for k, v in rejections.items() if v}, stats["foreign"] - stats0["foreign"],
                  _stateless_total(replicas) - stateless0, sum(c.requests for c in convs),
                  proxy.figures([ex for conv in convs for ex in proxy.of(conv.name)]))

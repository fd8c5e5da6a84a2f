"""The simulator's HTTP shell: Starlette routes around the pure rules and scenarios.

Endpoints:

* ``POST /v1/messages`` (``?beta=true`` accepted): auth, JSON, ``rules``, on a bound model
  (``SimConfig.bound_models``) ``binding``, then the scripted reply as JSON or SSE (faults from
  ``scenarios`` injected here).
* ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, after the request's rules (``rules``, without
  ``max_tokens``, only count_tokens' fields), and on a bound model the binding's.
* ``GET /v1/models``: Anthropic's model list (one page); ``GET /v1beta/models``: Gemini's.
* ``GET /_sim/stats``, ``POST /_sim/reset``, ``GET /_sim/last``, ``POST /_sim/release``.
* Gemini (``thinkgate_sim.gemini``): ``/v1beta/models/{model}:generateContent`` and
  ``:streamGenerateContent`` (AI Studio), the same under ``/vertex``; OpenAI-compatible
  profiles (``thinkgate_sim.compat``): ``/v1beta/openai/chat/completions`` (Gemini's
  compatibility layer), ``/openrouter/api/v1/chat/completions``,
  ``/copilot/chat/completions``, ``/deepseek/v1/chat/completions``. Their rejections
  count in the same stats (rule keys ``gemini-N`` / ``compat-N``); the strict OpenAI Responses profile
  (``thinkgate_sim.responses``): ``/openai/v1/responses`` and ``/openai/v1/models`` (rule keys ``responses-N``).

Every flavor shows each request to the cross-conversation ``oracle`` before validating it
(``[[sim:conv=NAME]]``): ``stats.foreign`` counts requests carrying another conversation's
content, ``foreign_details`` says which (at most ``FOREIGN_DETAILS`` entries).

Every response carries a ``request-id`` header; errors use the Anthropic envelope.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from thinkgate_sim import context
from thinkgate_sim.binding import DEFAULT_BOUND_MODELS, Rejection, check_binding, is_bound
from thinkgate_sim.cloud import cloud_routes
from thinkgate_sim.compat import compat_routes
from thinkgate_sim.convo import first_user_text
from thinkgate_sim.deep_json import estimate_tokens
from thinkgate_sim.dropped import DroppedResponse
from thinkgate_sim.faults import pump
from thinkgate_sim.gemini import gemini_routes
from thinkgate_sim.oracle import ConversationOracle
from thinkgate_sim.render import first_delta_position, stream_events
from thinkgate_sim.responses import responses_routes
from thinkgate_sim.rules import check_messages_request, thinking_mode
from thinkgate_sim.scenarios import Fault, Reply, minted_tokens, new_id, parse_scenario, plan_reply
from thinkgate_sim.signing import Minter
from thinkgate_sim.wire import anthropic_error_body, encode_event

SIM_ANTHROPIC_MODELS = ("claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5")
FOREIGN_DETAILS = 50
_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


@dataclass
class SimConfig:
    secret: bytes = b"thinkgate-sim"
    strict_older_turns: bool = True
    interleaved: bool | None = None  # None = follow the beta header/adaptive; True/False force
    # models (families) that bind thinking blocks to their prefix and model (``thinkgate_sim.binding``)
    bound_models: tuple[str, ...] = DEFAULT_BOUND_MODELS
    # False: an account created before 2026-08-31, where the prefix check is not enforced by default
    binding_enforced: bool = True
    # tool rounds for a conversation whose first user message has no [[sim:tools=N]] marker, when the request
    # declares tools (``thinkgate sim --tools N``): a first tool loop against the simulator calls its tools
    tools: int = 0


@dataclass
class _Stats:
    requests: int = 0
    accepted: int = 0
    faults: int = 0
    unauthorized: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    streams_open: int = 0       # SSE bodies being sent right now
    streams_completed: int = 0  # sent to the end
    streams_cancelled: int = 0  # the client (the gateway) went away before the end
    foreign: int = 0            # requests carrying another conversation's content (the oracle)
    foreign_details: list[dict[str, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "accepted": self.accepted, "rejections": dict(self.rejections),
                "faults": self.faults, "unauthorized": self.unauthorized, "streams_open": self.streams_open,
                "streams_completed": self.streams_completed, "streams_cancelled": self.streams_cancelled,
                "foreign": self.foreign, "foreign_details": list(self.foreign_details)}


class _State:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.minter = Minter(config.secret)
        self.stats = _Stats()
        self.last: dict[str, Any] = {"headers": {}, "body": None, "query": ""}
        self.release = asyncio.Event()
        self.release_gen = 0  # a release frees every held stream that began before it
        self.holding = 0
        self.fault_counts: Counter[tuple[str, int, str]] = Counter()
        self.oracle = ConversationOracle()  # kept across /_sim/reset: minted tokens stay minted
        self.gemini_vertex: Any = None  # the Vertex Gemini handler (``gemini_routes``), behind ``cloud``'s bearer check

    async def take(self, request: Request) -> Any:
        """Count an incoming request and keep it as ``last`` (``/_sim/last``); its JSON body (None: not JSON, which
        the profile's own rules answer)."""
        self.stats.requests += 1
        raw = await request.body()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        self.last = {"headers": {k.lower(): v for k, v in request.headers.items()}, "body": body,
                     "query": request.url.query, "path": request.url.path, "raw": raw}
        return body

    def observe(self, flavor: str, conversation: str | None, body: Any) -> None:
        """Show an incoming request of ``conversation`` (None: no marker, not checked) to the oracle;
        count it in ``stats.foreign`` if it carries another conversation's content."""
        found = self.oracle.scan(conversation, body)
        if not found:
            return
        self.stats.foreign += 1
        details = self.stats.foreign_details
        for other, kind in found:
            if len(details) >= FOREIGN_DETAILS:
                break
            details.append({"flavor": flavor, "conversation": str(conversation), "foreign": other, "kind": kind})

    def remember(self, conversation: str | None, tokens: list[tuple[str, str]]) -> None:
        """Tell the oracle which (kind, token) pairs were minted for ``conversation``."""
        for kind, token in tokens:
            self.oracle.remember(conversation, kind, token)

    def take_fault(self, fault: Fault | None, conversation: str, round_: int, times: int | None) -> str | None:
        """The kind of ``fault`` to inject now, or None: with ``[[sim:fault_times=N]]`` only the first N
        requests of a conversation and round get it. Counted in the stats."""
        if fault is None:
            return None
        if times is not None:
            key = (conversation, round_, fault.kind)
            if self.fault_counts[key] >= times:
                return None
            self.fault_counts[key] += 1
        self.stats.faults += 1
        return fault.kind


def _json(status: int, body: object, rid: str, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers={"request-id": rid, **(headers or {})},
                    media_type="application/json")


def _error(status: int, message: str, rid: str, error_type: str | None = None,
           headers: dict[str, str] | None = None) -> Response:
    return _json(status, anthropic_error_body(status, message, error_type, rid), rid, headers)


def _authorized(request: Request) -> bool:
    if request.headers.get("x-api-key", "").strip():
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())


def _betas(request: Request) -> frozenset[str]:
    return frozenset(b.strip() for value in request.headers.getlist("anthropic-beta")
                     for b in value.split(",") if b.strip())


def _conversation(body: Any) -> str | None:
    """The ``[[sim:conv=NAME]]`` of an Anthropic request body (any shape), or None."""
    return parse_scenario(first_user_text(body.get("messages"))).conv if isinstance(body, dict) else None


async def _read_json(request: Request) -> tuple[Any, str | None]:
    raw = await request.body()
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        return None, f"There was an error parsing the body of your request: {exc}"


def create_sim_app(config: SimConfig) -> Starlette:
    state = _State(config)

    async def messages(request: Request) -> Response:
        rid = new_id("req_01")
        state.stats.requests += 1
        body, json_error = await _read_json(request)
        state.last = {"headers": {k.lower(): v for k, v in request.headers.items()}, "body": body,
                      "query": request.url.query, "raw": await request.body(), "path": request.url.path,
                      "peer_port": request.client.port if request.client else None}
        conversation = _conversation(body)
        state.observe("anthropic", conversation, body)
        if not _authorized(request):
            state.stats.unauthorized += 1
            return _error(401, "x-api-key header is required", rid, "authentication_error")
        if json_error is not None:
            state.stats.rejections["0"] += 1
            return _error(400, json_error, rid, "invalid_request_error")
        judged = judge(state, body, _betas(request))
        if not isinstance(judged, Reply):
            return _error(judged[0], judged[1], rid, judged[2])
        return await _respond(state, judged, bool(body.get("stream")), rid)

    async def count_tokens(request: Request) -> Response:
        rid = new_id("req_01")
        if not _authorized(request):
            return _error(401, "x-api-key header is required", rid, "authentication_error")
        body, json_error = await _read_json(request)
        state.observe("anthropic", _conversation(body), body)
        if json_error is not None:
            return _error(400, json_error, rid, "invalid_request_error")
        rejected = _count_tokens_rejection(state, body, _betas(request))
        if rejected is not None:
            state.stats.rejections[str(rejected[0])] += 1
            return _error(400, rejected[1], rid, "invalid_request_error")
        return _json(200, {"input_tokens": estimate_tokens(body)}, rid)

    async def models(request: Request) -> Response:
        """Anthropic's ``GET /v1/models`` (one page: the simulator's models)."""
        if not _authorized(request):
            return _error(401, "x-api-key header is required", new_id("req_01"), "authentication_error")
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-11-24T00:00:00Z"}
                for m in SIM_ANTHROPIC_MODELS]
        return _json(200, {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]},
                     new_id("req_01"))

    async def stats(request: Request) -> Response:
        return _json(200, state.stats.as_json(), new_id("req_01"))

    async def reset(request: Request) -> Response:
        state.stats = _Stats()
        state.fault_counts.clear()
        state.last = {"headers": {}, "body": None, "query": ""}  # (/_sim/last must not show the request before)
        return _json(200, state.stats.as_json(), new_id("req_01"))

    async def last(request: Request) -> Response:
        """The last request as received; its exact body bytes as ``raw_sha256`` (and as text, ``raw``, with
        ``?raw=1``)."""
        last = dict(state.last)
        raw = last.pop("raw", None)
        if isinstance(raw, bytes):
            last["raw_sha256"] = hashlib.sha256(raw).hexdigest()
            if request.query_params.get("raw") == "1":
                last["raw"] = raw.decode(errors="replace")
        return _json(200, last, new_id("req_01"))

    async def release(request: Request) -> Response:
        released = state.holding
        state.release_gen += 1
        state.release.set()
        state.release = asyncio.Event()
        return _json(200, {"released": released}, new_id("req_01"))

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return _error(status, exc.detail if isinstance(exc, HTTPException) else "Internal server error",
                      new_id("req_01"), "not_found_error" if status == 404 else None)

    routes = [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/_sim/stats", stats, methods=["GET"]),
        Route("/_sim/reset", reset, methods=["POST"]),
        Route("/_sim/last", last, methods=["GET"]),
        Route("/_sim/release", release, methods=["POST"]),
        *gemini_routes(state),
        *cloud_routes(state, judge, state.gemini_vertex, _count_tokens_rejection),
        *compat_routes(state),
        *responses_routes(state),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


def judge(state: _State, body: Any, betas: frozenset[str]) -> Reply | tuple[int, str, str | None]:
    """A Messages request body (any platform's, as the Messages API reads it) judged by every rule: the scripted
    reply, or the rejection (status, message, error type), counted in the stats."""
    config = state.config
    model = body.get("model") if isinstance(body, dict) else None
    bound = isinstance(model, str) and is_bound(model, config.bound_models)
    violation = check_messages_request(body, betas=betas, minter=state.minter,
                                       strict_older_turns=config.strict_older_turns, bound=bound)
    if violation is not None:
        state.stats.rejections[str(violation.rule)] += 1
        return violation.status, violation.message, violation.error_type
    edits = context.check_request(body, betas, state.minter, thinking_mode(body, bound) is not None)
    if edits is not None:
        state.stats.rejections[str(edits.rule)] += 1
        return 400, edits.message, "invalid_request_error"
    outcome = (check_binding(body, minter=state.minter, betas=betas, enforced=config.binding_enforced)
               if bound else None)
    if isinstance(outcome, Rejection):
        state.stats.rejections[str(outcome.rule)] += 1
        return 400, outcome.message, "invalid_request_error"
    state.stats.accepted += 1
    seen = {**body, "messages": context.cut_at_compaction(body["messages"])}
    plan = context.plan(body, state.minter, estimate_tokens(seen))
    reply = plan_reply(body, betas=betas, minter=state.minter, interleaved=config.interleaved, bound=outcome,
                       context=plan, default_tools=config.tools)
    state.remember(_conversation(body), minted_tokens(reply.message))
    return reply


def _count_tokens_rejection(state: _State, body: Any, betas: frozenset[str]) -> tuple[int, str] | None:
    """(rule, message) of the 400 count_tokens answers: it validates the body as ``/v1/messages`` does, without
    ``max_tokens`` and with only its own fields (``thinkgate_sim.count_tokens``); on a bound model it "answers the same
    400" as the request would, the binding's included (docs/upstream-rules.md, "thinking-block binding")."""
    bound = isinstance(body, dict) and isinstance(body.get("model"), str) and is_bound(
        body["model"], state.config.bound_models)
    violation = check_messages_request(body, betas=betas, minter=state.minter, bound=bound, count_tokens=True)
    if violation is not None:
        return violation.rule, violation.message
    edits = context.check_request(body, betas, state.minter, thinking_mode(body, bound) is not None)
    if edits is not None:
        return edits.rule, edits.message
    outcome = check_binding(body, minter=state.minter, betas=betas,
                            enforced=state.config.binding_enforced) if bound else None
    return (outcome.rule, outcome.message) if isinstance(outcome, Rejection) else None


def _active_fault(state: _State, reply: Reply) -> str | None:
    # (a named conversation's faults are counted across profiles: a request that falls back to another one is the
    # same conversation's)
    scenario = reply.scenario
    return state.take_fault(reply.fault, scenario.conv or reply.conversation, reply.round, scenario.fault_times)


async def _respond(state: _State, reply: Reply, stream: bool, rid: str) -> Response:
    kind = _active_fault(state, reply)
    fault_value = reply.fault.value if reply.fault else 0
    if kind == "slow":
        await asyncio.sleep(fault_value / 1000)
    if kind == "overloaded" or (kind == "midstream" and not stream):
        return _json(529, {**_OVERLOADED, "request_id": rid}, rid)
    if kind == "ratelimit":
        return _error(429, "This request would exceed the rate limit for your organization. "
                           "Please try again later.", rid, "rate_limit_error",
                      {"retry-after": str(fault_value)})
    if not stream:
        body = orjson.dumps(reply.message)
        if kind == "drop":
            return DroppedResponse(200, {"request-id": rid, "content-type": "application/json",
                                         "content-length": str(len(body))}, [body[:len(body) // 2]])
        return Response(body, 200, headers={"request-id": rid}, media_type="application/json")
    raw = stream_events(reply.message)
    first_delta = first_delta_position(raw)
    events = [encode_event(name, data) for name, data in raw]
    sse_headers = {"request-id": rid, "cache-control": "no-cache", "content-type": "text/event-stream"}
    if kind == "drop":
        return DroppedResponse(200, sse_headers, events[:max(first_delta + 2, len(events) // 2)], delay=0.005)
    if kind == "midstream":
        events = [*events[:max(first_delta + 2, len(events) // 2)], encode_event("error", _OVERLOADED)]
    hold_at = first_delta if reply.scenario.hold else -1
    return StreamingResponse(pump(state, events, hold_at, state.release_gen), headers=sse_headers)


def run_sim(host: str, port: int, config: SimConfig) -> None:
    """Serve the simulator with hypercorn (asyncio, uvloop when available) until SIGINT/SIGTERM."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    hconfig = Config()
    hconfig.bind = [f"{host}:{port}"]
    hconfig.accesslog = None
    # hypercorn's own "-" error log adds a handler of its own and still propagates to the root logger's: every
    # line (its "Running on ...") came out twice. Through the logger alone, it comes out once, as configured.
    hconfig.errorlog = logging.getLogger("hypercorn.error")
    hconfig.graceful_timeout = 0.5
    app = create_sim_app(config)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await serve(app, hconfig, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())

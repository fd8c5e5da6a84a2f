"""The simulator's Gemini dialect: ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent`` (``?alt=sse``), AI Studio profile at ``/v1beta``, Vertex
profile (its error form, only one bypass value) at ``/vertex/v1beta``.

Validation is ``gemini_rules`` (rules 16-18). Replies are scripted by the same markers
as the Anthropic dialect (``[[sim:tools=N]]``, ``[[sim:parallel=K]]``,
``[[sim:fault=overloaded|midstream|slow:MS|drop|ratelimit:S]]``, ``[[sim:fault_round=R]]``,
``[[sim:fault_times=N]]``) in the first user content: the round is the number of ``model`` contents
with function calls in the current turn. ``ratelimit:S`` answers 429 as Google does, with no
``retry-after`` header: AI Studio says when to retry in the body (``google.rpc.RetryInfo``
``retryDelay``, and in the message), Vertex does not. With
``thinkingConfig.includeThoughts`` an answer starts with a ``thought: true`` part.
Tool rounds: a text part, then K ``functionCall`` parts (call n to the n-th declared
function, modulo their number); only the first carries a
minted ``thoughtSignature`` (rule 16's parallel rule). The final answer's text part is
signed; streamed (rule 19) it arrives in chunks, then ``{"text": "", "thoughtSignature"}``
with the ``finishReason``; every chunk repeats ``responseId``. Errors use Google's
envelope ``{"error": {"code", "message", "status"}}``. Field names are accepted in both
JSON forms the real API takes (``includeThoughts`` / ``include_thoughts``).
With ``[[sim:conv=NAME]]`` the thought text names the conversation, and every request is shown
to the app's cross-conversation oracle (thought texts and thoughtSignatures are remembered).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from thinkgate_sim.deep_json import estimate_tokens
from thinkgate_sim.dropped import DroppedResponse
from thinkgate_sim.gemini_rules import (
    AISTUDIO,
    VERTEX,
    ThoughtSigner,
    calls_of,
    check_request,
    opens_turn,
    thinking_config,
    turn_start,
)
from thinkgate_sim.render import split_awkward, split_words
from thinkgate_sim.scenarios import new_id, parse_scenario, pick_tool, scenario_of, thinking_text, tool_input

STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
          429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
_NO_KEY = ("Method doesn't allow unregistered callers (callers without established identity). Please use API Key "
           "or other form of API consumer identity to call this API.")
DEFAULT_FUNCTION = "get_weather"


def google_error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": STATUS.get(code, "INTERNAL")}}


def rate_limited(profile: str, model: str, seconds: int) -> dict[str, Any]:
    """Google's 429 body for ``profile`` (shapes as the APIs send them; the quota named is an example)."""
    if profile == VERTEX:
        return google_error(429, "Resource exhausted. Please try again later. Please refer to https://cloud.google."
                                 "com/vertex-ai/generative-ai/docs/error-code-429 for more details.")
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    body = google_error(429, "You exceeded your current quota, please check your plan and billing details. For more "
                             "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. "
                             "To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. \n"
                             f"* Quota exceeded for metric: {metric}, limit: 10, model: {model}\n"
                             f"Please retry in {seconds}s.")
    body["error"]["details"] = [
        {"@type": "type.googleapis.com/google.rpc.Help", "links": [
            {"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
            {"quotaMetric": metric, "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
             "quotaDimensions": {"location": "global", "model": model}, "quotaValue": "10"}]},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds}s"}]
    return body


def first_user_text(contents: Any) -> str:
    """Text of the first user content (any shape: a malformed body gives ``""``)."""
    for c in contents if isinstance(contents, list) else ():
        if isinstance(c, dict) and c.get("role", "user") == "user":
            parts = c.get("parts") or ()
            return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)) \
                if isinstance(parts, list | tuple) else ""
    return ""


def conversation_of(body: Any) -> str | None:
    """The ``[[sim:conv=NAME]]`` of a request body (any shape), or None."""
    return parse_scenario(first_user_text(body.get("contents"))).conv if isinstance(body, dict) else None


def minted_tokens(parts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, token) for the thought texts and thoughtSignatures in ``parts`` (for the oracle)."""
    out: list[tuple[str, str]] = []
    for p in parts:
        if p.get("thought"):
            out.append(("thinking", p["text"]))
        if "thoughtSignature" in p:
            out.append(("thought_signature", p["thoughtSignature"]))
    return out


def _functions(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Declared functions (name, schema); parallel call n uses function n modulo their number."""
    out: list[tuple[str, dict[str, Any]]] = []
    for tool in body.get("tools") or ():
        decls = (tool.get("functionDeclarations") or tool.get("function_declarations") or ()) \
            if isinstance(tool, dict) else ()
        for decl in decls:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                schema = decl.get("parameters") or decl.get("parametersJsonSchema") \
                    or decl.get("parameters_json_schema")
                out.append((decl["name"], schema if isinstance(schema, dict) else {}))
    return out or [(DEFAULT_FUNCTION, {})]


def tool_round(contents: list[dict[str, Any]]) -> int:
    """The round of the current turn: its ``model`` contents with function calls so far."""
    return sum(1 for c in contents[turn_start(contents):] if c.get("role") == "model" and calls_of(c))


def plan_parts(body: dict[str, Any], model: str, signer: ThoughtSigner, rid: str,
               default_tools: int = 0) -> list[dict[str, Any]]:
    """The answer's parts (signatures minted) for a request that passed validation; ``default_tools``:
    ``scenarios.scenario_of``."""
    contents: list[dict[str, Any]] = body["contents"]
    scenario = scenario_of(body, first_user_text(contents), default_tools)
    round_ = tool_round(contents)
    turn = sum(1 for c in contents if opens_turn(c))
    cfg = thinking_config(body) or {}
    key = hashlib.sha256(orjson.dumps(body.get("systemInstruction")) + first_user_text(contents).encode()).hexdigest()
    parts: list[dict[str, Any]] = []
    if cfg.get("includeThoughts") or cfg.get("include_thoughts"):
        parts.append({"text": thinking_text(f"gemini/{key}/{turn}/{round_}", scenario.conv), "thought": True})
    if round_ < scenario.tools:
        functions = _functions(body)
        named = pick_tool(functions, scenario.tool)
        parts.append({"text": f"Round {round_ + 1} of {scenario.tools}: {scenario.parallel} call(s)."})
        for call in range(scenario.parallel):
            # the named tool for every call; without one (or not offered), call n uses function n modulo their number
            name, schema = named if named and named[0] == scenario.tool else functions[call % len(functions)]
            args = tool_input(schema, round_, call, scenario.arg)
            part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
            if call == 0:
                part["thoughtSignature"] = signer.mint(model, rid, len(parts), part)
            parts.append(part)
    else:
        text = (f"Final answer after {round_} tool round{'s' if round_ != 1 else ''} (conversation {key[:8]}). "
                "Everything checked out.")
        part = {"text": text}
        part["thoughtSignature"] = signer.mint(model, rid, len(parts), part)
        parts.append(part)
    return parts


def response_body(parts: list[dict[str, Any]], model: str, rid: str, body: dict[str, Any]) -> dict[str, Any]:
    thoughts = sum(len(p["text"]) // 4 for p in parts if p.get("thought"))
    out = max(1, estimate_tokens(parts) - thoughts)
    prompt = estimate_tokens(body)
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": out,
                              "thoughtsTokenCount": thoughts, "totalTokenCount": prompt + out + thoughts},
            "modelVersion": model, "responseId": rid}


def stream_chunks(full: dict[str, Any], signer: ThoughtSigner, model: str) -> list[dict[str, Any]]:
    """Rule 19: thought and text in pieces, each call whole; a text answer's signature in a final
    empty-text part with the ``finishReason``; ``responseId`` on every chunk."""
    rid = full["responseId"]
    parts: list[dict[str, Any]] = full["candidates"][0]["content"]["parts"]
    pieces: list[dict[str, Any]] = []
    for p in parts:
        if "functionCall" in p:
            pieces.append(p)
        elif p.get("thought"):
            pieces += [{"text": t, "thought": True} for t in split_awkward(p["text"], 40)]
        else:
            pieces += [{"text": t} for t in split_words(p["text"])]
            if "thoughtSignature" in p:
                last = {"text": ""}
                last["thoughtSignature"] = signer.mint(model, rid, len(parts), last)
                pieces.append(last)
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}],
               "modelVersion": model, "responseId": rid} for piece in pieces]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    chunks[-1]["usageMetadata"] = full["usageMetadata"]
    return chunks


def _authorized(request: Request) -> bool:
    if request.headers.get("x-goog-api-key", "").strip() or request.query_params.get("key", "").strip():
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())


def _json(status: int, body: object) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


SIM_GEMINI_MODELS = ("gemini-3-pro-preview", "gemini-3-flash-preview", "gemini-2.5-pro")


def gemini_routes(state: Any) -> list[Route]:
    """Routes sharing the simulator's stats (``state.stats``, ``state.last``) and secret."""
    signer = ThoughtSigner(state.config.secret)
    state.gemini_signer = signer

    def handler(profile: str) -> Callable[[Request], Any]:
        async def generate(request: Request) -> Response:
            model, _, action = request.path_params["rest"].rpartition(":")
            body = await state.take(request)
            conv = conversation_of(body)
            state.observe(f"gemini-{profile}", conv, body)
            if not _authorized(request):
                state.stats.unauthorized += 1
                return _json(403, google_error(403, _NO_KEY))
            if action not in ("generateContent", "streamGenerateContent") or not model:
                return _json(404, google_error(404, f"models/{request.path_params['rest']} is not found"))
            violation = check_request(body, model, signer, profile)
            if violation is not None:
                state.stats.rejections[f"gemini-{violation.rule}"] += 1
                return _json(violation.status, google_error(violation.status, violation.message))
            state.stats.accepted += 1
            contents = body["contents"]
            scenario = parse_scenario(first_user_text(contents))
            round_ = tool_round(contents)
            fault = scenario.fault if scenario.fault_round in (None, round_) else None
            conversation = hashlib.sha256(first_user_text(contents).encode()).hexdigest()
            kind = state.take_fault(fault, scenario.conv or conversation, round_, scenario.fault_times)
            if kind == "slow":
                await asyncio.sleep(scenario.fault.value / 1000)  # type: ignore[union-attr]
            if kind == "overloaded" or (kind == "midstream" and action == "generateContent"):
                return _json(503, google_error(503, "The model is overloaded. Please try again later."))
            if kind == "ratelimit":
                return _json(429, rate_limited(profile, model, scenario.fault.value))  # type: ignore[union-attr]
            rid = new_id("")[:22]
            full = response_body(plan_parts(body, model, signer, rid, state.config.tools), model, rid, body)
            state.remember(conv, minted_tokens(full["candidates"][0]["content"]["parts"]))
            if action == "generateContent":
                if kind == "drop":
                    raw_full = orjson.dumps(full)
                    return DroppedResponse(200, {"content-type": "application/json",
                                                 "content-length": str(len(raw_full))}, [raw_full[:len(raw_full) // 2]])
                return _json(200, full)
            chunks = stream_chunks(full, signer, model)
            state.remember(conv, [t for c in chunks for t in minted_tokens(c["candidates"][0]["content"]["parts"])
                                  if t[0] == "thought_signature"])  # not the thought text's pieces
            frames = [b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks]
            if kind == "drop":
                return DroppedResponse(200, {"content-type": "text/event-stream"}, frames[:max(1, len(frames) // 2)],
                                       delay=0.005)
            if kind == "midstream":
                frames = [*frames[:len(frames) // 2],
                          b"data: " + orjson.dumps(google_error(503, "The model is overloaded.")) + b"\r\n\r\n"]

            async def pump() -> Any:
                for f in frames:
                    yield f
            return StreamingResponse(pump(), media_type="text/event-stream")
        return generate

    async def list_models(request: Request) -> Response:
        """``GET /v1beta/models``: the simulator's Gemini models, in the API's list shape."""
        if not _authorized(request):
            return _json(403, google_error(403, _NO_KEY))
        return _json(200, {"models": [{"name": f"models/{m}", "version": "001", "displayName": m,
                                       "supportedGenerationMethods": ["generateContent", "countTokens"]}
                                      for m in SIM_GEMINI_MODELS]})

    state.gemini_vertex = handler(VERTEX)  # (also behind Vertex AI's own path and bearer check: ``cloud``)
    return [Route("/v1beta/models", list_models, methods=["GET"]),
            Route("/v1beta/models/{rest:path}", handler(AISTUDIO), methods=["POST"]),
            Route("/vertex/v1beta/models/{rest:path}", handler(VERTEX), methods=["POST"])]

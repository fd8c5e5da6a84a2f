"""The simulator's cloud platforms: Claude on Amazon Bedrock (InvokeModel), Claude and Gemini on Vertex AI, each
enforcing the Messages API's (or Gemini's) rules through the same judges as the first-party profiles, with the
platform's own framing, credentials and error shapes.

* ``POST /model/{modelId}/invoke`` and ``/invoke-with-response-stream``: SigV4 (``sigv4``, test key
  ``AKIDTHINKGATESIM``), the body without ``model``/``stream`` and with ``anthropic_version: bedrock-2023-05-31``;
  betas in the body's ``anthropic_beta``; a broken Claude rule is 400 ``{"message": "The model returned the following
  errors: <the Anthropic message>"}`` with ``x-amzn-ErrorType: ValidationException:...``; the stream is event-stream
  framing (``eventstream``) of ``chunk`` events carrying base64 Anthropic events.
* ``POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{model}:rawPredict`` / ``:streamRawPredict``:
  a bearer token the simulator issued (``gcp_auth``, ``POST /token``), the body without ``model`` and with
  ``anthropic_version: vertex-2023-10-16``; Anthropic's answers and error envelope; Google's envelope for a 401.
* ``.../publishers/google/models/{model}:generateContent`` / ``:streamGenerateContent``: the Gemini Vertex profile
  (``thinkgate_sim.gemini``) behind the same bearer check.

Faults (``[[sim:fault=overloaded|ratelimit:S|midstream|slow:MS]]``) and ``[[sim:hold]]`` work as on the Messages
profile, in each platform's own shape. Sources of every text: docs/upstream-rules.md, "Cloud platforms".
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from thinkgate_sim import eventstream, sigv4
from thinkgate_sim.convo import first_user_text
from thinkgate_sim.deep_json import estimate_tokens
from thinkgate_sim.faults import pump
from thinkgate_sim.gcp_auth import UNAUTHENTICATED, Tokens
from thinkgate_sim.render import first_delta_position, stream_events
from thinkgate_sim.scenarios import Reply, new_id, parse_scenario

BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"
API_2026 = "2026-10-21"
_NEWER = re.compile(r"claude-(opus-4-[7-9]|(opus|sonnet|haiku)-[5-9]|fable|mythos)")
VALIDATION = "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"
MODEL_ERRORS = "The model returned the following errors: "
MALFORMED = "Malformed input request: {problems}, please reformat your input and try again."
_BEDROCK_ID = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.|-v\d+(?::\d+)?$")
Judge = Callable[[Any, Any, frozenset[str]], "Reply | tuple[int, str, str | None]"]


def claude_name(model_id: str) -> str:
    """``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` -> ``claude-sonnet-4-5-20250929`` (what the rules read)."""
    return _BEDROCK_ID.sub("", model_id)


def _conversation(body: Any) -> str | None:
    return parse_scenario(first_user_text(body.get("messages"))).conv if isinstance(body, dict) else None


def _bedrock_error(status: int, exception: str, message: str) -> Response:
    return Response(orjson.dumps({"message": message}), status, media_type="application/json",
                    headers={"x-amzn-errortype": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/",
                             "x-amzn-requestid": new_id("")[:36]})


def _google_error(status: int, message: str, code: str) -> Response:
    return Response(orjson.dumps({"error": {"code": status, "message": message, "status": code}}), status,
                    media_type="application/json")


def _anthropic_error(status: int, message: str, etype: str | None) -> Response:
    rid = new_id("req_vrtx_")
    return Response(orjson.dumps({"type": "error", "error": {"type": etype or "invalid_request_error",
                                                             "message": message}, "request_id": rid}),
                    status, media_type="application/json", headers={"request-id": rid})


def versions(platform_version: str, model: str) -> tuple[str, ...]:
    """The body's ``anthropic_version`` values a platform takes for ``model``: its own, and ``2026-10-21`` (the
    official SDKs' default) on Google Cloud for every Claude model, on Bedrock for Claude 4.7 and later."""
    if platform_version == VERTEX_VERSION or _NEWER.search(model):
        return platform_version, API_2026
    return (platform_version,)


def _malformed(body: Any, versions: tuple[str, ...], extraneous: tuple[str, ...]) -> str | None:
    """What InvokeModel's schema check (or Vertex's) says of a body that is not the platform's Messages body."""
    if not isinstance(body, dict):
        return "#: expected type: JSONObject, found: " + type(body).__name__
    problems = [f"#: extraneous key [{k}] is not permitted" for k in extraneous if k in body]
    if "anthropic_version" not in body:
        problems.append("#: required key [anthropic_version] not found")
    elif body["anthropic_version"] not in versions:
        problems.append(f"#/anthropic_version: {body['anthropic_version']} is not a valid enum value")
    return "".join(problems) or None


Count = Callable[[Any, Any, frozenset[str]], "tuple[int, str] | None"]  # the count_tokens judge: (rule, message)


def cloud_routes(state: Any, judge: Judge, gemini_vertex: Callable[[Request], Any], count: Count) -> list[Route]:
    tokens = state.gcp_tokens = Tokens()

    async def invoke(request: Request) -> Response:
        body = await state.take(request)
        state.observe("bedrock", _conversation(body), body)
        model, _, action = request.path_params["rest"].rpartition("/")
        refused = sigv4.verify(request.method, request.scope.get("raw_path", b"").decode("latin-1").split("?")[0],
                               request.url.query, {k.lower(): v for k, v in request.headers.items()},
                               await request.body())
        if refused is not None:
            state.stats.unauthorized += 1
            return _bedrock_error(403, *refused)
        if action in ("converse", "converse-stream") and model:
            return await _converse(state, judge, model, body, action == "converse-stream")
        if action == "count-tokens" and model:
            return _bedrock_count(state, count, model, body)
        if action not in ("invoke", "invoke-with-response-stream") or not model:
            return _bedrock_error(404, "ResourceNotFoundException", "The requested resource could not be found.")
        problem = _malformed(body, versions(BEDROCK_VERSION, model), ("model", "stream"))
        if problem is not None:
            state.stats.rejections["bedrock-schema"] += 1
            return _bedrock_error(400, "ValidationException", MALFORMED.format(problems=problem))
        betas = frozenset(b for b in body.get("anthropic_beta") or () if isinstance(b, str))
        seen = {k: v for k, v in body.items() if k not in ("anthropic_version", "anthropic_beta")}
        judged = judge(state, {**seen, "model": claude_name(model)}, betas)
        if not isinstance(judged, Reply):
            return _bedrock_error(judged[0], "ValidationException" if judged[0] == 400 else "ModelErrorException",
                                  MODEL_ERRORS + judged[1])
        return await _bedrock_answer(state, judged, action != "invoke")

    async def vertex_claude(request: Request) -> Response:
        body = await state.take(request)
        state.observe("vertex-anthropic", _conversation(body), body)
        if not tokens.valid(request):
            state.stats.unauthorized += 1
            return _google_error(401, UNAUTHENTICATED, "UNAUTHENTICATED")
        model, _, action = request.path_params["rest"].rpartition(":")
        if model == "count-tokens" and action == "rawPredict":
            return _vertex_count(state, count, body, request)
        if action not in ("rawPredict", "streamRawPredict") or not model:
            return _google_error(404, f"Publisher Model `{model}` was not found or your project does not have "
                                      "access to it.", "NOT_FOUND")
        problem = _malformed(body, versions(VERTEX_VERSION, model), ("model",))
        if problem is not None:
            state.stats.rejections["vertex-schema"] += 1
            return _anthropic_error(400, problem.removeprefix("#: ").removeprefix("#/"), "invalid_request_error")
        betas = frozenset(b.strip() for v in request.headers.getlist("anthropic-beta") for b in v.split(",")
                          if b.strip())
        judged = judge(state, {**{k: v for k, v in body.items() if k != "anthropic_version"}, "model": model}, betas)
        if not isinstance(judged, Reply):
            return _anthropic_error(*judged)
        return await _vertex_answer(state, judged, action == "streamRawPredict")

    async def vertex_gemini(request: Request) -> Any:
        if not tokens.valid(request):
            await state.take(request)
            state.stats.unauthorized += 1
            return _google_error(401, UNAUTHENTICATED, "UNAUTHENTICATED")
        return await gemini_vertex(request)

    vertex = "/v1/projects/{project}/locations/{location}/publishers"
    return [Route("/model/{rest:path}", invoke, methods=["POST"]),
            Route(vertex + "/anthropic/models/{rest:path}", vertex_claude, methods=["POST"]),
            Route(vertex + "/google/models/{rest:path}", vertex_gemini, methods=["POST"]),
            Route("/token", tokens.token, methods=["POST"])]


def _bedrock_count(state: Any, count: Count, model: str, body: Any) -> Response:
    """CountTokens (``POST /model/{modelId}/count-tokens``): an InvokeModel body (base64) or a Converse input, judged
    as count_tokens judges it; ``{"inputTokens": N}``."""
    given = (body or {}).get("input") if isinstance(body, dict) else None
    given = given if isinstance(given, dict) else {}
    if isinstance(given.get("invokeModel"), dict):
        try:
            request = orjson.loads(base64.b64decode(given["invokeModel"].get("body", ""), validate=True))
        except (ValueError, orjson.JSONDecodeError):
            request = None
        problem = _malformed(request, versions(BEDROCK_VERSION, model), ("model", "stream"))
        if problem is not None:
            return _bedrock_error(400, "ValidationException", MALFORMED.format(problems=problem))
        betas = frozenset(b for b in request.get("anthropic_beta") or () if isinstance(b, str))
        request = {k: v for k, v in request.items() if k not in ("anthropic_version", "anthropic_beta", "max_tokens")}
    elif isinstance(given.get("converse"), dict):
        request, betas = converse_as_messages(given["converse"], claude_name(model))
        request.pop("max_tokens", None)
    else:
        return _bedrock_error(400, "ValidationException", "Malformed input request: #: required key [input] not "
                                                          "found, please reformat your input and try again.")
    request = {**request, "model": claude_name(model)}
    rejected = count(state, request, betas)
    if rejected is not None:
        state.stats.rejections[str(rejected[0])] += 1
        return _bedrock_error(400, "ValidationException", MODEL_ERRORS + rejected[1])
    return Response(orjson.dumps({"inputTokens": estimate_tokens(request)}), 200, media_type="application/json")


def _vertex_count(state: Any, count: Count, body: Any, request: Request) -> Response:
    """Vertex's ``count-tokens:rawPredict``: the model in the body; ``{"input_tokens": N}``."""
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str):
        return _anthropic_error(400, "model: Field required", "invalid_request_error")
    problem = _malformed({k: v for k, v in body.items() if k != "model"}, versions(VERTEX_VERSION, model), ())
    if problem is not None:
        return _anthropic_error(400, problem.removeprefix("#: ").removeprefix("#/"), "invalid_request_error")
    betas = frozenset(b.strip() for v in request.headers.getlist("anthropic-beta") for b in v.split(",") if b.strip())
    seen = {k: v for k, v in body.items() if k != "anthropic_version"}
    rejected = count(state, seen, betas)
    if rejected is not None:
        state.stats.rejections[str(rejected[0])] += 1
        return _anthropic_error(400, rejected[1], "invalid_request_error")
    return Response(orjson.dumps({"input_tokens": estimate_tokens(seen)}), 200, media_type="application/json")


async def _fault(state: Any, reply: Reply) -> str | None:
    scenario = reply.scenario
    kind: str | None = state.take_fault(reply.fault, scenario.conv or reply.conversation, reply.round,
                                        scenario.fault_times)
    if kind == "slow" and reply.fault is not None:
        await asyncio.sleep(reply.fault.value / 1000)
    return kind


async def _bedrock_answer(state: Any, reply: Reply, stream: bool) -> Response:
    kind = await _fault(state, reply)
    if kind == "overloaded" or (kind == "midstream" and not stream):
        return _bedrock_error(503, "ServiceUnavailableException", "Bedrock is unable to process your request.")
    if kind == "ratelimit":
        return _bedrock_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
    if not stream:
        return Response(orjson.dumps(reply.message), 200, media_type="application/json",
                        headers={"x-amzn-bedrock-input-token-count": str(reply.message["usage"]["input_tokens"])})
    raw = stream_events(reply.message)
    frames = [eventstream.chunk(data) for _, data in raw]
    if kind == "midstream":
        frames = [*frames[:max(first_delta_position(raw) + 2, len(frames) // 2)],
                  eventstream.exception("throttlingException", "Too many requests, please wait before trying again.")]
    hold_at = first_delta_position(raw) if reply.scenario.hold else -1
    return StreamingResponse(pump(state, frames, hold_at, state.release_gen),
                             headers={"content-type": eventstream.MEDIA_TYPE})


async def _vertex_answer(state: Any, reply: Reply, stream: bool) -> Response:
    from thinkgate_sim.wire import encode_event

    kind = await _fault(state, reply)
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    if kind == "overloaded" or (kind == "midstream" and not stream):
        return Response(orjson.dumps(overloaded), 529, media_type="application/json")
    if kind == "ratelimit":
        return _google_error(429, "Resource exhausted. Please try again later. Please refer to https://cloud.google."
                                  "com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
                             "RESOURCE_EXHAUSTED")
    if not stream:
        return Response(orjson.dumps(reply.message), 200, media_type="application/json")
    raw = stream_events(reply.message)
    events = [encode_event(name, data) for name, data in raw]
    if kind == "midstream":
        events = [*events[:max(first_delta_position(raw) + 2, len(events) // 2)], encode_event("error", overloaded)]
    hold_at = first_delta_position(raw) if reply.scenario.hold else -1
    return StreamingResponse(pump(state, events, hold_at, state.release_gen),
                             headers={"content-type": "text/event-stream", "cache-control": "no-cache"})


# ------------------------------------------------------------------ Converse (the simulator's own reading of it)


def _to_messages_block(b: Any) -> dict[str, Any]:
    if not isinstance(b, dict):
        return {"type": "unknown"}
    if "text" in b:
        return {"type": "text", "text": b["text"]}
    if "reasoningContent" in b:
        rc = b["reasoningContent"]
        if "redactedContent" in rc:
            return {"type": "redacted_thinking", "data": base64.b64decode(rc["redactedContent"]).decode()}
        text = rc.get("reasoningText") or {}
        return {"type": "thinking", "thinking": text.get("text", ""), "signature": text.get("signature", "")}
    if "toolUse" in b:
        u = b["toolUse"]
        return {"type": "tool_use", "id": u.get("toolUseId"), "name": u.get("name"), "input": u.get("input", {})}
    if "toolResult" in b:
        r = b["toolResult"]
        parts = [{"type": "text", "text": p["text"] if "text" in p else orjson.dumps(p.get("json")).decode()}
                 for p in r.get("content") or () if isinstance(p, dict)]
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.get("toolUseId"), "content": parts}
        if r.get("status") == "error":
            out["is_error"] = True
        return out
    return {"type": next(iter(b), "unknown")}


def converse_as_messages(body: Any, model: str) -> tuple[dict[str, Any], frozenset[str]]:
    """A Converse request as the Messages request Claude is given (and its betas): Bedrock's own translation."""
    extra = dict(body.get("additionalModelRequestFields") or {})
    betas = frozenset(b for b in extra.pop("anthropic_beta", ()) if isinstance(b, str))
    inference = body.get("inferenceConfig") or {}
    out: dict[str, Any] = {"model": model, "max_tokens": inference.get("maxTokens", 4096),
                           "messages": [{"role": m.get("role"), "content": [_to_messages_block(b)
                                                                           for b in m.get("content") or ()]}
                                        for m in body.get("messages") or () if isinstance(m, dict)]}
    for name, key in (("temperature", "temperature"), ("topP", "top_p"), ("stopSequences", "stop_sequences")):
        if name in inference:
            out[key] = inference[name]
    if body.get("system"):
        out["system"] = [{"type": "text", "text": b.get("text", "")} for b in body["system"] if isinstance(b, dict)]
    tools = (body.get("toolConfig") or {}).get("tools") or ()
    if tools:
        out["tools"] = [{"name": t["toolSpec"]["name"], "description": t["toolSpec"].get("description", ""),
                         "input_schema": (t["toolSpec"].get("inputSchema") or {}).get("json", {})}
                        for t in tools if isinstance(t, dict) and "toolSpec" in t]
    return {**out, **extra}, betas


def _converse_block(b: dict[str, Any]) -> dict[str, Any]:
    t = b.get("type")
    if t == "thinking":
        return {"reasoningContent": {"reasoningText": {"text": b["thinking"], "signature": b["signature"]}}}
    if t == "redacted_thinking":
        return {"reasoningContent": {"redactedContent": base64.b64encode(b["data"].encode()).decode()}}
    if t == "tool_use":
        return {"toolUse": {"toolUseId": b["id"], "name": b["name"], "input": b["input"]}}
    return {"text": b.get("text", "")}


def _converse_usage(message: dict[str, Any]) -> dict[str, int]:
    u = message["usage"]
    return {"inputTokens": u["input_tokens"], "outputTokens": u["output_tokens"],
            "totalTokens": u["input_tokens"] + u["output_tokens"]}


def _converse_events(message: dict[str, Any]) -> list[bytes]:
    frames = [eventstream.event("messageStart", {"role": "assistant"})]
    for i, b in enumerate(message["content"]):
        t = b.get("type")
        if t == "tool_use":
            frames.append(eventstream.event("contentBlockStart", {"contentBlockIndex": i, "start": {
                "toolUse": {"toolUseId": b["id"], "name": b["name"]}}}))
            deltas = [{"toolUse": {"input": orjson.dumps(b["input"]).decode()}}]
        elif t == "thinking":
            deltas = [{"reasoningContent": {"text": b["thinking"]}},
                      {"reasoningContent": {"signature": b["signature"]}}]
        elif t == "redacted_thinking":
            deltas = [{"reasoningContent": {"redactedContent": base64.b64encode(b["data"].encode()).decode()}}]
        else:
            deltas = [{"text": b.get("text", "")}]
        frames += [eventstream.event("contentBlockDelta", {"contentBlockIndex": i, "delta": d}) for d in deltas]
        frames.append(eventstream.event("contentBlockStop", {"contentBlockIndex": i}))
    frames.append(eventstream.event("messageStop", {"stopReason": message["stop_reason"]}))
    frames.append(eventstream.event("metadata", {"usage": _converse_usage(message), "metrics": {"latencyMs": 1}}))
    return frames


async def _converse(state: Any, judge: Judge, model: str, body: Any, stream: bool) -> Response:
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        state.stats.rejections["converse-schema"] += 1
        return _bedrock_error(400, "ValidationException", "Malformed input request: #: required key [messages] "
                                                          "not found, please reformat your input and try again.")
    request, betas = converse_as_messages(body, claude_name(model))
    judged = judge(state, request, betas)
    if not isinstance(judged, Reply):
        return _bedrock_error(judged[0], "ValidationException" if judged[0] == 400 else "ModelErrorException",
                              MODEL_ERRORS + judged[1])
    kind = await _fault(state, judged)
    if kind == "overloaded" or (kind == "midstream" and not stream):
        return _bedrock_error(503, "ServiceUnavailableException", "Bedrock is unable to process your request.")
    if kind == "ratelimit":
        return _bedrock_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
    message = judged.message
    if not stream:
        return Response(orjson.dumps({"output": {"message": {"role": "assistant", "content": [
            _converse_block(b) for b in message["content"]]}}, "stopReason": message["stop_reason"],
            "usage": _converse_usage(message), "metrics": {"latencyMs": 1}}), 200, media_type="application/json")
    frames = _converse_events(message)
    if kind == "midstream":
        frames = [*frames[:len(frames) // 2],
                  eventstream.exception("throttlingException", "Too many requests, please wait before trying again.")]
    return StreamingResponse(pump(state, frames, 1 if judged.scenario.hold else -1, state.release_gen),
                             headers={"content-type": eventstream.MEDIA_TYPE})

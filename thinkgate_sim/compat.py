"""The simulator's OpenAI-compatible profiles (reference rules 20-23), one URL prefix each:

* ``/v1beta/openai/chat/completions``: Gemini's compatibility layer. The first tool call
  of an answer carries ``extra_content.google.thought_signature`` (a text answer carries
  it on the message); on replay rule 16/17's logic applies to the current turn's
  assistant messages (AI Studio text); errors are wrapped in an array (rule 20).
* ``/openrouter/api/v1/chat/completions``: Gemini behind OpenRouter. Answers carry
  ``reasoning`` and ``reasoning_details`` (a ``reasoning.text`` entry and a minted
  ``reasoning.encrypted`` entry, ``format: google-gemini-v1``); a current-turn
  assistant message whose (simulator-minted) tool calls come back without that entry
  gets OpenRouter's wrapped error (rule 21).
* ``/copilot/chat/completions``: Gemini behind Copilot. Message-level ``reasoning_text``
  and a minted ``reasoning_opaque``; dropping it fails with the Vertex text (rule 22);
  an assistant ``content: []`` is ``invalid request body``.
* ``/deepseek/v1/chat/completions``: ``reasoning_content`` on every answer; with ``tools`` in the
  request and thinking mode on (``thinking.type`` not ``disabled``), any earlier assistant message the
  simulator minted (its tool calls, or a text answer, which ends in a MAC tag) in a span between two user
  messages where the model called tools, that comes back without it, fails (rule 23; docs/upstream-rules.md).

An OpenRouter request for an Anthropic model (``anthropic/...``) is translated to Anthropic Messages and checked by the
strict Anthropic rules, their errors relayed as OpenRouter relays them (``openrouter_anthropic``); one whose assistant
``tool_calls`` repeat an
id gets Anthropic's duplicate-id error relayed the way OpenRouter relays provider errors (``RULE_DUPLICATE_TOOL_ID``;
the message/block index is where OpenRouter's translation would put the call, INFERRED). No other profile checks
ids: no source shows Gemini, Copilot or DeepSeek rejecting a repeated one.

Tool-call ids are minted (``call_`` + random + MAC) so the simulator knows its own calls;
opaque values are MACs over the model family and the message's tool-call ids.
Scripted by the usual markers in the first user message; streams end with ``[DONE]``.
With ``[[sim:conv=NAME]]`` the reasoning text names the conversation, and every request is shown to
the app's cross-conversation oracle (reasoning texts, opaque values, thought signatures and tool-call
ids are remembered).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from thinkgate_sim import faults, openrouter_anthropic
from thinkgate_sim.gemini import google_error
from thinkgate_sim.gemini_rules import AISTUDIO, BYPASS, VERTEX, ThoughtSigner, is_gemini3, rule16_message
from thinkgate_sim.render import split_awkward, split_words
from thinkgate_sim.rules import MSG_DUPLICATE_TOOL_ID, RULE_DUPLICATE_TOOL_ID
from thinkgate_sim.scenarios import parse_scenario, pick_tool, scenario_of, thinking_text, tool_input
from thinkgate_sim.signing import model_family

GEMINI_OPENAI, OPENROUTER, COPILOT, DEEPSEEK = "gemini_openai", "openrouter", "copilot", "deepseek"
# each profile's model list (``GET .../models``), as its real upstream lists models of these families
MODELS: dict[str, tuple[str, ...]] = {
    GEMINI_OPENAI: ("gemini-3-pro-preview", "gemini-3-flash-preview"),
    OPENROUTER: ("google/gemini-3-pro-preview", "anthropic/claude-sonnet-4.5", "anthropic/claude-opus-4.5",
                 "deepseek/deepseek-r1"),
    COPILOT: ("gpt-5", "gemini-3-pro-preview", "claude-sonnet-4.5"),
    DEEPSEEK: ("deepseek-chat", "deepseek-reasoner"),
}
FORMAT = "google-gemini-v1"
_OPENROUTER_RAW = ("Gemini models require OpenRouter reasoning details to be preserved in each request. Please refer "
                   "to our docs: https://openrouter.ai/docs/use-cases/reasoning-tokens#preserving-reasoning-blocks. "
                   "Upstream error: ")
_DEEPSEEK = "The `reasoning_content` in the thinking mode must be passed back to the API."


class Minter:
    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"thinkgate-sim-compat\0" + secret).digest()

    def call_id(self) -> str:
        token = secrets.token_hex(8)
        return f"call_{token}{self._mac(b'id', token.encode()).hex()[:8]}"

    def is_ours(self, tid: object) -> bool:
        if not isinstance(tid, str) or len(tid) != 29 or not tid.startswith("call_"):
            return False
        return hmac.compare_digest(tid[21:], self._mac(b"id", tid[5:21].encode()).hex()[:8])

    def tag_text(self, text: str) -> str:
        """``text`` with a MAC tag appended, so a text-only answer is recognised as minted when replayed."""
        return f"{text} [{self._mac(b'text', text.encode()).hex()[:8]}]"

    def is_ours_text(self, content: object) -> bool:
        """A message content (a string or a list of text parts) that is a tagged text answer."""
        if isinstance(content, list):
            content = "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str) or len(content) < 11 or content[-11:-9] != " [" or content[-1] != "]":
            return False
        return hmac.compare_digest(content[-9:-1], self._mac(b"text", content[:-11].encode()).hex()[:8])

    def opaque(self, profile: str, model: str, ids: list[str]) -> str:
        mac = self._mac(profile.encode(), model_family(model).encode() + b"\0" + "\0".join(ids).encode())
        return base64.b64encode(b"tgo1" + mac).decode()

    def _mac(self, kind: bytes, msg: bytes) -> bytes:
        return hmac.new(self._key, kind + b"\0" + msg, hashlib.sha256).digest()


def _oai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": "invalid_request_error"}}


def _calls(m: dict[str, Any]) -> list[dict[str, Any]]:
    calls = m.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _contents_index(messages: list[dict[str, Any]], i: int) -> int:
    """1-based index of message ``i`` among Gemini contents (system dropped, tool runs merged)."""
    k, prev = 0, None
    for j, m in enumerate(messages[:i + 1]):
        role = m.get("role")
        if role in ("system", "developer"):
            continue
        if not (role == "tool" and prev == "tool"):
            k += 1
        prev = role
        if j == i:
            return k
    return k


def _args(call: dict[str, Any]) -> Any:
    try:
        return orjson.loads((call.get("function") or {}).get("arguments") or "{}")
    except orjson.JSONDecodeError:
        return {}


def _anthropic_position(msgs: list[dict[str, Any]], i: int, n: int) -> tuple[int, int]:
    """(message, block) index of call ``n`` of assistant message ``i`` once translated to Anthropic
    (INFERRED): system/developer messages leave ``messages``, a run of user and tool messages becomes
    one user message, and an assistant message's text block comes before its ``tool_use`` blocks."""
    k, prev = -1, None
    for m in msgs[:i + 1]:
        role = "user" if m.get("role") == "tool" else m.get("role")
        if role in ("system", "developer"):
            continue
        if not (role == "user" and prev == "user"):
            k += 1
        prev = role
    content = msgs[i].get("content")
    has_text = bool(content) if isinstance(content, str) else \
        isinstance(content, list) and any(isinstance(p, dict) and p.get("text") for p in content)
    return k, n + int(has_text)


def _duplicate_tool_id(msgs: list[dict[str, Any]]) -> tuple[int, Any, str] | None:
    """Anthropic's duplicate ``tool_use`` id error for a repeated assistant tool-call id, as OpenRouter
    relays a provider's error."""
    seen: set[str] = set()
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        for n, c in enumerate(_calls(m)):
            tid = str(c.get("id"))
            if tid in seen:
                k, j = _anthropic_position(msgs, i, n)
                raw = orjson.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                               "message": MSG_DUPLICATE_TOOL_ID.format(i=k, j=j)}})
                return 400, {"error": {"message": "Provider returned error", "code": 400,
                                       "metadata": {"raw": raw.decode(), "provider_name": "Anthropic"}}}, \
                    str(RULE_DUPLICATE_TOOL_ID)
            seen.add(tid)
    return None


def _deepseek_thinking(body: dict[str, Any]) -> bool:
    """DeepSeek's thinking mode: on unless ``thinking.type`` is ``disabled`` (its default is on)."""
    t = body.get("thinking")
    return not (isinstance(t, dict) and t.get("type") == "disabled")


def _spans_with_calls(msgs: list[dict[str, Any]]) -> list[bool]:
    """Per message: whether it sits between two ``user`` messages (a span) in which an assistant message calls tools
    (DeepSeek: the reasoning of such a span's assistant messages must come back; that of other spans is ignored)."""
    out: list[bool] = []
    span: list[int] = []
    calls = False

    def close() -> None:
        for k in span:
            out[k] = calls
    for i, m in enumerate(msgs):
        out.append(False)
        if m.get("role") == "user":
            close()
            span, calls = [], False
            continue
        span.append(i)
        calls = calls or (m.get("role") == "assistant" and bool(_calls(m)))
    close()
    return out


def check(profile: str, body: Any, minter: Minter, signer: ThoughtSigner) -> tuple[int, Any, str] | None:
    """(status, error body, rule) for the first violation, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"] \
            or not isinstance(body.get("model"), str):
        err = _oai_error("messages: Field required")
        return 400, ([google_error(400, "Invalid JSON payload received.")] if profile == GEMINI_OPENAI else err), "0"
    msgs: list[dict[str, Any]] = [m for m in body["messages"] if isinstance(m, dict)]
    model: str = body["model"]
    tools = isinstance(body.get("tools"), list) and bool(body["tools"])
    start = max((i + 1 for i, m in enumerate(msgs) if m.get("role") == "user"), default=0)
    called = _spans_with_calls(msgs) if profile == DEEPSEEK and tools and _deepseek_thinking(body) else None
    if profile == OPENROUTER and model.startswith("anthropic/"):
        dup = _duplicate_tool_id(msgs)
        if dup is not None:
            return dup
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        if profile == COPILOT and m.get("content") == []:
            return 400, {"error": {"message": "invalid request body", "code": "invalid_request_body"}}, "22"
        calls = _calls(m)
        ids = [str(c.get("id")) for c in calls]
        ours = bool(calls) and all(minter.is_ours(t) for t in ids)
        name = str((calls[0].get("function") or {}).get("name")) if calls else ""
        k = _contents_index(msgs, i)
        if called is not None and called[i] and (ours or (not calls and minter.is_ours_text(m.get("content")))) \
                and not m.get("reasoning_content"):
            return 400, _oai_error(_DEEPSEEK), "23"
        if i < start or not calls:
            continue
        if profile == OPENROUTER and ours:
            want = minter.opaque(OPENROUTER, model, ids)
            details = listed if isinstance(listed := m.get("reasoning_details"), list) else []
            if not any(isinstance(d, dict) and d.get("type") == "reasoning.encrypted" and d.get("data") == want
                       and d.get("format") == FORMAT for d in details):
                raw = _OPENROUTER_RAW + orjson.dumps(google_error(400, rule16_message(VERTEX, name, k)),
                                                     option=orjson.OPT_INDENT_2).decode() + "\n"
                return 400, {"error": {"message": "Provider returned error", "code": 400,
                                       "metadata": {"raw": raw, "provider_name": "Google"}}}, "21"
        if profile == COPILOT and ours and m.get("reasoning_opaque") != minter.opaque(COPILOT, model, ids):
            return 400, _oai_error(rule16_message(VERTEX, name, k)), "22"
        if profile == GEMINI_OPENAI and is_gemini3(model):
            for n, c in enumerate(calls):
                extra = c.get("extra_content")
                sig = ((extra or {}).get("google") or {}).get("thought_signature") if isinstance(extra, dict) else None
                part = {"functionCall": {"name": (c.get("function") or {}).get("name"), "args": _args(c)}}
                if (n == 0 and not sig) or (sig and sig not in BYPASS[AISTUDIO] and not signer.verify(model, part,
                                                                                                        sig)):
                    fn = str((c.get("function") or {}).get("name"))
                    return 400, [google_error(400, rule16_message(AISTUDIO, fn, k))], "20"
    return None


def _first_user_text(msgs: Any) -> str:
    for m in msgs if isinstance(msgs, list) else ():
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


_RESULT, _CALLED = "[tool result]", "[called tool "  # how a gateway writes out a step (``toolchain.textualize``)


def _text_of(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, list):
        return "".join(p.get("text") or "" for p in c if isinstance(p, dict))
    return c if isinstance(c, str) else ""


def tool_round(msgs: list[dict[str, Any]]) -> int:
    """The scripted round: steps since the user's last own message (a step a gateway sent as text, its call and
    results written out, counts: the model saw it)."""
    start = max((i + 1 for i, m in enumerate(msgs) if m.get("role") == "user" and not _text_of(m).startswith(_RESULT)),
                default=0)
    return sum(1 for m in msgs[start:] if m.get("role") == "assistant" and (_calls(m) or _CALLED in _text_of(m)))


def plan(profile: str, body: dict[str, Any], minter: Minter, signer: ThoughtSigner,
         default_tools: int = 0) -> tuple[dict[str, Any], str]:
    """(the assistant message, finish_reason); ``default_tools``: ``scenarios.scenario_of``."""
    msgs: list[dict[str, Any]] = body["messages"]
    model: str = body["model"]
    scenario = scenario_of(body, _first_user_text(msgs), default_tools)
    round_ = tool_round(msgs)
    key = hashlib.sha256(_first_user_text(msgs).encode()).hexdigest()
    thought = thinking_text(f"{profile}/{key}/{round_}/{len(msgs)}", scenario.conv)
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    calls: list[dict[str, Any]] = []
    if round_ < scenario.tools:
        tools = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict)]
        name, schema = pick_tool([(f["name"], f["parameters"] if isinstance(f.get("parameters"), dict) else {})
                                  for f in tools if isinstance(f, dict) and isinstance(f.get("name"), str)],
                                 scenario.tool) or ("get_weather", {})
        for n in range(scenario.parallel):
            args = tool_input(schema, round_, n, scenario.arg)
            call = {"id": minter.call_id(), "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
            if profile == GEMINI_OPENAI and n == 0:
                part = {"functionCall": {"name": name, "args": args}}
                call["extra_content"] = {"google": {"thought_signature": signer.mint(model, key[:16], n, part)}}
            calls.append(call)
        finish = "tool_calls"
    else:
        msg["content"] = f"Final answer after {round_} tool rounds (conversation {key[:8]})."
        if profile == DEEPSEEK:
            msg["content"] = minter.tag_text(msg["content"])
        if profile == GEMINI_OPENAI:
            msg["extra_content"] = {"google": {"thought_signature": signer.mint(model, key[:16], 0,
                                                                                {"text": msg["content"]})}}
    ids = [c["id"] for c in calls]
    if profile == OPENROUTER:
        msg["reasoning"] = thought
        msg["reasoning_details"] = [{"type": "reasoning.text", "text": thought, "format": FORMAT, "index": 0},
                                    {"type": "reasoning.encrypted", "data": minter.opaque(OPENROUTER, model, ids),
                                     "format": FORMAT, "index": 1}]
    elif profile == COPILOT:
        msg["reasoning_text"] = thought
        msg["reasoning_opaque"] = minter.opaque(COPILOT, model, ids)
    elif profile == DEEPSEEK:
        msg["reasoning_content"] = thought
    if calls:
        msg["tool_calls"] = calls
    return msg, finish


def conversation_of(body: Any) -> str | None:
    """The ``[[sim:conv=NAME]]`` of a request body (any shape), or None."""
    return parse_scenario(_first_user_text(body.get("messages"))).conv if isinstance(body, dict) else None


def minted_tokens(msg: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, token) for every opaque value in a planned assistant message (for the oracle)."""
    out: list[tuple[str, str]] = []
    for key in ("reasoning", "reasoning_text", "reasoning_content"):
        if key in msg:
            out.append(("thinking", msg[key]))
    for d in msg.get("reasoning_details") or ():
        if d.get("type") == "reasoning.encrypted":
            out.append(("opaque", d["data"]))
        elif d.get("signature"):
            out.append(("signature", d["signature"]))
    if "reasoning_opaque" in msg:
        out.append(("opaque", msg["reasoning_opaque"]))
    for holder in (msg, *(msg.get("tool_calls") or ())):
        if "extra_content" in holder:
            out.append(("thought_signature", holder["extra_content"]["google"]["thought_signature"]))
    out += [("tool_id", c["id"]) for c in msg.get("tool_calls") or ()]
    return out


def stream_chunks(profile: str, msg: dict[str, Any], finish: str, base: dict[str, Any]) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    for key in ("reasoning_content", "reasoning_text"):
        if key in msg:
            deltas += [{key: piece} for piece in split_awkward(msg[key], 40)]
    if profile == OPENROUTER:  # text entries in pieces, a signature in a later piece of its entry (reference 3.3)
        for d in msg.get("reasoning_details") or ():
            if d["type"] != "reasoning.text":
                deltas.append({"reasoning_details": [d]})
                continue
            head = {"type": "reasoning.text", "format": d["format"], "index": d["index"]}
            deltas += [{"reasoning": p, "reasoning_details": [{**head, "text": p}]}
                       for p in split_awkward(d["text"], 40)]
            if d.get("signature"):
                deltas.append({"reasoning_details": [{**head, "text": "", "signature": d["signature"]}]})
    if msg.get("content"):
        deltas += [{"content": p} for p in split_words(msg["content"])]
        if "extra_content" in msg:
            deltas[-1]["extra_content"] = msg["extra_content"]
    for n, call in enumerate(msg.get("tool_calls") or ()):
        head = {"index": n, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}
        if "extra_content" in call:
            head["extra_content"] = call["extra_content"]
        deltas.append({"tool_calls": [head]})
        deltas.append({"tool_calls": [{"index": n, "function": {"arguments": call["function"]["arguments"]}}]})
    if profile == COPILOT:
        deltas[-1]["reasoning_opaque"] = msg["reasoning_opaque"]
    chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": usage(msg)})
    return chunks


def usage(msg: dict[str, Any]) -> dict[str, Any]:
    """The answer's ``usage``, in the shape OpenAI-compatible APIs report it (docs/upstream-rules.md, "Usage"): the
    cached share of the prompt and the reasoning share of the completion as details (fixed figures)."""
    reasoning = next((msg[k] for k in ("reasoning_content", "reasoning_text", "reasoning") if msg.get(k)), "")
    return {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": min(20, max(1, len(reasoning) // 4)) if reasoning else 0}}


def has_bearer(request: Request) -> bool:
    """Whether the request carries ``Authorization: Bearer <token>`` (the OpenAI-style profiles' 401 otherwise)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())


def compat_routes(state: Any) -> list[Route]:
    minter = Minter(state.config.secret)

    def handler(profile: str) -> Callable[[Request], Any]:
        async def chat(request: Request) -> Response:
            body = await state.take(request)
            conv = conversation_of(body)
            state.observe(f"compat-{profile}", conv, body)
            if not has_bearer(request):
                state.stats.unauthorized += 1
                return Response(orjson.dumps(_oai_error("Missing bearer authentication")), 401,
                                media_type="application/json")
            claude = openrouter_anthropic.applies(profile == OPENROUTER, body)
            bad = check(profile, body, minter, state.gemini_signer) or \
                (openrouter_anthropic.check(body, state.minter) if claude else None)
            if bad is not None:
                state.stats.rejections[f"compat-{bad[2]}"] += 1
                return Response(orjson.dumps(bad[1]), bad[0], media_type="application/json")
            state.stats.accepted += 1
            first = _first_user_text(body["messages"])
            scenario = parse_scenario(first)
            kind, replaced = await faults.inject(state, scenario, tool_round(body["messages"]),
                                                 hashlib.sha256(first.encode()).hexdigest(), bool(body.get("stream")))
            if replaced is not None:
                return replaced
            msg, finish = openrouter_anthropic.plan(body, state.minter, state.config.tools) if claude else \
                plan(profile, body, minter, state.gemini_signer, state.config.tools)
            state.remember(conv, minted_tokens(msg))
            base = {"id": "chatcmpl-" + secrets.token_hex(12), "created": 1700000000, "model": body["model"]}
            if not body.get("stream"):
                out = {**base, "object": "chat.completion",
                       "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                       "usage": usage(msg)}
                return faults.json_answer(kind, orjson.dumps(out))
            frames = [b"data: " + orjson.dumps({**c, "object": "chat.completion.chunk"}) + b"\n\n"
                      for c in stream_chunks(profile, msg, finish, base)] + [b"data: [DONE]\n\n"]
            return faults.stream_answer(state, kind, frames, b"data: " + orjson.dumps(faults.OVERLOADED) + b"\n\n",
                                        scenario.hold)
        return chat

    def lister(profile: str) -> Callable[[Request], Any]:
        async def models(request: Request) -> Response:
            """``GET .../models``: the profile's models, in the OpenAI list shape its real upstream answers with."""
            if not has_bearer(request):
                return Response(orjson.dumps(_oai_error("Missing bearer authentication")), 401,
                                media_type="application/json")
            data = [{"id": m, "object": "model", "created": 1754006400, "owned_by": profile} for m in MODELS[profile]]
            return Response(orjson.dumps({"object": "list", "data": data}), 200, media_type="application/json")
        return models

    bases = {GEMINI_OPENAI: "/v1beta/openai", OPENROUTER: "/openrouter/api/v1", COPILOT: "/copilot",
             DEEPSEEK: "/deepseek/v1"}
    return [route for profile, base in bases.items()
            for route in (Route(f"{base}/chat/completions", handler(profile), methods=["POST"]),
                          Route(f"{base}/models", lister(profile), methods=["GET"]))]

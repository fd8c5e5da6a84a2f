"""The simulator's strict OpenAI Responses profile: ``POST /openai/v1/responses`` (base URL ``{sim}/openai/v1``).

What it mints (scripted by the usual markers in the first user message, ``thinkgate_sim.scenarios``): every answer
starts with a ``reasoning`` item (``rs_...``; ``summary`` text when ``reasoning.summary`` is asked for, the awkward
thinking text of ``scenarios.thinking_text``; ``encrypted_content`` always, as the API now populates it), then
``[[sim:parallel=K]]`` ``function_call`` items (``fc_...``, ``call_...``) for each of ``[[sim:tools=N]]`` rounds, then
a final ``message`` (``msg_...``). ``store`` defaults to true, as the API's does.

What it rejects (the texts and their sources: docs/upstream-rules.md, "OpenAI Responses"):

* ``responses-1`` a reasoning item whose ``encrypted_content`` is not one it minted for that item, unchanged (its id,
  its summary text, the model family, the caller's organization: its bearer token): 400 ``invalid_encrypted_content``;
* ``responses-2`` a reasoning item without ``encrypted_content``, an ``item_reference``, or an item id it never
  stored: 404 "Item with id '...' not found." (with "Items are not persisted when `store` is set to false. ..." when
  the request is ``store: false``);
* ``responses-3`` a ``function_call`` / ``message`` carrying the id it minted, without the reasoning item minted
  before it earlier in the input: 400 "Item 'fc_...' of type 'function_call' was provided without its required
  'reasoning' item: 'rs_...'.";
* ``responses-4`` a reasoning item not followed by the item it was minted before (the same type; its id when the
  client sends one): 400 "Item 'rs_...' of type 'reasoning' was provided without its required following item.";
* ``responses-5`` ``previous_response_id`` naming a response it did not store (``store: false``, or unknown): 400
  ``previous_response_not_found``;
* ``responses-6`` a ``function_call_output`` whose ``call_id`` no earlier ``function_call`` has: 400;
* ``responses-0`` a body that is not a Responses request.

Every request is shown to the app's cross-conversation oracle (``[[sim:conv=NAME]]``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from thinkgate_sim import faults
from thinkgate_sim.compat import has_bearer
from thinkgate_sim.deep_json import dumps
from thinkgate_sim.responses_stream import sse_frames
from thinkgate_sim.scenarios import parse_scenario, pick_tool, scenario_of, thinking_text, tool_input
from thinkgate_sim.signing import model_family

MEMORY = 100_000  # items and responses the profile remembers (the newest)
SIM_RESPONSES_MODELS = ("gpt-5", "gpt-5-codex", "gpt-5.1")
NOT_PERSISTED = (" Items are not persisted when `store` is set to false. Try again with `store` set to true, "
                 "or remove this item from your input.")


def _error(status: int, message: str, param: str | None, code: str | None, rule: str) -> tuple[int, Any, str]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "param": param,
                              "code": code}}, rule


def abbreviate(blob: str) -> str:
    """How the API names an encrypted blob in its error: ``gAAA...DQ==`` (first and last four characters)."""
    return f"{blob[:4]}...{blob[-4:]}" if len(blob) > 8 else blob


@dataclass(frozen=True, slots=True)
class Minted:
    """What the profile remembers of an output item it minted."""

    kind: str            # reasoning | function_call | message
    reasoning: str       # the reasoning item minted before it (its own id for a reasoning item)
    following: str       # a reasoning item: the id of the item minted right after it
    following_type: str  # ... and its type
    stored: bool         # minted for a ``store: true`` request (so its id alone finds it)
    item: dict[str, Any]


class ResponsesMinter:
    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"thinkgate-sim-responses\0" + secret).digest()

    def encrypt(self, item_id: str, model: str, summary: str, org: str = "") -> str:
        """``org``: whose credential the item was minted for (``organization``): another's does not verify."""
        payload = orjson.dumps({"id": item_id, "m": model_family(model), "o": org,
                                "s": hashlib.sha256(summary.encode()).hexdigest()[:16]})
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()[:16]
        return "gAAAAAB" + base64.urlsafe_b64encode(payload + mac).decode()

    def verify(self, blob: object, item_id: str | None, model: str, summary: str, org: str = "") -> str | None:
        """The reasoning id ``blob`` was minted for, when it is unchanged and matches the item; else None."""
        if not isinstance(blob, str) or not blob.startswith("gAAAAAB"):
            return None
        try:
            raw = base64.urlsafe_b64decode(blob[7:].encode())
        except (ValueError, TypeError):
            return None
        payload, mac = raw[:-16], raw[-16:]
        if len(raw) <= 16 or not hmac.compare_digest(mac, hmac.new(self._key, payload, hashlib.sha256).digest()[:16]):
            return None
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if data.get("m") != model_family(model) or data.get("s") != hashlib.sha256(summary.encode()).hexdigest()[:16] \
                or data.get("o", "") != org:
            return None
        if item_id is not None and data.get("id") != item_id:
            return None
        rid = data.get("id")
        return rid if isinstance(rid, str) else None


def organization(request: Request) -> str:
    """Whose the request is: the API binds a reasoning item's ``encrypted_content`` to the organization that minted
    it; here one bearer token is one organization (docs/upstream-rules.md, ``responses-1``)."""
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _summary_text(item: dict[str, Any]) -> str:
    parts = item.get("summary")
    return "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict)) if isinstance(parts, list) else ""


class Memory:
    """Minted items by id and stored responses by id (the newest ``MEMORY`` each)."""

    def __init__(self) -> None:
        self.items: OrderedDict[str, Minted] = OrderedDict()
        self.responses: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def add_item(self, item_id: str, minted: Minted) -> None:
        self.items[item_id] = minted
        while len(self.items) > MEMORY:
            self.items.popitem(last=False)

    def add_response(self, rid: str, items: list[dict[str, Any]]) -> None:
        self.responses[rid] = items
        while len(self.responses) > MEMORY:
            self.responses.popitem(last=False)


def input_items(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if isinstance(raw, list) and all(isinstance(i, dict) for i in raw):
        return list(raw)
    return None


def _item_type(item: dict[str, Any]) -> str:
    t = item.get("type")
    return t if isinstance(t, str) else ("message" if "role" in item else "")


def check(body: Any, minter: ResponsesMinter, memory: Memory,
          org: str = "") -> tuple[int, Any, str] | list[dict[str, Any]]:
    """The first violation (status, error body, rule), or the effective input (a previous response's chain first,
    item references resolved). ``org``: the caller's (``organization``)."""
    items = input_items(body) if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or items is None:
        return _error(400, "Missing required parameter: 'model'." if isinstance(body, dict) and items is not None
                      else "Invalid type for 'input': expected a string or an array of input items.",
                      "input", None, "responses-0")
    model: str = body["model"]
    store = body.get("store") is not False
    prev = body.get("previous_response_id")
    chain: list[dict[str, Any]] = []
    if prev is not None:
        if not isinstance(prev, str) or prev not in memory.responses:
            return _error(400, f"Previous response with id '{prev}' not found.", "previous_response_id",
                          "previous_response_not_found", "responses-5")
        chain = list(memory.responses[prev])
    new: list[dict[str, Any]] = []
    for item in items:
        if _item_type(item) == "item_reference":
            ref = item.get("id")
            found = memory.items.get(ref) if isinstance(ref, str) else None
            if found is None or not found.stored:
                return _not_found(str(ref), store)
            new.append(found.item)
        else:
            new.append(item)
    full = chain + new
    seen_reasoning: set[str] = set()
    calls: set[str] = set()
    start = len(chain)
    for i, item in enumerate(full):
        kind = _item_type(item)
        iid = item.get("id") if isinstance(item.get("id"), str) else None
        if kind == "reasoning":
            if "encrypted_content" in item and item["encrypted_content"] is not None:
                rid = minter.verify(item["encrypted_content"], iid, model, _summary_text(item), org)
                if rid is None:
                    blob = str(item["encrypted_content"])
                    return _error(400, f"The encrypted content {abbreviate(blob)} could not be verified.", None,
                                  "invalid_encrypted_content", "responses-1")
            else:
                found = memory.items.get(iid) if iid else None
                if found is None or not found.stored or found.kind != "reasoning":
                    return _not_found(str(iid), store) if iid else _error(
                        400, f"Missing required parameter: 'input[{i - start}].encrypted_content'.",
                        f"input[{i - start}].encrypted_content", "missing_required_parameter", "responses-0")
                rid = iid
            assert rid is not None
            seen_reasoning.add(rid)
            minted = memory.items.get(rid)
            if minted is not None and minted.following:
                nxt = full[i + 1] if i + 1 < len(full) else None
                nxt_id = nxt.get("id") if nxt is not None else None
                if nxt is None or _item_type(nxt) != minted.following_type or \
                        (nxt_id is not None and nxt_id != minted.following):
                    return _error(400, f"Item '{rid}' of type 'reasoning' was provided without its required "
                                       "following item.", "input", None, "responses-4")
        elif kind in ("function_call", "message") and iid is not None and (kind == "function_call" or
                                                                          item.get("role") == "assistant"):
            minted = memory.items.get(iid)
            if minted is None:
                if kind == "function_call" or iid.startswith("msg_"):
                    return _not_found(iid, store)
            elif minted.reasoning not in seen_reasoning:
                return _error(400, f"Item '{iid}' of type '{kind}' was provided without its required 'reasoning' "
                                   f"item: '{minted.reasoning}'.", "input", None, "responses-3")
        if kind == "function_call" and isinstance(item.get("call_id"), str):
            calls.add(item["call_id"])
        if kind == "function_call_output" and item.get("call_id") not in calls:
            return _error(400, f"No tool call found for function call output with call_id {item.get('call_id')}.",
                          "input", None, "responses-6")
    return full


def _not_found(item_id: str, store: bool) -> tuple[int, Any, str]:
    return _error(404, f"Item with id '{item_id}' not found." + ("" if store else NOT_PERSISTED), "input", None,
                  "responses-2")


def _first_user_text(items: list[dict[str, Any]]) -> str:
    for item in items:
        if _item_type(item) == "message" and item.get("role") == "user":
            c = item.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "\n".join(str(p.get("text") or "") for p in c if isinstance(p, dict))
    return ""


def _round(items: list[dict[str, Any]]) -> int:
    """Tool rounds since the last user message: runs of function_call items (reasoning items between them aside)."""
    last_user = max((i for i, it in enumerate(items) if _item_type(it) == "message" and it.get("role") == "user"),
                    default=-1)
    rounds, prev = 0, ""
    for it in items[last_user + 1:]:
        kind = _item_type(it)
        if kind == "reasoning":
            continue
        if kind == "function_call" and prev != "function_call":
            rounds += 1
        prev = kind
    return rounds


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(24)


def plan(body: dict[str, Any], items: list[dict[str, Any]], minter: ResponsesMinter, memory: Memory,
         default_tools: int = 0, org: str = "") -> dict[str, Any]:
    """The Response object answering ``body`` (its output minted and remembered; stored when ``store``);
    ``default_tools``: ``scenarios.scenario_of`` (``thinkgate sim --tools N``); ``org``: the caller's."""
    model: str = body["model"]
    store = body.get("store") is not False
    scenario = scenario_of(body, _first_user_text(items), default_tools)
    round_ = _round(items)
    key = hashlib.sha256(_first_user_text(items).encode()).hexdigest()
    reasoning: dict[str, Any] = found if isinstance(found := body.get("reasoning"), dict) else {}
    thought = thinking_text(f"responses/{key}/{round_}/{len(items)}", scenario.conv)
    summary = [{"type": "summary_text", "text": thought}] if reasoning.get("summary") else []
    rs_id = _new_id("rs_")
    output: list[dict[str, Any]] = []
    follow: list[dict[str, Any]] = []
    if round_ < scenario.tools:
        tools = [t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
        name, schema = pick_tool([(str(t.get("name")), t["parameters"] if isinstance(t.get("parameters"), dict)
                                   else {}) for t in tools], scenario.tool) or ("get_weather", {})
        for n in range(scenario.parallel):
            follow.append({"id": _new_id("fc_"), "type": "function_call", "status": "completed",
                           "arguments": orjson.dumps(tool_input(schema, round_, n, scenario.arg)).decode(),
                           "call_id": "call_" + secrets.token_hex(12), "name": name})
    else:
        text = f"Final answer after {round_} tool rounds (conversation {key[:8]})."
        follow.append({"id": _new_id("msg_"), "type": "message", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]})
    rs_item = {"id": rs_id, "type": "reasoning", "summary": summary,
               "encrypted_content": minter.encrypt(rs_id, model, thought if summary else "", org)}
    output = [rs_item, *follow]
    memory.add_item(rs_id, Minted("reasoning", rs_id, follow[0]["id"], follow[0]["type"], store, rs_item))
    for it in follow:
        memory.add_item(it["id"], Minted(it["type"], rs_id, "", "", store, it))
    rid = _new_id("resp_")
    if store:
        memory.add_response(rid, [*items, *output])
    tokens = sum(len(dumps(it)) for it in items) // 4
    out_tokens = sum(len(dumps(it)) for it in output) // 4
    return {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed", "error": None,
            "incomplete_details": None, "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"), "model": model, "output": output,
            "parallel_tool_calls": True, "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": reasoning.get("effort", "medium"), "summary": reasoning.get("summary")},
            "store": store, "temperature": 1.0, "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [], "top_p": 1.0,
            "truncation": "disabled", "metadata": {},
            "usage": {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": out_tokens, "output_tokens_details": {"reasoning_tokens": len(thought) // 4},
                      "total_tokens": tokens + out_tokens}}


def minted_tokens(response: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, token) of a planned response for the oracle: reasoning text, encrypted content, call ids."""
    out: list[tuple[str, str]] = []
    for it in response["output"]:
        if it["type"] == "reasoning":
            out += [("opaque", it["encrypted_content"])] + [("thinking", s["text"]) for s in it["summary"]]
        elif it["type"] == "function_call":
            out.append(("tool_id", it["call_id"]))
    return out


def responses_routes(state: Any) -> list[Route]:
    minter = ResponsesMinter(state.config.secret)
    memory = Memory()

    def json(status: int, body: Any) -> Response:
        return Response(dumps(body), status, media_type="application/json",
                        headers={"x-request-id": "req_" + secrets.token_hex(16)})

    async def create(request: Request) -> Response:
        body = await state.take(request)
        items = input_items(body) if isinstance(body, dict) else None
        conv = parse_scenario(_first_user_text(items)).conv if items else None
        state.observe("responses", conv, body)
        if not has_bearer(request):
            state.stats.unauthorized += 1
            return json(401, {"error": {"message": "Missing bearer authentication in header",
                                        "type": "invalid_request_error", "param": None, "code": None}})
        org = organization(request)
        checked = check(body, minter, memory, org)
        if isinstance(checked, tuple):
            state.stats.rejections[checked[2]] += 1
            return json(checked[0], checked[1])
        state.stats.accepted += 1
        first = _first_user_text(checked)
        scenario = parse_scenario(first)
        rid = {"x-request-id": "req_" + secrets.token_hex(16)}
        key = hashlib.sha256(first.encode()).hexdigest()
        kind, replaced = await faults.inject(state, scenario, _round(checked), key, bool(body.get("stream")), rid)
        if replaced is not None:
            return replaced
        response = plan(body, checked, minter, memory, state.config.tools, org)
        state.remember(conv, minted_tokens(response))
        if not body.get("stream"):
            return faults.json_answer(kind, dumps(response), rid)
        # an error mid-stream: the API's ``error`` event
        error = b"event: error\ndata: " + orjson.dumps({"type": "error", "code": "server_error",
                                                         "message": faults.OVERLOADED["error"]["message"],
                                                         "param": None}) + b"\n\n"
        return faults.stream_answer(state, kind, sse_frames(response), error, scenario.hold, rid)

    async def models(request: Request) -> Response:
        if not has_bearer(request):
            return json(401, {"error": {"message": "Missing bearer authentication in header",
                                        "type": "invalid_request_error", "param": None, "code": None}})
        return json(200, {"object": "list", "data": [{"id": m, "object": "model", "created": 1754006400,
                                                      "owned_by": "system"} for m in SIM_RESPONSES_MODELS]})

    return [Route("/openai/v1/responses", create, methods=["POST"]),
            Route("/openai/v1/models", models, methods=["GET"])]

"""Pure Gemini protocol pieces: parts <-> blocks, the stream translator, the record encoding of
provider data, routing configuration."""

from __future__ import annotations

import orjson
import pytest

from gateway.app.settings import Settings, SettingsError
from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    CLIENT,
    Message,
    ProviderFields,
    ProviderSig,
    TextBlock,
    ThoughtBlock,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.gemini import wire as gemini
from gateway.dialects.gemini.parts import deterministic_ids, map_responses
from gateway.dialects.gemini.wire import GeminiTranslator
from gateway.dialects.routing import RouteError, Router, origin_of, parse_routes
from gateway.pipeline.repair.records import (
    load_block,
    load_fields,
    load_message,
    store_block,
    store_fields,
    store_message,
    turn_record,
)

ORIGIN = "gemini/gemini-3-pro-preview"
CONTENTS = [
    {"role": "user", "parts": [{"text": "hi"}]},
    {"role": "model", "parts": [{"text": "plan", "thought": True}, {"text": "Calling."},
                                {"functionCall": {"name": "a", "args": {"x": 1}}, "thoughtSignature": "S1"},
                                {"functionCall": {"name": "b", "args": {}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "b", "response": {"r": 2}}},
                               {"functionResponse": {"name": "a", "response": {"r": 1}}}]},
    {"role": "model", "parts": [{"text": "done"}, {"text": "", "thoughtSignature": "S2"}]},
]


def test_native_request_round_trip_keeps_signatures_on_their_parts() -> None:
    native = {"contents": CONTENTS, "generationConfig": {"temperature": 0.2}}
    req = gemini.decode_request(native, "gemini-3-pro-preview", stream=False)
    model = req.messages[1].content
    assert isinstance(model[0], ThoughtBlock) and model[0].origin == CLIENT
    assert isinstance(model[2], ToolUseBlock) and model[2].sig == ProviderSig(CLIENT, "S1") and model[3].sig is None
    results = req.messages[2].content
    assert [b.tool_use_id for b in results] == [model[3].id, model[2].id]  # by name, whatever the order
    body = gemini.encode_request(req, native)
    assert body["generationConfig"] == {"temperature": 0.2}
    assert body["contents"][1] == CONTENTS[1]
    assert body["contents"][3]["parts"][1] == {"text": "", "thoughtSignature": "S2"}, "signature-only part kept"
    assert body["contents"][2]["parts"][0] == {"functionResponse": {"name": "b", "response": {"r": 2}}}


def test_call_ids_are_deterministic_per_conversation_path() -> None:
    a = gemini.decode_request({"contents": CONTENTS}, "m", stream=False)
    b = gemini.decode_request({"contents": CONTENTS}, "m", stream=False)
    assert a.messages[1].tool_use_ids() == b.messages[1].tool_use_ids()
    other = deterministic_ids([a.messages[0], a.messages[0]])
    assert other(0, "a", {"x": 1}) != a.messages[1].tool_use_ids()[0]
    calls = [ToolUseBlock("1", "f", {}), ToolUseBlock("2", "f", {}), ToolUseBlock("3", "g", {})]
    assert map_responses(calls, [{"name": "g"}, {"name": "f"}, {"name": "f", "id": "1"}]) == ["3", "2", "1"]


def test_upstream_request_from_anthropic_shaped_params() -> None:
    req = gemini.decode_request({"contents": CONTENTS[:1]}, "m", stream=False)
    req.params = {"system": "be brief", "max_tokens": 100, "tools": [
        {"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {"a": {}}}}],
        "tool_choice": {"type": "tool", "name": "f"}}
    req.thinking = {"type": "enabled", "budget_tokens": 2048}
    body = gemini.encode_request(req)
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "f"
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}
    assert body["generationConfig"] == {"maxOutputTokens": 100,
                                        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2048}}


def _translate(chunks: list[dict[str, object]]) -> Turn:
    t = GeminiTranslator(origin=ORIGIN, mint=lambda k, name, args: f"id{k}", model="gemini-3-pro-preview")
    snap = Snapshot()
    for c in chunks:
        for ev in t.feed(orjson.dumps(c).decode()):
            accumulate(ev, snap)
    for ev in t.end():
        accumulate(ev, snap)
    turn = finished_turn(snap)
    assert turn is not None
    return turn


def _chunk(*parts: dict[str, object], finish: str | None = None) -> dict[str, object]:
    cand: dict[str, object] = {"content": {"role": "model", "parts": list(parts)}}
    if finish:
        cand["finishReason"] = finish
    return {"candidates": [cand], "responseId": "r1", "modelVersion": "gemini-3-pro-preview"}


def test_stream_keeps_signed_parts_apart() -> None:
    turn = _translate([_chunk({"text": "th", "thought": True}), _chunk({"text": "ink", "thought": True}),
                       _chunk({"text": "Hel"}), _chunk({"text": "lo"}),
                       _chunk({"text": "", "thoughtSignature": "SIG"}, finish="STOP")])
    assert turn.content == [ThoughtBlock("think", ORIGIN), TextBlock("Hello"),
                            TextBlock("", sig=ProviderSig(ORIGIN, "SIG"))]
    assert turn.stop_reason == "end_turn" and turn.id == "r1"


def test_stream_calls_get_minted_ids_and_only_their_own_signature() -> None:
    turn = _translate([_chunk({"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "S"}),
                       _chunk({"functionCall": {"name": "f", "args": {"a": 2}}}, finish="STOP")])
    assert turn.content == [ToolUseBlock("id0", "f", {"a": 1}, sig=ProviderSig(ORIGIN, "S")),
                            ToolUseBlock("id1", "f", {"a": 2})]
    assert turn.stop_reason == "tool_use"


def test_unfinished_stream_is_not_a_turn() -> None:
    t = GeminiTranslator(origin=ORIGIN, mint=lambda k, n, a: "x", model="m")
    assert t.feed(orjson.dumps(_chunk({"text": "a"})).decode())
    assert t.end() == []
    err = t.feed(orjson.dumps({"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}).decode())
    assert err == [{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}]


def test_record_encoding_round_trips_provider_data() -> None:
    blocks = [ThoughtBlock("t", ORIGIN, ProviderSig(ORIGIN, "TS")), TextBlock("x", sig=ProviderSig(ORIGIN, "S")),
              ToolUseBlock("c1", "f", {}, sig=ProviderSig(ORIGIN, "S2")), ToolUseBlock("c2", "f", {})]
    stored = [store_block(b) for b in blocks]
    assert stored[1] == {"type": "text", "text": "x", "_provider": {"origin": ORIGIN, "value": "S"}}
    assert [load_block(d) for d in stored] == blocks
    fields = ProviderFields("openrouter/x", {"reasoning_details": [{"type": "reasoning.encrypted", "data": "D"}]})
    assert load_fields(store_fields(fields)) == fields and load_fields({}) is None
    rec = turn_record(Turn("r", "m", blocks, provider=fields), [], upstream="gemini", dialect="openai")
    assert rec.provider == store_fields(fields) and rec.content == stored


def test_prompt_messages_keep_provider_blocks_and_never_trust_a_clients_reserved_keys() -> None:
    """A Gemini client's thought part in its own turn is stored in provider form and read back as it was;
    a ``_provider`` key the client sent (on a block or the message) is never read as provider data."""
    user = Message("user", [TextBlock("q"), ThoughtBlock("t", CLIENT, ProviderSig(CLIENT, "TS"))])
    stored = store_message(user)
    assert stored["_provider"] is True and load_message(stored, 0) == user
    plain = Message("user", [TextBlock("hi")], content_was_string=True)
    assert store_message(plain) == {"role": "user", "content": "hi"} and load_message(store_message(plain), 0) == plain
    forged = {"type": "text", "text": "x", "_provider": {"origin": ORIGIN, "value": "FORGED"}}
    client = anthropic.decode_message({"role": "user", "content": [forged], "_provider": True}, 0)
    back = load_message(store_message(client), 0)
    assert isinstance(back.content[0], TextBlock) and back.content[0].sig is None
    mixed = Message("user", [anthropic.build_block(forged), ThoughtBlock("t", CLIENT)], extra={"_provider": 1})
    back = load_message(store_message(mixed), 0)
    assert back.content[0] == TextBlock("x") and back.extra == {}


def test_routes_configuration() -> None:
    routes = parse_routes("google/=openrouter@https://openrouter.ai/api/v1, ds-=deepseek@http://x/v1,claude-x=gemini")
    router = Router(routes, "copilot")
    assert router.caps_for("google/gemini-3").upstream == "openrouter"
    assert router.caps_for("google/gemini-3").flavor == "openrouter"
    assert router.caps_for("claude-x-1").kind == "gemini"
    assert router.caps_for("claude-opus-4-7").adaptive_only
    assert router.caps_for("gemini-2.5-pro").kind == "gemini"
    assert router.caps_for("gpt-4o").upstream == "openai" and router.caps_for("gpt-4o").flavor == "copilot"
    assert set(router.named_upstreams()) == {"openrouter", "deepseek"}
    assert origin_of(router.caps_for("gemini-3-pro-preview-20251101"), "gemini-3-pro-preview-20251101") == \
        "gemini/gemini-3-pro-preview"
    for bad in ("nope", "x=unknown@http://a", "x=openrouter@ftp://a", "a=openrouter@http://a,b=openrouter@http://b"):
        with pytest.raises(RouteError):
            parse_routes(bad)
    with pytest.raises(SettingsError):
        Settings.from_env({"GATEWAY_ROUTES": "nope"})
    with pytest.raises(SettingsError):
        Settings.from_env({"GATEWAY_OPENAI_FLAVOR": "bedrock"})
    s = Settings.from_env({"GATEWAY_OPENAI_BASE_URL": "http://o", "GATEWAY_OPENAI_FLAVOR": "deepseek"})
    assert s.router().caps_for("x").flavor == "deepseek"


def test_gemini_call_ids_go_back_minted_ones_do_not() -> None:
    contents = [{"role": "user", "parts": [{"text": "q"}]},
                {"role": "model", "parts": [{"functionCall": {"id": "fc-7", "name": "f", "args": {}},
                                             "thoughtSignature": "S"}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "fc-7", "name": "f", "response": {}}}]}]
    req = gemini.decode_request({"contents": contents}, "m", stream=False)
    assert req.messages[1].tool_use_ids() == ["fc-7"]
    assert gemini.encode_request(req)["contents"] == contents
    minted = gemini.decode_request({"contents": CONTENTS}, "m", stream=False)
    sent = gemini.encode_request(minted)["contents"]
    assert "id" not in sent[1]["parts"][2]["functionCall"] and "id" not in sent[2]["parts"][0]["functionResponse"]

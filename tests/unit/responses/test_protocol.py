"""The Responses surface's pure parts: request items -> canonical, turns -> output items and Response objects, the
sealed reasoning content, and the event stream (golden Anthropic transcripts through the encoder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects.accumulate import Snapshot, accumulate, finished_turn
from gateway.dialects.canonical import (
    PROVIDER,
    BlockProvider,
    ProviderFields,
    ProviderSig,
    TextBlock,
    ThinkingBlock,
    ThoughtBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
)
from gateway.dialects.responses import codec as responses
from gateway.dialects.responses.stream import StreamEncoder
from gateway.errors import ClientError
from gateway.sse import SSEDecoder
from gateway.surfaces.reasoning_seal import sealer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SECRET = "responses-unit-secret-0123456789abcdef"
THINKING = "Let me think.\r\n  Trailing spaces   \n\n\ncafé — 思考 🤔\r\n"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds=="
IDS = responses.ItemIds("AbCdEfGhIjKlMnOpQrStUv", 3)
SEAL = sealer(SECRET, "tenant-a")


def decode(body: dict[str, Any], resolved: dict[str, Any] | None = None) -> responses.ResponsesRequest:
    return responses.decode_request(body, SEAL.unseal, resolved)


def claude_turn() -> Turn:
    return Turn(id="msg_1", model="claude-opus-4-5", content=[
        ThinkingBlock(THINKING, SIGNATURE), TextBlock("Checking."),
        ToolUseBlock("toolu_1", "get_weather", {"city": "Paris"})], stop_reason="tool_use",
        usage={"input_tokens": 10, "output_tokens": 5})


def test_a_string_input_with_instructions_and_developer_messages() -> None:
    got = decode({"model": "claude-opus-4-5", "instructions": "Be brief.", "input": [
        {"role": "developer", "content": "Use tools."}, {"role": "user", "content": [
            {"type": "input_text", "text": "hi"}]}], "reasoning": {"effort": "low", "summary": "auto"},
        "max_output_tokens": 4096, "store": False, "include": ["reasoning.encrypted_content"]})
    req = got.request
    assert req.params["system"] == "Be brief.\n\nUse tools." and req.params["max_tokens"] == 4096
    assert req.thinking == {"type": "enabled", "budget_tokens": 2048}
    assert [(m.role, [b.text for b in m.content if isinstance(b, TextBlock)]) for m in req.messages] == \
        [("user", ["hi"])]
    assert got.include_encrypted and got.summary and got.echo["store"] is False
    assert decode({"model": "m", "input": "hello"}).request.messages[0].content[0] == TextBlock("hello")


def test_output_items_replayed_decode_to_the_turn_byte_exact() -> None:
    items = responses.output_items(claude_turn().content, IDS, SEAL.seal, include_encrypted=True, summary=True)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert [i["id"] for i in items] == [IDS.item("rs", 0), IDS.item("msg", 1), IDS.item("fc", 2)]
    assert items[0]["summary"] == [{"type": "summary_text", "text": THINKING}]
    result = {"type": "function_call_output", "call_id": "toolu_1", "output": "ok"}
    body = {"model": "claude-opus-4-5", "input": [{"role": "user", "content": "q"}, *items, result]}
    req = decode(body).request
    msgs = req.messages
    assert req.surface.sealed == {id(msgs[1].content[0])}, "the unsealed thinking is vouched for, nothing else"
    assert [m.role for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1].content == claude_turn().content
    assert msgs[2].content == [ToolResultBlock("toolu_1", "ok")]


def test_reasoning_that_does_not_unseal_is_dropped_never_forged() -> None:
    items = responses.output_items(claude_turn().content, IDS, SEAL.seal, include_encrypted=True, summary=True)
    sealed = items[0]["encrypted_content"]
    payload, tag = sealed.rsplit(".", 1)
    for bad in (payload + "." + tag[::-1], "gAAAAABopenai-minted", sealed.replace("tg1.", "tg2.", 1)):
        got = decode({"model": "m", "input": [{"role": "user", "content": "q"}, {**items[0], "encrypted_content": bad},
                                             *items[1:]]})
        assert not any(isinstance(b, ThinkingBlock) for b in got.request.messages[1].content)
    other = sealer(SECRET, "tenant-b")
    assert other.unseal(sealed) is None, "another tenant's content does not open"
    assert sealer("rotated-secret-0123456789abcdefghij", "tenant-a", SECRET).unseal(sealed) is not None
    assert sealer("rotated-secret-0123456789abcdefghij", "tenant-a").unseal(sealed) is None


def test_a_gemini_signature_rides_in_a_reasoning_item_of_its_own() -> None:
    sig = ProviderSig("gemini-3", "R2VtaW5pU2ln")
    blocks = [ThoughtBlock("thought text", "gemini-3"),
              ToolUseBlock("call_1", "get_weather", {"city": "Oslo"}, sig=sig)]
    items = responses.output_items(blocks, IDS, SEAL.seal, include_encrypted=True, summary=True)
    assert [i["type"] for i in items] == ["reasoning", "reasoning", "function_call"]
    assert items[1]["summary"] == []
    req = decode({"model": "g", "input": [{"role": "user", "content": "q"}, *items]}).request
    msgs = req.messages
    call = msgs[1].content[-1]
    assert isinstance(call, ToolUseBlock) and call.sig == sig
    assert req.surface.sealed == {id(b) for b in msgs[1].content}, "the thought and the signed call are vouched for"
    without = decode({"model": "g", "input": [{"role": "user", "content": "q"}, items[2]]}).request.messages
    assert isinstance(without[1].content[0], ToolUseBlock) and without[1].content[0].sig is None


# an OpenAI-compatible upstream's message-level reasoning fields, per flavor, as its simulator profile returns them
COMPAT_FIELDS = {
    "openrouter": ProviderFields("openrouter/gemini", {"reasoning_details": [
        {"type": "reasoning.text", "text": "I think.", "format": "google-gemini-v1", "index": 0},
        {"type": "reasoning.encrypted", "data": "ZW5jcnlwdGVk", "format": "google-gemini-v1", "index": 1}]}),
    "copilot": ProviderFields("copilot/gpt", {"reasoning_opaque": "b3BhcXVl", "reasoning_text": "I think."}),
    "deepseek": ProviderFields("deepseek/deepseek", {"reasoning_content": "I think."}),
}


def compat_turn(fields: ProviderFields) -> Turn:
    return Turn(id="c1", model="m", content=[ThoughtBlock("I think.", fields.origin),
                                             ToolUseBlock("call_1", "get_weather", {"city": "Oslo"})],
                stop_reason="tool_use", provider=fields)


@pytest.mark.parametrize("flavor", sorted(COMPAT_FIELDS))
def test_an_openai_compatible_turn_s_reasoning_fields_ride_in_a_sealed_item_and_go_back_on_its_message(
        flavor: str) -> None:
    """The message-level fields have a reasoning item of their own after the turn's other items (``tg2``); replayed,
    they go back onto the turn's assistant message with the origin that minted them, whole; altered, or without
    ``encrypted_content``, they are dropped (nothing forged)."""
    turn = compat_turn(COMPAT_FIELDS[flavor])
    items = responses.output_items(turn.content, IDS, SEAL.seal, include_encrypted=True, summary=True,
                                   provider=turn.provider)
    assert [i["type"] for i in items] == ["reasoning", "function_call", "reasoning"]
    assert [i["id"] for i in items] == [IDS.item("rs", 0), IDS.item("fc", 1), IDS.item("rs", 2)]
    assert items[0]["encrypted_content"].startswith("tg1.") and items[2]["encrypted_content"].startswith("tg2.")
    assert items[2]["summary"] == []
    result = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}

    def replayed(fields_item: dict[str, Any]) -> list[Any]:
        body = {"model": "m", "input": [{"role": "user", "content": "q"}, items[0], items[1], fields_item, result]}
        return decode(body).request.messages

    msgs = replayed(items[2])
    assert [m.role for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1].provider == turn.provider and msgs[1].content == turn.content
    sealed = items[2]["encrypted_content"]
    head, body, tag = sealed.split(".")
    for bad in (f"{head}.{body}.{tag[::-1]}", f"tg1.{body}.{tag}", f"{head}.{body[:-2]}.{tag}"):
        assert replayed({**items[2], "encrypted_content": bad})[1].provider is None
    assert replayed({k: v for k, v in items[2].items() if k != "encrypted_content"})[1].provider is None
    assert sealer(SECRET, "tenant-b").unseal(sealed) is None, "another tenant's fields do not open"
    without = responses.output_items(turn.content, IDS, SEAL.seal, include_encrypted=False, summary=True,
                                     provider=turn.provider)
    assert [i["type"] for i in without] == ["reasoning", "function_call"], "no encrypted_content asked: no carrier"


def test_content_sealed_before_the_fields_version_still_opens() -> None:
    """A ``tg1`` item minted by the previous release (this literal) opens as it did; blocks without fields are still
    minted ``tg1``."""
    old = ("tg1.eJyLrlYqqSxIVbJSKsnIzMvOzEtX0kEwrZTyc1IUkGSKM9PzEktKi0Aakowqsn0i_Aqiym1tlWpjAcRDGXo."
           "Tguh4bREMklQDbjE7I3y6w")
    assert SEAL.unseal(old) == ([ThinkingBlock("old thinking", "b2xkLXNpZw==")], None)
    assert SEAL.seal([ThinkingBlock("old thinking", "b2xkLXNpZw==")]) == old


def test_bare_references_resolve_or_get_the_api_404() -> None:
    items = responses.output_items(claude_turn().content, IDS, SEAL.seal, include_encrypted=True, summary=True)
    refs = [{"type": "item_reference", "id": i["id"]} for i in items[:2]] + [{"id": items[2]["id"]}]
    body = {"model": "m", "store": False, "input": [{"role": "user", "content": "q"}, *refs]}
    assert responses.references_of(body) == [i["id"] for i in items]
    got = decode(body, {i["id"]: i for i in items}).request.messages
    assert got[1].content == claude_turn().content
    with pytest.raises(ClientError) as e:
        decode(body, {})
    assert e.value.status == 404 and e.value.message.startswith(f"Item with id '{items[0]['id']}' not found.")
    assert "Items are not persisted when `store` is set to false" in e.value.message


@pytest.mark.parametrize(("body", "path"), [
    ({"model": "m", "input": 3}, "input"),
    ({"model": "m"}, "input"),
    ({"input": "x"}, "model"),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1"}]},
     "input.0.arguments"),
    ({"model": "m", "input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]}, "input.0.type"),
    ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input.0.role"),
    ({"model": "m", "input": "x", "reasoning": "high"}, "reasoning"),
    ({"model": "m", "input": "x", "metadata": {"a": {"b": 1}}}, "metadata"),
])
def test_malformed_requests_are_400s_naming_the_field(body: dict[str, Any], path: str) -> None:
    with pytest.raises(ClientError) as e:
        decode(body)
    assert e.value.status == 400 and e.value.message.startswith(path), e.value.message


def test_ids_name_the_recorded_turn() -> None:
    assert responses.parse_id(IDS.response) == responses.ParsedId("resp", IDS.scid, 3, None)
    assert responses.parse_id(IDS.item("fc", 12)) == responses.ParsedId("fc", IDS.scid, 3, 12)
    assert responses.parse_id("resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b") is None


def test_a_turn_cut_by_the_token_limit_is_incomplete() -> None:
    turn = Turn(id="m", model="claude-opus-4-5", content=[TextBlock("cut")], stop_reason="max_tokens", usage={})
    out = responses.encode_response(turn, IDS, SEAL.seal, echo=dict(responses.ECHOED), created_at=1,
                                    include_encrypted=False, summary=False)
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}


# ---------------------------------------------------------------- the stream

def encode_stream(raw: bytes | list[dict[str, Any]], *, final: responses.ItemIds = IDS,
                  include: bool = True) -> tuple[list[dict[str, Any]], Snapshot]:
    snap = Snapshot()
    enc = StreamEncoder(snap, ids=IDS, final=lambda: (final, final.scid), seal=SEAL.seal, model="m",
                        created_at=1, echo=dict(responses.ECHOED), include_encrypted=include, summary=True,
                        scid=IDS.scid)
    out = b""
    # a translated stream's events come as objects (their provider data typed); an upstream's as SSE
    parsed = [(e, None) for e in raw] if isinstance(raw, list) else \
        [(json.loads(ev.data), ev) for ev in SSEDecoder().feed(raw)]
    for data, ev in parsed:
        accumulate(data, snap)
        out += enc.event(data, ev)
    out += enc.end()
    events = []
    for frame in out.decode().split("\n\n")[:-1]:
        head, data = frame.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert head == "event: " + payload["type"]
        events.append(payload)
    return events, snap


def test_the_stream_is_the_responses_event_sequence_and_ends_as_the_object_would() -> None:
    events, snap = encode_stream((FIXTURES / "sse_thinking_tool_use.sse").read_bytes())
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for kind in ("response.reasoning_summary_text.delta", "response.output_text.delta",
                 "response.function_call_arguments.delta", "response.function_call_arguments.done"):
        assert kind in types
    assert types[-1] == "response.completed"
    summary = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta")
    assert summary == THINKING
    done = events[-1]["response"]
    turn = finished_turn(snap)
    assert turn is not None
    whole = responses.output_items(turn.content, IDS, SEAL.seal, include_encrypted=True, summary=True)
    assert [(i["type"], i["id"]) for i in done["output"]] == [(i["type"], i["id"]) for i in whole]
    rs = done["output"][0]
    assert SEAL.unseal(rs["encrypted_content"]) == ([ThinkingBlock(THINKING, SIGNATURE)], None)
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [i["id"] for i in done["output"]]


def test_a_turn_recorded_elsewhere_than_predicted_completes_under_its_recorded_ids() -> None:
    forked = responses.ItemIds("ZyXwVuTsRqPoNmLkJiHgFe", 3)
    events, _ = encode_stream((FIXTURES / "sse_thinking_tool_use.sse").read_bytes(), final=forked)
    done = events[-1]["response"]
    assert done["id"] == forked.response and all(forked.scid in i["id"] for i in done["output"])


def test_an_upstream_error_mid_stream_is_error_then_response_failed_and_nothing_after() -> None:
    events, _ = encode_stream((FIXTURES / "sse_midstream_error.sse").read_bytes())
    types = [e["type"] for e in events]
    assert types[-2:] == ["error", "response.failed"]
    assert events[-2]["message"] == "Overloaded"
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["error"] == {"code": "overloaded_error", "message": "Overloaded"}


def _events(*events: dict[str, Any]) -> list[dict[str, Any]]:
    """A translated stream's events, as the translator hands them to the relay."""
    return list(events)


def _gemini_stream() -> list[dict[str, Any]]:
    """Signed thought, two text blocks (the second signed), a signed call and an unsigned one, as the Gemini
    translator streams them."""
    sig = BlockProvider("gemini-3", ProviderSig("gemini-3", "c2lnLXRleHQ="))
    call_sig = BlockProvider("gemini-3", ProviderSig("gemini-3", "c2lnLWNhbGw="))
    return _events(
        {"type": "message_start", "message": {"id": "r1", "type": "message", "role": "assistant", "model": "g",
                                              "content": [], "stop_reason": None, "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {
            "type": "thought", "thinking": "", PROVIDER: BlockProvider("gemini-3")}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I think."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "One."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": "", PROVIDER: sig}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Two."}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": {
            "type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}, PROVIDER: call_sig}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"city": "Oslo"}'}},
        {"type": "content_block_stop", "index": 3},
        {"type": "content_block_start", "index": 4, "content_block": {
            "type": "tool_use", "id": "call_b", "name": "get_weather", "input": {}}},
        {"type": "content_block_stop", "index": 4},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"})


def test_a_streamed_gemini_turn_has_the_items_and_ids_a_whole_answer_and_a_read_back_have() -> None:
    """Signed thought, two text blocks (the second signed), a signed call and an unsigned one, as the Gemini
    translator streams them: the streamed items, their ids and their sealed content are those ``output_items``
    gives the recorded turn (what GET and item references read back)."""
    raw = _gemini_stream()
    events, snap = encode_stream(raw)
    done = events[-1]["response"]["output"]
    turn = finished_turn(snap)
    assert turn is not None
    whole = responses.output_items(turn.content, IDS, SEAL.seal, include_encrypted=True, summary=True)
    assert [(i["type"], i["id"]) for i in done] == [(i["type"], i["id"]) for i in whole]
    assert [i["type"] for i in done] == ["reasoning", "message", "message", "reasoning", "reasoning",
                                         "function_call", "function_call"]
    assert [SEAL.unseal(i["encrypted_content"]) for i in done if i["type"] == "reasoning"] == \
        [SEAL.unseal(i["encrypted_content"]) for i in whole if i["type"] == "reasoning"]
    replayed = decode({"model": "g", "input": [{"role": "user", "content": "q"}, *done]}).request.messages[1].content
    assert [getattr(b, "sig", None) for b in replayed] == [None, None, ProviderSig("gemini-3", "c2lnLXRleHQ="),
                                                           ProviderSig("gemini-3", "c2lnLWNhbGw="), None]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_item_s_id_is_the_same_with_include_and_without(stream: bool) -> None:
    """Without ``include`` the signatures' own reasoning items are left out, but every other item keeps the id it
    has with ``include`` (its place in ``layout``), streamed or answered whole: a later reference names the item
    the client saw."""
    def items(include: bool) -> list[dict[str, Any]]:
        events, snap = encode_stream(_gemini_stream(), include=include)
        turn = finished_turn(snap)
        assert turn is not None
        whole = responses.output_items(turn.content, IDS, SEAL.seal, include_encrypted=include,
                                       summary=True)
        return list(events[-1]["response"]["output"]) if stream else whole

    with_include = {i["id"]: i for i in items(True)}
    without = items(False)
    assert [i["type"] for i in without] == ["reasoning", "message", "message", "function_call", "function_call"]
    assert len(with_include) == len(without) + 2
    for item in without:
        assert {k: v for k, v in with_include[item["id"]].items() if k != "encrypted_content"} == item
    assert [i["id"].rsplit(".", 1)[1] for i in without] == ["0", "1", "2", "5", "6"]


def test_a_responses_client_s_fields_pass_to_a_responses_upstream_in_its_order() -> None:
    """Same dialect (``responses_passthrough``): the client's fields in its order and as sent, but for what
    thinkgate decides (model, input, instructions, stream, store: false, no previous_response_id, its include
    entry added); keys only thinkgate derived follow."""
    from gateway.dialects.responses import upstream as responses_upstream
    from gateway.dialects.routing import Router

    body = {"text": {"verbosity": "high"}, "model": "gpt-5", "x_unknown": [1, {"a": None}],
            "previous_response_id": "resp_AbCdEfGhIjKlMnOpQrStUv.0", "include": ["file_search_call.results"],
            "store": True, "instructions": "Be brief.", "metadata": {"k": "v"}, "temperature": 0.25,
            "reasoning": {"effort": "high", "summary": "concise", "future": 1}, "input": "hi",
            "tools": [{"type": "web_search"}], "service_tier": "flex"}
    req = decode(body).request
    out = responses_upstream.encode_request(req, Router("").caps_for("gpt-5"), body)
    assert list(out) == ["text", "model", "x_unknown", "include", "store", "instructions", "metadata",
                         "temperature", "reasoning", "input", "tools", "service_tier", "max_output_tokens"]
    for key in ("text", "x_unknown", "metadata", "temperature", "reasoning", "tools", "service_tier"):
        assert out[key] == body[key], key
    assert out["include"] == ["file_search_call.results", "reasoning.encrypted_content"]
    assert out["store"] is False and out["instructions"] == "Be brief."
    assert out["input"] == [{"type": "message", "role": "user", "content": "hi"}]
    bare = {"model": "gpt-5", "input": "hi"}
    without = responses_upstream.encode_request(decode(bare).request, Router("").caps_for("gpt-5"), bare)
    assert without["include"] == ["reasoning.encrypted_content"] and "reasoning" not in without


def test_a_streamed_openai_compatible_turn_carries_its_fields_like_the_whole_answer() -> None:
    """The translated stream of an OpenAI-compatible upstream has the message-level fields only on its
    ``message_delta``: the carrier item comes after every other item, as ``output_items`` puts it, with the same id
    and the same sealed fields."""
    fields = ProviderFields("deepseek/deepseek", {"reasoning_content": "I think."})
    raw = _events(
        {"type": "message_start", "message": {"id": "r1", "type": "message", "role": "assistant", "model": "d",
                                              "content": [], "stop_reason": None, "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {
            "type": "thought", "thinking": "", PROVIDER: BlockProvider("deepseek/deepseek")}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I think."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"city": "Oslo"}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", PROVIDER: fields},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"})
    events, snap = encode_stream(raw)
    done = events[-1]["response"]["output"]
    turn = finished_turn(snap)
    assert turn is not None

    assert turn.provider == ProviderFields("deepseek/deepseek", {"reasoning_content": "I think."})
    whole = responses.output_items(turn.content, IDS, SEAL.seal, include_encrypted=True, summary=True,
                                   provider=turn.provider)
    assert [(i["type"], i["id"]) for i in done] == [(i["type"], i["id"]) for i in whole]
    assert [i["type"] for i in done] == ["reasoning", "function_call", "reasoning"]
    assert SEAL.unseal(done[-1]["encrypted_content"]) == ([], turn.provider)
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [i["id"] for i in done]

"""``gateway.pipeline.repair.prefix`` (pure): a binding model's prefix kept as recorded, or ``drop_block`` where it
changed; the
stale-block strip after a binding 400 (``sanitize.strip_bound``); the note round-trips through the store codec."""

from __future__ import annotations

from typing import Any

from gateway.actions import ActionKind
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Request
from gateway.dialects.routing import ModelCaps, caps_for
from gateway.pipeline.repair import prefix
from gateway.pipeline.sanitize.core import Policy, strip_bound
from state import records
from state.records import TurnRecord

BOUND = "claude-opus-5-5"
W = {"name": "get_weather", "input_schema": {"type": "object"}}
C = {"name": "get_time", "input_schema": {"type": "object"}}


def request(n: int, system: Any = "S", tools: Any = (W,), thinking: Any = None, model: str = BOUND) -> Request:
    """The client's request after ``n`` tool rounds, each assistant message with a thinking block."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for k in range(n):
        msgs += [{"role": "assistant", "content": [{"type": "thinking", "thinking": f"t{k}", "signature": f"s{k}"},
                                                   {"type": "tool_use", "id": f"t{k}", "name": "get_weather",
                                                    "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": "ok"}]}]
    body: dict[str, Any] = {"model": model, "messages": msgs, "system": system, "tools": list(tools)}
    if thinking is not None:
        body["thinking"] = thinking
    return anthropic.decode_request(body)


def conversation(shapes: list[dict[str, Any]], *, keep: bool = True,
                 caps: ModelCaps | None = None) -> list[tuple[Request, prefix.Outcome]]:
    """Each request of a conversation through ``stabilize`` as the pipeline runs it: the notes recorded so far, the
    replayed assistant messages (at 1, 3, ...) matched to positions 0, 1, ..."""
    notes: list[dict[str, Any]] = []
    out: list[tuple[Request, prefix.Outcome]] = []
    for n, shape in enumerate(shapes):
        req = request(n, **shape)
        history = prefix.recorded(list(enumerate(notes))) if notes else None
        replayed = {1 + 2 * k: k for k in range(n)}
        inserted = {i: notes[p][prefix.INSERTED] for i, p in replayed.items() if prefix.INSERTED in notes[p]}
        result = prefix.stabilize(req, caps or caps_for(req.model), history, inserted, replayed, keep=keep)
        notes.append(result.note)
        out.append((req, result))
    return out


def body_of(req: Request) -> dict[str, Any]:
    return anthropic.encode_request(req)


def test_a_new_system_prompt_becomes_a_system_message_and_stays_in_place() -> None:
    runs = conversation([{"system": "S0"}, {"system": "S1"}, {"system": "S1"}, {"system": "S2"}])
    assert not runs[0][1].changed and runs[0][1].note[prefix.SENT] == {"system": "S0", "tools": [W]}
    req, out = runs[1]
    body = body_of(req)
    assert body["system"] == "S0" and body["messages"][-1] == {"role": "system", "content": [
        {"type": "text", "text": "S1"}]}
    assert [a.kind for a in out.actions] == [ActionKind.PREFIX_SYSTEM_KEPT] and out.betas == []
    # unchanged since: no new message, the recorded one put back before the answer it preceded
    body = body_of(runs[2][0])
    assert body["system"] == "S0" and [m["role"] for m in body["messages"]] == [
        "user", "assistant", "user", "system", "assistant", "user"]
    assert [a.kind for a in runs[2][1].actions] == [ActionKind.PREFIX_REINSERTED]
    body = body_of(runs[3][0])
    assert [m["content"][0]["text"] for m in body["messages"] if m["role"] == "system"] == ["S1", "S2"]


def test_added_and_removed_tools_become_tool_changes() -> None:
    runs = conversation([{"tools": [W]}, {"tools": [W, C]}, {"tools": [W, C]}, {"tools": [C]}])
    req, out = runs[1]
    body = body_of(req)
    assert body["tools"] == [W, {**C, "defer_loading": True}]
    assert body["messages"][-1]["content"] == [{"type": "tool_addition",
                                                "tool": {"type": "tool_reference", "name": "get_time"}}]
    assert out.betas == [prefix.TOOL_CHANGES_BETA]
    assert [m["role"] for m in body_of(runs[2][0])["messages"]].count("system") == 1  # nothing new
    assert runs[2][1].betas == [prefix.TOOL_CHANGES_BETA]  # the re-inserted addition still needs its beta
    body = body_of(runs[3][0])
    assert body["tools"] == [W, {**C, "defer_loading": True}]  # the recorded set, the removal as a block
    assert body["messages"][-1]["content"] == [{"type": "tool_removal",
                                                "tool": {"type": "tool_reference", "name": "get_weather"}}]


def test_what_is_no_difference_changes_nothing() -> None:
    runs = conversation([{"system": "S", "tools": [W, C]},
                         {"system": [{"type": "text", "text": " S\n", "cache_control": {"type": "ephemeral"}}],
                          "tools": [{**C, "cache_control": {"type": "ephemeral"}}, W]}])
    assert not runs[1][1].changed and runs[1][1].actions == [] and prefix.SENT not in runs[1][1].note


def test_not_kept_a_changed_prefix_opts_into_drop_block() -> None:
    shapes = [{"tools": [W]}, {"tools": [W, C], "thinking": {"type": "enabled", "budget_tokens": 2048,
                                                               "display": "omitted"}}, {"tools": [W, C]}]
    for keep, caps in ((False, None), (True, ModelCaps("anthropic", can_disable_thinking=False, adaptive_only=True,
                                                           prefix_bound=True))):
        runs = conversation(shapes, keep=keep, caps=caps)
        req, out = runs[1]
        assert req.thinking == {"type": "adaptive", "display": "omitted",
                                "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
        assert out.betas == [prefix.BINDING_BETA] and body_of(req)["tools"] == [W, C]
        assert [a.kind for a in out.actions] == [ActionKind.BINDING_DROP_BLOCK]
        # the next request still replays the block produced under the old tool set: still opted in
        assert runs[2][1].betas == [prefix.BINDING_BETA]


def test_not_kept_and_nothing_stale_nothing_changes() -> None:
    runs = conversation([{"system": "S0"}, {"system": "S0"}], keep=False)
    assert runs[1][1].actions == [] and runs[1][0].thinking is None


def test_models_that_do_not_bind_are_left_alone() -> None:
    notes = [{prefix.SENT: {"system": "S0"}, prefix.CLIENT_SYSTEM: "x"}]
    req = request(1, system="S1", model="claude-sonnet-4-5")
    out = prefix.stabilize(req, caps_for(req.model), prefix.recorded(enumerate(notes)), {}, {1: 0}, keep=True)
    assert out == prefix.Outcome() and body_of(req)["system"] == "S1"


def test_with_betas_adds_to_what_the_client_sent() -> None:
    assert prefix.with_betas("a, b", ["b", "c"]) == "a,b,c"
    assert prefix.with_betas(None, [prefix.BINDING_BETA]) == prefix.BINDING_BETA


def test_strip_bound_removes_the_named_block_and_every_later_one() -> None:
    req = request(3, thinking={"type": "adaptive"})
    caps = ModelCaps("anthropic", can_disable_thinking=False, adaptive_only=True, prefix_bound=True)
    actions = strip_bound(req, 3, 0, caps, Policy())
    stripped = [a.message_index for a in actions if a.kind is ActionKind.BINDING_STRIPPED]
    assert stripped == [3, 5]
    body = body_of(req)
    assert body["messages"][1]["content"][0]["type"] == "thinking"  # before the named block: kept
    assert all(b["type"] != "thinking" for m in body["messages"][2:] if m["role"] == "assistant"
               for b in m["content"])
    assert strip_bound(request(1), 1, 1, caps, Policy()) == []  # not a thinking block: nothing to do


def test_the_note_round_trips_through_the_store_codec() -> None:
    note = {prefix.CLIENT_SYSTEM: "a", prefix.CLIENT_TOOLS: "b", prefix.SENT: {"system": "S0", "tools": [W]},
            prefix.INSERTED: [{"role": "system", "content": [{"type": "text", "text": "S1"}]}]}
    rec = TurnRecord(content=[{"type": "text", "text": "x"}], prefix=note)
    assert records.decode_turn(records.encode_turn(rec)).prefix == note
    plain = TurnRecord(content=[{"type": "text", "text": "x"}])
    assert len(records.unpack(records.encode_turn(plain))) == 10  # no note: the array an older reader knows


def test_not_kept_stale_blocks_of_earlier_turns_are_removed_from_the_front() -> None:
    """A tool added at a new user turn: the earlier turn's blocks (produced under the old tool set) are removed, the
    open loop's own kept; no drop_block (which would take every later block with them)."""
    think = [{"type": "thinking", "thinking": "t0", "signature": "s0"}]
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [*think, {"type": "tool_use", "id": "a", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t1", "signature": "s1"},
                                          {"type": "text", "text": "done"}]},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t2", "signature": "s2"},
                                          {"type": "tool_use", "id": "b", "name": "get_time", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "ok"}]}]
    req = anthropic.decode_request({"model": BOUND, "messages": msgs, "system": "S", "tools": [W, C]})
    notes = [{prefix.SENT: {"system": "S", "tools": [W]}}, {}, {prefix.SENT: {"system": "S", "tools": [W, C]}}]
    out = prefix.stabilize(req, caps_for(BOUND), prefix.recorded(enumerate(notes)), {}, {1: 0, 3: 1, 5: 2},
                           keep=False)
    assert [(a.kind, a.message_index) for a in out.actions] == [(ActionKind.BINDING_STRIPPED, 1),
                                                                 (ActionKind.BINDING_STRIPPED, 3)]
    assert out.betas == [] and req.thinking is None
    body = body_of(req)
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]
    assert [b["type"] for b in body["messages"][3]["content"]] == ["text"]
    assert body["messages"][5]["content"][0] == {"type": "thinking", "thinking": "t2", "signature": "s2"}


def test_records_stay_small_only_what_changed_is_kept() -> None:
    big = [W, C, *({"name": f"tool_{k}", "input_schema": {"type": "object"}} for k in range(20))]
    runs = conversation([{"system": f"S{n}", "tools": big} for n in range(3)], keep=False)
    assert runs[0][1].note[prefix.SENT] == {"system": "S0", "tools": big}  # the first record: all of it
    assert [r[1].note[prefix.SENT] for r in runs[1:]] == [{"system": "S1"}, {"system": "S2"}]  # then the system
    kept = conversation([{"system": f"S{n}", "tools": big} for n in range(3)])
    assert [prefix.SENT in r[1].note for r in kept] == [True, False, False]  # kept: nothing is sent differently


REFUSED_SYSTEMS: list[Any] = [7, None, "", " \n", [{"type": "text"}], [{"type": "text", "text": 7}],
                              [{"type": "text", "text": "  "}], [{"type": "text", "text": "S1", "id": "lc_1"}],
                              [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}],
                              ["S1"]]


def test_a_system_the_upstream_refuses_is_sent_as_the_client_has_it() -> None:
    """A client's new system prompt that the API refuses (docs/upstream-rules.md rule 109) is not carried into a
    system message (where it would crash, vanish or be refused in other words): the request goes as the client has
    it, and the upstream answers the client's own 400."""
    for system in REFUSED_SYSTEMS:
        req, out = conversation([{"system": "S0"}, {"system": system}])[1]
        body = body_of(req)
        assert body["system"] == system and [m["role"] for m in body["messages"]] == [
            "user", "assistant", "user"], system
        assert ActionKind.PREFIX_SYSTEM_KEPT not in [a.kind for a in out.actions]
    carried = [{"type": "text", "text": "S1", "citations": None, "cache_control": {"type": "ephemeral"}}]
    for system, blocks in ((carried, [{"type": "text", "text": "S1", "citations": None}]),
                           ([], [{"type": "text", "text": "(no system prompt)"}])):
        body = body_of(conversation([{"system": "S0"}, {"system": system}])[1][0])
        assert body["system"] == "S0" and body["messages"][-1] == {"role": "system", "content": blocks}


def test_a_system_prompt_that_reads_absent_is_a_system_prompt() -> None:
    """The marker for "the request had no system" is not a string a client can send: a client whose system prompt
    is the text "absent" (as any JSON parse makes it: a new string object) keeps it, unchanged, turn after turn."""
    absent = "".join(["ab", "sent"])  # not the interned literal
    runs = conversation([{"system": absent}, {"system": absent}, {"system": absent}])
    for req, out in runs[1:]:
        assert not out.changed and out.actions == [] and prefix.SENT not in out.note
        assert body_of(req)["system"] == "absent" and "system" not in {m["role"] for m in body_of(req)["messages"]}


def test_a_tool_redefined_under_its_name_is_not_kept_as_recorded() -> None:
    """The client changed ``get_weather``'s schema: the recorded definition would have the model call it with
    arguments the client's tool no longer takes (a silent wrong turn), and tool changes can only add or remove a
    name. So the client's tools go as it has them, and the thinking produced under the old ones is dropped
    (``drop_block`` here, the open loop's blocks being the stale ones), never sent against a prefix they were not
    produced under. A definition that differs only in ``cache_control`` or ``defer_loading`` is the same tool."""
    w2 = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]}}
    runs = conversation([{"tools": [W, C]}, {"tools": [w2, C]}, {"tools": [w2, C]}])
    req, out = runs[1]
    assert body_of(req)["tools"] == [w2, C]
    assert [a.kind for a in out.actions] == [ActionKind.BINDING_DROP_BLOCK] and out.betas == [prefix.BINDING_BETA]
    assert out.note[prefix.SENT] == {"tools": [w2, C]}
    assert body_of(runs[2][0])["tools"] == [w2, C]
    same = conversation([{"tools": [W, C]}, {"tools": [{**W, "cache_control": {"type": "ephemeral"}},
                                                         {**C, "defer_loading": False}]}])
    assert same[1][1].actions == [] and body_of(same[1][0])["tools"] == [W, C]

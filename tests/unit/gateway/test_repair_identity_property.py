"""Never another conversation's turn (issue 20), as a property over the real load, identification and repair.

Several conversations of ONE tenant are recorded in the embedded store the way the pipeline records them
(``records.turn_record``, ``TurnWrite``): the same visible text and the same tool call in every turn of every
conversation, only the thinking (and the upstream's tool ids) differ; some conversations share their first user
message too (then nothing the client sends tells them apart). A request replays one conversation's history,
mangled as IDE clients do (thinking dropped, tool ids renumbered per conversation or per message, a tool round
dropped, the first message edited, a header or none), and goes through ``identify.build_query`` ->
``Store.load`` -> ``identify.identify_conversation`` -> ``records.records_from`` -> ``repair``. Whatever the
history and the mangling: every turn repair matches is the identified conversation's, and is exactly the turn the
client's message stands for (the conversation it came from, at its position there). And it is not vacuous: a
client that keeps its tool ids, or names its conversation, gets every turn back.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Turn
from gateway.pipeline import identify
from gateway.pipeline.identify import path_fingerprint
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import records_from, turn_record
from state.keys import new_scid
from state.memory_store import MemoryStore
from state.store import TurnWrite

TENANT = "tenant-property"
TEXT = "Step 1: let me look at the files."
SCID_HEADER = "x-ag-conversation-id"


def _assistant(conv: int, k: int, file: str) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": f"conversation {conv} turn {k}: look at {file}",
             "signature": f"sig{conv}-{k}"},
            {"type": "text", "text": TEXT},
            {"type": "tool_use", "id": f"toolu_c{conv}_t{k}", "name": "read_file", "input": {"path": file}}]


def _result(tid: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": "print(1)"}]}


@dataclass
class Recorded:
    scid: str
    history: list[dict[str, Any]]  # the faithful history: first user message, then (assistant, results) per turn


async def _record(store: MemoryStore, conv: int, prompt: str, files: list[str]) -> Recorded:
    scid = new_scid()
    history: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for k, file in enumerate(files):
        msgs = anthropic.decode_request({"model": "m", "max_tokens": 1, "messages": copy.deepcopy(history)}).messages
        content = _assistant(conv, k, file)
        turn = Turn(id=f"msg_{conv}_{k}", model="claude-opus-4-5",
                    content=[anthropic.decode_block(b, "x") for b in content])
        rec = turn_record(turn, msgs, upstream="anthropic", dialect="anthropic")
        await store.record(TENANT, TurnWrite(rec, scid=scid, expected_position=k,
                                             fingerprints=[rec.prefix_fingerprint] if rec.prefix_fingerprint else []))
        history += [{"role": "assistant", "content": content}, _result(content[2]["id"])]
    return Recorded(scid, history)


def _mangle(history: list[dict[str, Any]], how: str) -> tuple[list[dict[str, Any]], list[int | None]]:
    """The mangled copy, and for each of its messages the recorded position it stands for (None: a user one)."""
    out = copy.deepcopy(history)
    positions: list[int | None] = []
    k = 0
    for m in out:
        positions.append(k if m["role"] == "assistant" else None)
        k += m["role"] == "assistant"
    if "drop_round" in how and len(out) >= 5:  # the client drops its first tool round (assistant + results)
        del out[1:3], positions[1:3]
    if "edit_first" in how:
        out[0]["content"] += " (edited)"
    per_message = "ids_per_message" in how
    if per_message or "ids_per_conversation" in how:
        ids: dict[str, str] = {}
        for m in out:
            for b in m["content"] if isinstance(m["content"], list) else ():
                if b["type"] == "tool_use":
                    new = "call_0" if per_message else f"call_{len(ids) + 1}"
                    ids[b["id"]] = new
                    b["id"] = new
                elif b["type"] == "tool_result":
                    b["tool_use_id"] = ids[b["tool_use_id"]]
    if "drop_thinking" in how:
        for m in out:
            if m["role"] == "assistant":
                m["content"] = [b for b in m["content"] if b["type"] != "thinking"]
    return out, positions


def _visible(content: list[dict[str, Any]]) -> list[Any]:
    """What a client that drops thinking and renumbers tool ids still shows of a turn."""
    return [(b["type"], b.get("text"), b.get("name"), b.get("input")) for b in content if b["type"] != "thinking"]


MANGLINGS = ["faithful", "drop_thinking", "drop_thinking+ids_per_conversation", "drop_thinking+ids_per_message",
             "ids_per_message", "drop_thinking+ids_per_conversation+drop_round",
             "drop_thinking+ids_per_message+edit_first", "drop_thinking+edit_first", "drop_round"]


async def _replay(store: MemoryStore, convs: list[Recorded], source: int, upto: int, how: str,
                  header: str) -> tuple[str | None, dict[int, tuple[str, int]], list[int | None]]:
    """(the identified conversation, each matched message's turn as (scid, position), the position each message
    stands for: its own turn's, or, where nothing the client sent tells them apart (its tool ids renumbered, its
    path exactly what an earlier turn answered: a dropped tool round), the turn its path gives it)."""
    rec = convs[source]
    history, positions = _mangle(rec.history[:1 + 2 * upto], how)
    msgs = anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 1, "messages": history}).messages
    scid = {"none": None, "own": rec.scid, "fresh": new_scid()}[header]
    query = identify.build_query(msgs, scid)
    result = await store.load(TENANT, query)
    found = identify.identify_conversation(result, query)
    paths_before = [path_fingerprint(msgs[:i]) for i in range(len(msgs))]
    client_ids = [m.tool_use_ids() for m in msgs]
    res = repair(msgs, records_from(result, found.scid))
    conv = await store.get_conversation(TENANT, rec.scid)
    assert conv is not None
    for i, ids in enumerate(client_ids):
        if positions[i] is None or not ids or any(conv.turn_by_tool_id(t) for t in ids):
            continue
        by_path = [r.position for r in conv.turns if r.prefix_fingerprint == paths_before[i]]
        turn = res.matched.get(i)
        if turn is not None and turn.position in by_path and _visible(conv.turn_at(turn.position).content) == \
                _visible(conv.turn_at(positions[i]).content):
            positions[i] = turn.position
    return found.scid, {i: (t.scid, t.position) for i, t in res.matched.items()}, positions


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=st.lists(st.sampled_from(["fix the bug", "fix the bug ", "add a test", "write docs"]),
                        min_size=2, max_size=5),
       turns=st.integers(2, 4), files=st.lists(st.sampled_from(["a.py", "b.py"]), min_size=20, max_size=20),
       source=st.integers(0, 4), upto=st.integers(1, 4),
       how=st.sampled_from(MANGLINGS), header=st.sampled_from(["none", "own", "fresh"]))
def test_every_matched_turn_is_the_identified_conversations_at_the_clients_place(
        prompts: list[str], turns: int, files: list[str], source: int, upto: int, how: str, header: str) -> None:
    async def run() -> None:
        store = MemoryStore()
        convs = [await _record(store, c, p, files[4 * c:4 * c + turns]) for c, p in enumerate(prompts)]
        src = source % len(convs)
        identified, matched, positions = await _replay(store, convs, src, min(upto, turns), how, header)
        for i, (scid, position) in matched.items():
            assert scid == identified, (how, header, "a turn from outside the identified conversation")
            assert (scid, position) == (convs[src].scid, positions[i]), (how, header, i, "not the client's turn")
        own_path = [" ".join(p.split()) for p in prompts].count(" ".join(prompts[src].split())) == 1
        shifted = "drop_round" in how and "ids_" in how  # its path gives each message the turn before its own
        if ("edit_first" not in how and not shifted and (header == "own" or own_path)) or how in (
                "faithful", "drop_thinking", "drop_round"):
            # evidence that names the conversation (its id, or tool ids the upstream minted): every turn restored
            assert identified == convs[src].scid and len(matched) == sum(p is not None for p in positions), (how,)
    asyncio.run(run())

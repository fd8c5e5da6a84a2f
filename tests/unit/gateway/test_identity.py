"""Unit tests of conversation identification (pure functions of gateway/pipeline/identify.py).

Order of evidence, all within one tenant: the X-AG-Conversation-Id header > tool_use ids > the prefix
fingerprint. Text hashes never pick a conversation. A malformed or unknown header is a miss; tool ids that
name several conversations are no evidence.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message
from gateway.pipeline.identify import (
    EDGE_TURNS,
    RECENT_TURNS,
    PathHash,
    build_query,
    edge_tool_ids,
    identify_conversation,
    path_fingerprint,
    scid_from_header,
    tenant_of,
)
from state.records import ConversationState, Location
from state.store import LoadQuery, LoadResult

HEADER, BY_TOOL, BY_TEXT, BY_FP = ("scid_header_" + "h" * 10, "scid_tool_" + "t" * 10,
                                   "scid_text_" + "x" * 10, "scid_fprint_" + "f" * 10)


def _conv(scid: str) -> ConversationState:
    return ConversationState(scid=scid, created_at=0.0, updated_at=0.0, version=1, turns=(), last_verified=None,
                             first_position=0, next_position=0)


def _loc(scid: str) -> Location:
    return Location(scid, "turn-" + scid, 0)


def _result(*, header: bool = True, tool: bool = True, fp: bool = True) -> LoadResult:
    return LoadResult(
        conversation=_conv(HEADER) if header else None,
        tool_hits={"toolu_1": _loc(BY_TOOL)} if tool else {},
        fingerprint_hits={"fp1": BY_FP} if fp else {},
    )


QUERY = LoadQuery(scid=HEADER, tool_ids=["toolu_1"], fingerprints=["fp1"])


def test_evidence_order_header_tool_fingerprint() -> None:
    """(Text is no evidence at all: no index holds it, and ``LoadResult`` has nothing of it.)"""
    got = identify_conversation(_result(), QUERY)
    assert (got.scid, got.via) == (HEADER, "header")
    got = identify_conversation(_result(header=False), QUERY)
    assert (got.scid, got.via) == (BY_TOOL, "tool_id")
    got = identify_conversation(_result(header=False, tool=False), QUERY)
    assert (got.scid, got.via) == (BY_FP, "fingerprint")
    got = identify_conversation(_result(header=False, tool=False, fp=False), QUERY)
    assert (got.scid, got.via) == (None, "none")


def test_a_header_naming_no_stored_conversation_falls_through() -> None:
    """An unknown (expired, foreign) SCID is a miss: the body's evidence decides."""
    got = identify_conversation(_result(header=False), QUERY)
    assert got.via == "tool_id"
    got = identify_conversation(_result(), LoadQuery(scid=None, tool_ids=["toolu_1"]))
    assert got.via == "tool_id"  # a loaded conversation counts as the header only when the client named it


def _holding(scid: str, *turn_ids: str) -> ConversationState:
    from state.records import TurnRecord
    turns = tuple(TurnRecord(content=[{"type": "text", "text": t}], turn_id=(t * 64)[:64], position=n)
                  for n, t in enumerate(turn_ids))
    return ConversationState(scid=scid, created_at=0.0, updated_at=0.0, version=1, turns=turns, last_verified=None,
                             first_position=0, next_position=len(turns))


def test_tool_ids_naming_several_conversations_are_no_evidence() -> None:
    """Conflicting tool-id hits (a client that numbers its calls itself reuses ids across conversations) pick
    none by count: only the one loaded conversation holding every hit turn (a fork holds its parent's turns)
    is picked, and the fingerprint decides otherwise."""
    a, b = Location(BY_TOOL, "a" * 64, 0), Location(BY_TEXT, "b" * 64, 0)
    conflicting = LoadResult(tool_hits={"x": a, "y": b, "z": b}, fingerprint_hits={"fp1": BY_FP},
                             conversations={BY_TOOL: _holding(BY_TOOL, "a"), BY_TEXT: _holding(BY_TEXT, "b")})
    got = identify_conversation(conflicting, LoadQuery(tool_ids=["x", "y", "z"], fingerprints=["fp1"]))
    assert (got.scid, got.via) == (BY_FP, "fingerprint")  # not BY_TEXT, the most referenced
    fork = LoadResult(tool_hits={"x": a, "y": b},
                      conversations={BY_TOOL: _holding(BY_TOOL, "a"), BY_TEXT: _holding(BY_TEXT, "a", "b")})
    got = identify_conversation(fork, LoadQuery(tool_ids=["x", "y"]))
    assert (got.scid, got.via) == (BY_TEXT, "tool_id")  # it holds both turns


def test_fingerprint_hit_only_for_the_queried_fingerprint() -> None:
    result = LoadResult(fingerprint_hits={"other": BY_FP})
    assert identify_conversation(result, LoadQuery(fingerprints=["fp1"])).via == "none"


def test_scid_header_validity() -> None:
    assert scid_from_header({}) == (None, False)
    assert scid_from_header({"x-ag-conversation-id": "../../etc/passwd"}) == (None, True)
    assert scid_from_header({"x-ag-conversation-id": f" {HEADER} "}) == (HEADER, True)


def test_tenant_is_keyed_and_never_the_credential() -> None:
    a = tenant_of("secret-1", {"x-api-key": "sk-a"})
    assert a and "sk-a" not in a
    assert a == tenant_of("secret-1", {"authorization": "Bearer sk-a"})
    assert a != tenant_of("secret-2", {"x-api-key": "sk-a"}) and a != tenant_of("secret-1", {"x-api-key": "sk-b"})
    assert tenant_of("secret-1", {}) is None


def _msgs(*messages: dict[str, Any]) -> list[Message]:
    return anthropic.decode_request({"model": "claude-opus-4-5", "max_tokens": 1, "messages": list(messages)}).messages


def _loop(ids: list[str], thinking: str, text: str, prompt: str = "weather in Oslo?") -> list[Message]:
    out: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for n, tid in enumerate(ids):
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": f"{thinking} {n}", "signature": "s"})
        if text:
            content.append({"type": "text", "text": f"{text} {n}"})
        content.append({"type": "tool_use", "id": tid, "name": "f", "input": {}})
        out += [{"role": "assistant", "content": content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": f"r{n}"}]}]
    return _msgs(*out)


def test_fingerprint_ignores_assistant_side_and_tool_ids_and_result_bodies() -> None:
    """A client that regenerated every tool id and dropped all text and thinking replays the same path."""
    original = _loop(["toolu_a", "toolu_b"], "Plan:\r\n step", "Checking.")
    mangled = _loop(["call_1", "call_2"], "", "")
    for m in mangled:
        for b in m.content:
            if b.type == "tool_result":
                b.content = "other body"  # type: ignore[union-attr]
    assert path_fingerprint(original) == path_fingerprint(mangled) is not None
    assert path_fingerprint(_loop(["x"], "", "", prompt="weather in Rome?")) != path_fingerprint(_loop(["x"], "", ""))
    assert path_fingerprint(_loop(["x", "y"], "", "")) != path_fingerprint(_loop(["x"], "", ""))
    assert path_fingerprint([]) is None


def test_query_covers_recent_turns_and_the_prefix_before_the_last_assistant() -> None:
    msgs = _loop([f"toolu_{n}" for n in range(RECENT_TURNS + 2)], "think", "say")
    q = build_query(msgs, HEADER)
    assert q.scid == HEADER
    assert q.tool_ids == [f"toolu_{n}" for n in range(2, RECENT_TURNS + 2)]  # only the recent turns
    assert len(q.exact_hashes) == RECENT_TURNS
    last_assistant = max(i for i, m in enumerate(msgs) if m.role == "assistant")
    assert q.fingerprints == [path_fingerprint(msgs[:last_assistant])]
    assert build_query(_msgs({"role": "user", "content": "hi"}), None).fingerprints == []


def test_a_fingerprint_continued_from_a_known_prefix_is_the_whole_fingerprint() -> None:
    msgs = _loop(["a", "b", "c"], "think", "text", prompt="  Weather\r\nin Oslo?  ")
    msgs.insert(3, _msgs({"role": "user", "content": "and tomorrow?"})[0])
    for n in range(len(msgs) + 1):
        known = (n, PathHash().update(msgs[:n]))
        assert path_fingerprint(msgs, known) == path_fingerprint(msgs)
        assert known[1].hexdigest() == path_fingerprint(msgs[:n])  # continuing did not change the known state
    assert path_fingerprint(msgs[:2], (3, PathHash().update(msgs[:3]))) == path_fingerprint(msgs[:2])  # too long
    assert PathHash().hexdigest() is None


def test_edge_tool_ids_are_those_of_the_first_and_last_assistant_turns() -> None:
    for turns in range(0, 2 * EDGE_TURNS + 4):
        msgs = _loop([f"toolu_{n}" for n in range(turns)], "think", "")
        msgs.insert(1, _msgs({"role": "user", "content": "and then?"})[0])  # roles need not alternate
        picked = list(range(turns)) if turns <= 2 * EDGE_TURNS else \
            [*range(EDGE_TURNS), *range(turns - EDGE_TURNS, turns)]
        assert edge_tool_ids(msgs) == [f"toolu_{n}" for n in picked], turns

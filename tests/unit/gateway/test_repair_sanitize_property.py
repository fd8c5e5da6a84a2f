"""Random histories x random manglings x record availability -> the simulator's rules hold.

Histories are minted with the simulator's own Minter, so every original signature is
valid; the strict validator (``thinkgate_sim.rules``) then judges what repair +
sanitize would send upstream.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.routing import caps_for
from gateway.pipeline.identify import RECENT_TURNS, path_fingerprint
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import RecordedTurn, Records, TurnsConversation
from gateway.pipeline.sanitize.core import Policy, sanitize
from state.keys import exact_hash
from tests.support.manglings.anthropic import HISTORY_MANGLINGS, MESSAGE_MANGLINGS
from thinkgate_sim.rules import check_messages_request
from thinkgate_sim.signing import Minter

MODEL = "claude-sonnet-4-5"
MINTER = Minter(b"property-test")
BETAS = frozenset({"interleaved-thinking-2025-05-14"})
AWKWARD = ["Plan:\r\n  step one  \n\n", "café — 思考 🤔\r\n", " lead and trail ", "", "x\n\n\ny"]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict[str, Any]], bool]:
    """(messages, ends_in_loop); every assistant message minted like the upstream would."""
    msgs: list[dict[str, Any]] = []
    n_segments = draw(st.integers(1, 3))
    resp = 0
    ends_in_loop = False
    for seg in range(n_segments):
        msgs.append({"role": "user", "content": f"question {seg}"})
        rounds = draw(st.integers(0, 3))
        last = seg == n_segments - 1
        open_loop = last and rounds > 0 and draw(st.booleans())
        for r in range(rounds + (0 if open_loop else 1)):
            resp += 1
            rid = f"msg_{resp}"
            text = draw(st.sampled_from(AWKWARD)) + f"r{resp}"
            content: list[dict[str, Any]] = [{"type": "thinking", "thinking": text,
                                              "signature": MINTER.mint_thinking(MODEL, text, rid, 0)}]
            if draw(st.booleans()):
                content.append({"type": "redacted_thinking",
                                "data": MINTER.mint_redacted(MODEL, rid, 1, run_pos=1, run_len=2)})
                content[0]["signature"] = MINTER.mint_thinking(MODEL, text, rid, 0, run_pos=0, run_len=2)
            is_tool_round = r < rounds
            if draw(st.booleans()) or not is_tool_round:
                content.append({"type": "text", "text": f"answer {resp}\r\n "})
            ids = []
            if is_tool_round:
                for k in range(draw(st.integers(1, 2))):
                    tid = f"toolu_{resp}_{k}"
                    ids.append(tid)
                    content.append({"type": "tool_use", "id": tid, "name": "get_weather", "input": {"k": k}})
            msgs.append({"role": "assistant", "content": content})
            if ids:
                msgs.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": t, "content": "sunny"} for t in ids]})
        ends_in_loop = open_loop
    if not ends_in_loop and msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": "and now?"})
    return msgs, ends_in_loop


def records_for(msgs: list[dict[str, Any]], keep: list[bool]) -> Records:
    """Records as the load stage gives them: the whole conversation (each turn with the path it answered),
    plus index hits for the most recent turns only (``identity.RECENT_TURNS``)."""
    recs = Records(scid="conv", conversation=TurnsConversation())
    n_assistant = sum(1 for m in msgs if m["role"] == "assistant")
    decoded = anthropic.decode_request({"model": MODEL, "max_tokens": 1, "messages": copy.deepcopy(msgs)}).messages
    pos = 0
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        path = path_fingerprint(decoded[:i])
        if keep[pos % len(keep)] and pos < n_assistant - RECENT_TURNS:
            recs.conversation[pos] = RecordedTurn("conv", pos, tuple(anthropic.decode_block(b, "x")
                                                                    for b in m["content"]), path=path)
        elif keep[pos % len(keep)]:
            blocks = tuple(anthropic.decode_block(b, "x") for b in m["content"])
            turn = RecordedTurn("conv", pos, blocks, path=path)
            recs.conversation[pos] = turn
            for b in m["content"]:
                if b["type"] == "tool_use":
                    recs.by_tool_id[b["id"]] = turn
                elif b["type"] == "thinking" and b["thinking"]:
                    recs.signatures[exact_hash(b["thinking"])] = b["signature"]
        pos += 1
    return recs


def run_pipeline(body: dict[str, Any], recs: Records, policy: Policy) -> tuple[dict[str, Any], Any]:
    req = anthropic.decode_request(copy.deepcopy(body))
    res = repair(req.messages, recs)
    actions = sanitize(req, res.is_verified, caps_for(req.model), policy, BETAS, res.verbatim)
    return anthropic.encode_request(req), actions


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), mangling=st.sampled_from(sorted(MESSAGE_MANGLINGS)),
       hist_mangling=st.sampled_from([None, *sorted(HISTORY_MANGLINGS)]),
       keep=st.sampled_from([[True], [False], [True, False], [False, True]]),
       policy=st.sampled_from([Policy("drop"), Policy("text")]))
def test_sanitized_output_satisfies_every_simulator_rule(history: tuple[list[dict[str, Any]], bool], mangling: str,
                                                          hist_mangling: str | None, keep: list[bool],
                                                          policy: Policy) -> None:
    msgs, _ = history
    recs = records_for(msgs, keep)
    mangled = [dict(m) for m in msgs]
    for m in mangled:
        if m["role"] == "assistant":
            m["content"] = MESSAGE_MANGLINGS[mangling](copy.deepcopy(m["content"]))
    if hist_mangling:
        mangled = HISTORY_MANGLINGS[hist_mangling](mangled)
    body = {"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": mangled}
    out, _ = run_pipeline(body, recs, policy)
    violation = check_messages_request(out, betas=BETAS, minter=MINTER)
    assert violation is None, (violation, mangling, hist_mangling)


@settings(max_examples=150, deadline=None)
@given(history=histories(), mangling=st.sampled_from(sorted(MESSAGE_MANGLINGS)))
def test_with_full_records_thinking_is_kept_on_every_turn(history: tuple[list[dict[str, Any]], bool],
                                                          mangling: str) -> None:
    msgs, _ = history
    recs = records_for(msgs, [True])
    mangled = copy.deepcopy(msgs)
    for m in mangled:
        if m["role"] == "assistant":
            m["content"] = MESSAGE_MANGLINGS[mangling](m["content"])
    body = {"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": mangled}
    out, _ = run_pipeline(body, recs, Policy())
    assert out.get("thinking") == body["thinking"]
    assert [m["content"] for m in out["messages"] if m["role"] == "assistant"] == \
        [m["content"] for m in msgs if m["role"] == "assistant"]


def test_a_turn_whose_path_the_client_changed_is_found_by_its_signed_thinking() -> None:
    """An orphan tool result put before the first message changes the path of every turn, and the client dropped
    the redacted block beside its thinking: the thinking's exact text (the model's own words, signed) still names
    its turn, which is restored whole; verified by the exact-text signature alone, the incomplete run would be
    rejected (a found case of the property above)."""
    text = "Plan:\r\n  step one  \n\nr1"
    sig = MINTER.mint_thinking(MODEL, text, "msg_1", 0, run_pos=0, run_len=2)
    content = [{"type": "thinking", "thinking": text, "signature": sig},
               {"type": "redacted_thinking", "data": MINTER.mint_redacted(MODEL, "msg_1", 1, run_pos=1, run_len=2)},
               {"type": "text", "text": "answer 1"},
               {"type": "tool_use", "id": "toolu_1_0", "name": "get_weather", "input": {"k": 0}}]
    msgs = [{"role": "user", "content": "question 0"}, {"role": "assistant", "content": content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1_0", "content": "sunny"}]}]
    recs = records_for(msgs, [True])
    mangled = HISTORY_MANGLINGS["orphan_tool_result_at_start"](copy.deepcopy(msgs))
    mangled[1]["content"] = MESSAGE_MANGLINGS["drop_redacted"](mangled[1]["content"])
    mangled[1]["content"][-1]["id"] = mangled[2]["content"][0]["tool_use_id"] = "call_1"  # ids renumbered too
    body = {"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": mangled}
    out, _ = run_pipeline(body, recs, Policy())
    assert check_messages_request(out, betas=BETAS, minter=MINTER) is None
    assert out["messages"][1]["content"] == content

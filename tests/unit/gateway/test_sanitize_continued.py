"""Sanitize continued from the previous request's look at a replayed history (``sanitize.Sanitized``): the
tool-chain check and the trailing-loop rule folded over a history in two parts give what folding it at once
gives, at every split; a seed is only used for the messages it was made from, as repair left them then.

(The pipeline-level equivalence, with and without the seed, over faithful and mangled tool loops on the real
simulator and Redis, is ``tests/support/gateway/replay_memo_tests.py``.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.continuation.replay_memo import Carried, Ticket, sanitize_prior
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message
from gateway.dialects.routing import caps_for
from gateway.dialects.toolchain import chain_fold, chain_intact
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import ConversationView, RecordedTurn, Records
from gateway.pipeline.sanitize.core import (
    Policy,
    Sanitized,
    SanitizeResult,
    loop_fold,
    loop_start,
    sanitize,
    trailing_loop_start,
)
from gateway.pipeline.sanitize.core import run as sanitize_run

MODEL = "claude-sonnet-4-5"


def backward_loop_start(msgs: list[Message]) -> int | None:
    """The trailing-loop rule as its docstring words it, walked from the end (the oracle)."""
    last_user, first = True, None
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if m.role == "assistant":
            first = i
        elif m.role == "user":
            has_results = bool(m.tool_result_ids())
            if last_user and not has_results:
                return None
            last_user = False
            if not has_results:
                return first
    return None if last_user else first


IDS = ["t1", "t2", "t3", "t4"]


@st.composite
def message_lists(draw: st.DrawFn) -> list[Message]:
    """Histories with every shape the two rules tell apart: openers, tool results answering the previous
    calls or not (missing, extra, reordered, after text), repeated tool ids, consecutive roles."""
    raw: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 9))):
        if draw(st.booleans()):
            ids = draw(st.lists(st.sampled_from(IDS), max_size=2))
            content: list[dict[str, Any]] = [{"type": "text", "text": "ok"}] if draw(st.booleans()) or not ids else []
            content += [{"type": "tool_use", "id": t, "name": "f", "input": {}} for t in ids]
            raw.append({"role": "assistant", "content": content})
        else:
            ids = draw(st.lists(st.sampled_from(IDS), max_size=2))
            results = [{"type": "tool_result", "tool_use_id": t, "content": "r"} for t in ids]
            text = [{"type": "text", "text": "go on"}] if draw(st.booleans()) or not ids else []
            raw.append({"role": "user", "content": text + results if draw(st.booleans()) else results + text})
    return [anthropic.decode_message(m, i) for i, m in enumerate(raw)]


@settings(max_examples=300, deadline=None)
@given(message_lists())
def test_the_folds_over_a_history_in_two_parts_are_the_fold_over_all_of_it(msgs: list[Message]) -> None:
    whole = chain_fold(msgs)
    assert trailing_loop_start(msgs) == backward_loop_start(msgs)
    for k in range(len(msgs) + 1):
        assert loop_start(loop_fold(msgs, k, loop_fold(msgs[:k]))) == trailing_loop_start(msgs)
        before = chain_fold(msgs[:k])
        if before is None:
            assert whole is None  # a rule broken in the first part is broken in the whole
            continue
        went_on = chain_fold(msgs, k, (set(before[0]), before[1]))
        assert went_on == whole, k
    assert chain_intact(msgs) == (whole is not None and not whole[1])


def _loop(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "weather"}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"step {i}", "signature": "s" * 40},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "f", "input": {}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                                  "content": "sunny"}]})
    return msgs


def _request(turns: int) -> tuple[Any, list[Message]]:
    body = {"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": _loop(turns)}
    req = anthropic.decode_request(body)
    return req, list(req.messages)


def _assistants(req: Any) -> list[int]:
    """Every assistant message's index: what repair finds of a faithful replay (each a recorded turn)."""
    return [i for i, m in enumerate(req.messages) if m.role == "assistant"]


def _run(req: Any, model: str = MODEL, seed: Sanitized | None = None,
         verbatim: Sequence[int] | None = None) -> SanitizeResult:
    return sanitize_run(req, lambda b: False, _assistants(req) if verbatim is None else verbatim, caps_for(model),
                        Policy(), frozenset(), seed)[0]


def _sanitize(req: Any, model: str = MODEL, verbatim: Sequence[int] | None = None) -> list[Any]:
    return sanitize(req, lambda b: False, caps_for(model), Policy(),
                    verbatim=_assistants(req) if verbatim is None else verbatim)


def test_a_continued_request_gets_what_a_fresh_look_gets_and_a_seed_for_the_next() -> None:
    req, _ = _request(3)
    first = _run(req)
    assert first.continued == 0 and first.sanitized is not None and first.sanitized.count == 7
    longer, _ = _request(4)
    longer.messages[:7] = req.messages  # the same objects, as the replay memo hands them over
    fresh, _ = _request(4)
    went_on = _run(longer, seed=first.sanitized)
    assert went_on.continued == 7
    assert went_on.actions == _sanitize(fresh)
    assert went_on.sanitized is not None and went_on.sanitized.count == 9
    # another model family's rules read other things: the seed is not theirs
    other = _run(fresh, "gemini-3-pro-preview", seed=went_on.sanitized)
    assert other.continued == 0


def test_a_continued_request_whose_new_messages_break_the_tool_chain_gets_what_a_fresh_look_gets() -> None:
    def broken(req: Any) -> None:  # the new tool call goes unanswered, its result answers another id
        req.messages[-1] = anthropic.decode_message(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_other", "content": "?"}]},
            len(req.messages) - 1)

    req, _ = _request(3)
    seed = _run(req).sanitized
    longer, _ = _request(4)
    longer.messages[:7] = req.messages
    broken(longer)
    fresh, _ = _request(4)
    broken(fresh)
    went_on = _run(longer, seed=seed)
    want = _sanitize(fresh)
    assert went_on.continued == 7 and went_on.sanitized is None
    assert went_on.actions == want and {a.kind.value for a in want} >= {"tool_result_synthesized"}
    encoded = [[anthropic.encode_message(m) for m in r.messages] for r in (longer, fresh)]
    assert encoded[0] == encoded[1]
    assert longer.thinking == fresh.thinking


def test_a_request_whose_outcome_changed_its_messages_seeds_nothing() -> None:
    req, _ = _request(2)
    out = _run(req, verbatim=[3])  # message 1 not replayed verbatim: its thinking is unverifiable and dropped
    assert out.sanitized is None and any(a.kind.value == "dropped" for a in out.actions)


def _ticket(msgs: list[Message], reused: int) -> Ticket:
    return Ticket("t", "anthropic", b"", {}, list(msgs), [], reused=reused)


def test_a_seed_is_used_only_for_the_messages_it_was_made_from_as_repair_left_them() -> None:
    req, msgs = _request(3)
    seed = _run(req).sanitized
    assert seed is not None

    def continued(messages: list[Message], verbatim: Sequence[int] = (1, 3, 5)) -> int:
        again, _ = _request(3)
        again.messages = list(messages)
        return _run(again, seed=seed, verbatim=verbatim).continued

    assert continued([*msgs, msgs[0]]) == 7
    assert continued(msgs, [1, 5]) == 0  # one no longer matched verbatim
    replaced = [*msgs[:3], anthropic.decode_message(_loop(3)[3], 3), *msgs[4:]]
    assert continued(replaced) == 0  # repair put a restored message in one's place
    assert continued(msgs[:5]) == 0  # fewer messages than the seed covers
    # the continuation hands the seed in only while the memo gave back all of its messages as they were
    t = _ticket(msgs, 7)
    t.carried = Carried(sanitized=seed)
    assert sanitize_prior(t) is seed and sanitize_prior(t, {"carried_sanitize"}) is None
    partly = _ticket(msgs, 5)  # the memo gave back only some of the messages as they were
    partly.carried = Carried(sanitized=seed)
    assert sanitize_prior(partly) is None and sanitize_prior(None) is None
    t.redecoded = 1
    assert sanitize_prior(t) is None


class _Held(ConversationView):
    """A conversation whose turns are found by replay digest only."""

    def __init__(self, turns: dict[bytes, RecordedTurn]) -> None:
        self.turns = turns

    def __len__(self) -> int:
        return len(self.turns)

    def find_digest(self, digest: bytes) -> RecordedTurn | None:
        return self.turns.get(digest)


def test_repair_continues_only_while_the_same_conversation_holds_the_same_turns() -> None:
    msgs = [anthropic.decode_message(m, i) for i, m in enumerate(_loop(3))]
    turns = {m.replay_digest: RecordedTurn("scid-a", i // 2) for i, m in enumerate(msgs) if m.role == "assistant"}
    recs = Records(conversation=_Held(turns), scid="scid-a")
    first = repair(msgs, recs)
    assert first.resumed == 0 and first.verbatim == [1, 3, 5] and first.repaired is not None
    longer = msgs + [anthropic.decode_message(m, 7 + i) for i, m in enumerate(_loop(4)[7:])]
    turns[longer[7].replay_digest] = RecordedTurn("scid-a", 3)
    went_on = repair(longer, recs, resumed=first.repaired)
    assert went_on.resumed == 7 and went_on.verbatim == [1, 3, 5, 7] and went_on.matched == repair(longer, recs).matched
    assert repair(longer, Records(conversation=recs.conversation, scid="scid-b"), resumed=first.repaired).resumed == 0
    assert repair(longer, recs, {1: turns[msgs[1].replay_digest]}, resumed=first.repaired).resumed == 0  # pinned
    turns[msgs[3].replay_digest] = RecordedTurn("scid-a", 1)  # another record for that digest now
    assert repair(longer, recs, resumed=first.repaired).resumed == 0

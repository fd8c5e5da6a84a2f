"""Branches of one conversation through a real gateway: rewind and an edited earlier user message.

The client's user-side path is the conversation: after a rewind or an edit the upstream gets exactly
the messages the client sent (nothing re-added), the answer is recorded on a new branch with its own
SCID, and the original conversation's records still repair the original branch. That holds also for
an edit made as the very next request, before anything answered the original path at that position.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

from tests.process_fixtures import ServerProcess, Sim
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, block_dicts, tool_results
from tests.support.manglings.anthropic import mangle_assistants

MODEL = "claude-opus-4-5"
SCID = "x-ag-conversation-id"
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
History = list[dict[str, Any]]


class Conversation:
    """Sends one history per call; remembers the SCID and the upstream body of each request."""

    def __init__(self, gateway: ServerProcess, sim: Sim, header: bool) -> None:
        self.client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-branches", max_retries=0,
                                          default_headers=BETA)
        self.sim, self.header = sim, header

    def send(self, history: History, scid: str | None = None) -> tuple[anthropic.types.Message, str, History]:
        extra = {SCID: scid} if (self.header and scid) else {}
        raw = self.client.messages.with_raw_response.create(
            model=MODEL, max_tokens=4096, tools=[WEATHER_TOOL], thinking=THINKING,  # type: ignore[arg-type]
            messages=copy.deepcopy(history), extra_headers=extra)  # type: ignore[arg-type]
        answer = raw.parse()
        assert answer.content[0].type == "thinking", "thinking kept"
        return answer, raw.headers[SCID], self.sim.last()["body"]["messages"]


def extend(history: History, answer: anthropic.types.Message) -> History:
    return [*history, {"role": "assistant", "content": block_dicts(answer)},
            {"role": "user", "content": tool_results(answer)}]


def mangled(history: History) -> History:
    """Signatures gone and thinking trimmed: only a turn record (not the exact-text index) repairs it."""
    return mangle_assistants(mangle_assistants(history, "drop_signature"), "trim_thinking")


def same_path(upstream: History, client: History) -> None:
    """The upstream got the client's path: as many messages, the same user messages, no turn re-added."""
    assert len(upstream) == len(client)
    assert [m["role"] for m in upstream] == [m["role"] for m in client]
    assert [m for m in upstream if m["role"] == "user"] == [m for m in client if m["role"] == "user"]


def continues(conv: Conversation, history: History, scid: str) -> None:
    """The mangled ``history`` is recorded under ``scid``, its path sent as is, its turns restored."""
    _, got, upstream = conv.send(mangled(history), scid)
    assert got == scid
    same_path(upstream, history)
    assert [m["content"] for m in upstream if m["role"] == "assistant"] == \
        [m["content"] for m in history if m["role"] == "assistant"]


@pytest.fixture()
def conversations(gateway: ServerProcess, sim: Sim) -> Iterator[Callable[[bool], Conversation]]:
    """Opens ``Conversation``s (``header``: the client names its SCID); their clients are closed after the test."""
    opened: list[Conversation] = []

    def open_one(header: bool) -> Conversation:
        opened.append(Conversation(gateway, sim, header))
        return opened[-1]
    yield open_one
    for conv in opened:
        conv.client.close()


@pytest.fixture()
def no_rejections(sim: Sim) -> Iterator[None]:
    before = sum(sim.stats()["rejections"].values())
    yield
    assert sum(sim.stats()["rejections"].values()) == before, "the simulator rejected a request"


def _start(conv: Conversation, prompt: str) -> tuple[History, str, History]:
    """Two tool rounds of the original conversation: returns the history ending in the second round's
    results, its SCID, and the history one round earlier."""
    h0: History = [{"role": "user", "content": prompt}]
    a1, scid, _ = conv.send(h0)
    h1 = extend(h0, a1)
    a2, scid2, _ = conv.send(mangled(h1), scid)
    assert scid2 == scid
    return extend(h1, a2), scid, h1


@pytest.mark.parametrize("header", [True, False], ids=["scid", "no-scid"])
def test_rewind_starts_a_branch_and_the_original_still_repairs(
        conversations: Callable[[bool], Conversation], no_rejections: None, header: bool) -> None:
    conv = conversations(header)
    h2, scid, h1 = _start(conv, f"[[sim:tools=4]] rewind branch ({'scid' if header else 'no-scid'})")
    a3, scid3, _ = conv.send(mangled(h2), scid)
    assert scid3 == scid
    # Rewind: the client drops its last turn and its results and asks again from h1.
    b2, branch, upstream = conv.send(mangled(h1), scid)
    assert branch != scid, "a turn recorded after a rewind continues a new branch"
    same_path(upstream, h1)
    assert upstream[1]["content"] == h1[1]["content"], "the replayed turn restored to its recorded form"
    # The branch continues under its own id.
    continues(conv, extend(h1, b2), branch)
    # The original branch, mangled the same way, is still repaired from the original's records.
    continues(conv, extend(h2, a3), scid)


@pytest.mark.parametrize("header", [True, False], ids=["scid", "no-scid"])
def test_edited_earlier_user_message_starts_a_branch(
        conversations: Callable[[bool], Conversation], no_rejections: None, header: bool) -> None:
    """The original conversation went on before the client edited an earlier message."""
    conv = conversations(header)
    h2, scid, _ = _start(conv, f"[[sim:tools=4]] edit branch ({'scid' if header else 'no-scid'})")
    a3, again, _ = conv.send(mangled(h2), scid)
    assert again == scid
    edited = copy.deepcopy(h2)
    edited[0]["content"] += " (edited: and in Madrid)"
    _, branch, upstream = conv.send(mangled(edited), scid)
    assert branch != scid, "a turn recorded after an edit continues a new branch"
    same_path(upstream, edited)
    assert upstream[0]["content"].endswith("(edited: and in Madrid)")
    # The unedited conversation continues under its own id, repaired from its records.
    continues(conv, extend(h2, a3), scid)


@pytest.mark.parametrize("header", [True, False], ids=["scid", "no-scid"])
def test_edit_at_the_tip_starts_a_branch(conversations: Callable[[bool], Conversation], no_rejections: None,
                                         header: bool) -> None:
    """The client edits an earlier message as its very next request: nothing answered the original path yet."""
    conv = conversations(header)
    h2, scid, _ = _start(conv, f"[[sim:tools=4]] edit at the tip ({'scid' if header else 'no-scid'})")
    edited = copy.deepcopy(h2)
    edited[0]["content"] += " (edited: and in Madrid)"
    b3, branch, upstream = conv.send(mangled(edited), scid)
    same_path(upstream, edited)
    assert branch != scid, "a turn recorded after an edit continues a new branch"
    # The branch continues under its own id, its turns repaired from its records.
    continues(conv, extend(edited, b3), branch)
    # The unedited path still continues the original conversation, at the position the edit left free.
    continues(conv, h2, scid)

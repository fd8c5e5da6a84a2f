"""``gateway.continuation.outage``: a worker vouches, while the store is away, only for thinking it relayed itself,
byte for byte,
signature included, to the same tenant."""

from __future__ import annotations

from gateway.continuation.outage import Journal
from gateway.dialects.canonical import RedactedThinkingBlock, TextBlock, ThinkingBlock


def test_only_the_exact_relayed_thinking_of_the_same_tenant_is_vouched_for() -> None:
    j = Journal()
    j.note("t1", [ThinkingBlock("plan\r\n", "sig"), RedactedThinkingBlock("opaque"), TextBlock("answer")])
    assert j.vouches("t1", ThinkingBlock("plan\r\n", "sig")) and j.vouches("t1", RedactedThinkingBlock("opaque"))
    assert not j.vouches("t1", ThinkingBlock("plan\n", "sig"))  # re-encoded
    assert not j.vouches("t1", ThinkingBlock("plan\r\n", "other"))  # another signature
    assert not j.vouches("t1", ThinkingBlock("plan\r\n", None))  # signature dropped
    assert not j.vouches("t2", ThinkingBlock("plan\r\n", "sig"))  # another tenant
    assert not j.vouches("t1", TextBlock("answer")) and len(j) == 2


def test_it_is_bounded() -> None:
    j = Journal(entries=3)
    j.note("t", [ThinkingBlock(f"p{i}", f"s{i}") for i in range(5)])
    assert len(j) == 3 and not j.vouches("t", ThinkingBlock("p0", "s0")) and j.vouches("t", ThinkingBlock("p4", "s4"))

"""Hostile bodies through the pure pipeline: a client error or a clean result, never a crash.

Bodies are drawn from a strategy shaped like Anthropic requests with every field allowed to be
of the wrong type, so decode, repair, sanitize and encode all see malformed input.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.routing import caps_for
from gateway.errors import ClientError
from gateway.pipeline.repair.core import repair
from gateway.pipeline.repair.records import Records
from gateway.pipeline.sanitize.core import Policy, sanitize

scalars = st.none() | st.booleans() | st.integers(-2, 5000) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
block_types = st.sampled_from(["text", "thinking", "redacted_thinking", "tool_use", "tool_result", "image",
                               "server_tool_use", "", "weird"])


WELL_TYPED: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "text": {"text": st.text(max_size=12)},
    "thinking": {"thinking": st.text(max_size=12), "signature": st.text(max_size=12)},
    "redacted_thinking": {"data": st.text(max_size=12)},
    "tool_use": {"id": st.sampled_from(["t1", "t2", "t3"]), "name": st.text(max_size=4), "input": json_values},
    "tool_result": {"tool_use_id": st.sampled_from(["t1", "t2", "t9"]), "content": json_values,
                    "is_error": st.booleans()},
}


@st.composite
def blocks(draw: st.DrawFn) -> Any:
    roll = draw(st.integers(0, 9))
    if roll == 0:
        return draw(json_values)
    btype = draw(block_types)
    block: dict[str, Any] = {"type": btype}
    if roll < 7 and btype in WELL_TYPED:  # mostly well-typed: the later stages must see odd histories
        for key, strategy in WELL_TYPED[btype].items():
            if draw(st.integers(0, 5)):  # sometimes a key is missing
                block[key] = draw(strategy)
        return block
    for key in draw(st.lists(st.sampled_from(["text", "thinking", "signature", "data", "id", "name", "input",
                                              "tool_use_id", "content", "is_error", "cache_control"]),
                             max_size=5, unique=True)):
        block[key] = draw(json_values | st.text(max_size=20))
    return block


@st.composite
def messages(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 30)) == 0:
        return draw(json_values)
    content = draw(st.lists(blocks(), max_size=4) | st.text(max_size=10)) if draw(st.integers(0, 20)) \
        else draw(json_values)
    role = draw(st.sampled_from(["user", "assistant", "user", "assistant", "system", "tool"])) \
        if draw(st.integers(0, 20)) else draw(json_values)
    return {"role": role, "content": content}


@st.composite
def bodies(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 40)) == 0:
        return draw(json_values)
    body: dict[str, Any] = {"model": draw(st.sampled_from(["claude-opus-4-5", "claude-opus-4-7"])),
                            "messages": draw(st.lists(messages(), max_size=6))}
    if draw(st.integers(0, 30)) == 0:
        body[draw(st.sampled_from(["model", "messages"]))] = draw(json_values)
    for key, values in (("thinking", st.sampled_from([{"type": "enabled", "budget_tokens": 2048},
                                                      {"type": "adaptive"}, {"type": "disabled"}]) | json_values),
                        ("max_tokens", st.integers(-1, 10**9) | json_values),
                        ("temperature", st.floats(allow_nan=False) | json_values),
                        ("tool_choice", st.sampled_from([{"type": "any"}, {"type": "tool", "name": "x"}])
                         | json_values),
                        ("stream", st.booleans() | json_values)):
        if draw(st.booleans()):
            body[key] = draw(values)
    return body


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies(), policy=st.sampled_from([Policy("drop"), Policy("text")]))
def test_any_body_is_a_client_error_or_a_clean_request(body: Any, policy: Policy) -> None:
    try:
        req = anthropic.decode_request(orjson.loads(orjson.dumps(body)))
    except ClientError as e:
        event("rejected by decode")
        assert 400 <= e.status < 500 and e.message
        return
    event("decoded")
    res = repair(req.messages, Records())
    sanitize(req, res.is_verified, caps_for(req.model), policy, frozenset(), res.verbatim)
    out = orjson.loads(orjson.dumps(anthropic.encode_request(req)))
    assert isinstance(out["messages"], list)

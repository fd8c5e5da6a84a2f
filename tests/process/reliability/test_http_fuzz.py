"""Hypothesis at the HTTP level, against a real gateway process on a real Redis.

Three strategies:

- ``bodies()`` from the pure-pipeline fuzz (Anthropic-shaped requests with every field allowed to be
  of the wrong type), sent to every endpoint;
- each dialect's own shape (``hostile_strategies.BODIES``): OpenAI chat completions, Augment
  chat-stream and Gemini ``generateContent`` / ``streamGenerateContent`` bodies, sent to their endpoint;
- replays of tenant A's recorded tool loop, mangled block by block (signatures forged, thinking
  edited or dropped, tool ids swapped, messages dropped or duplicated), sent by A or by another
  tenant, streamed or not.

Every answer: no 5xx at all (the upstream is a healthy simulator that these bodies cannot make fail
-- no fault markers are generated -- so a 502/504 would be the gateway failing to read or reach it,
and a 500 is a crash), no traceback in the gateway's log; a refused request leaves the keyspace
exactly as it was; no stored turn is ever altered or removed; tenant B's requests never touch A's keys.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.reliability.dialects import check_envelope, client
from tests.support.reliability.fixtures import BETA, KEY_A, KEY_B, Seeded, a_body
from tests.support.reliability.hostile import ENDPOINTS
from tests.support.reliability.hostile_strategies import BODIES
from tests.unit.gateway.test_pipeline_fuzz import bodies, json_values

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def judge(seeded: Seeded, dialect: str, send: Any, *, owner: bool) -> httpx.Response:
    before = seeded.keyspace.snapshot()
    log_at = len(seeded.gateway.log())
    r: httpx.Response = send()
    after = seeded.keyspace.snapshot()
    assert r.status_code < 500, (r.status_code, r.text[:300])
    assert "Traceback" not in seeded.gateway.log()[log_at:], seeded.gateway.log()[log_at:][-2000:]
    event(f"status {r.status_code // 100}xx")
    if r.status_code >= 400:
        check_envelope(dialect, r.json()) if r.headers.get("content-type", "").startswith("application/json") \
            else None
        assert after.digest() == before.digest(), "a refused request changed the keyspace"
    assert before.turns_kept(after), "a stored turn was altered or removed"
    if not owner:
        assert after.digest(seeded.a_prefix) == before.digest(seeded.a_prefix), "B's request changed A's keys"
    return r


@FUZZ
@given(body=bodies(), endpoint=st.sampled_from(sorted(ENDPOINTS)))
def test_generic_bodies_on_every_endpoint(seeded: Seeded, body: Any, endpoint: str) -> None:
    path, dialect, _ = ENDPOINTS[endpoint]
    judge(seeded, dialect, lambda: client().post(seeded.gateway.url + path, content=orjson.dumps(body), timeout=30,
                                              headers={"x-api-key": KEY_B, "content-type": "application/json"}),
          owner=False)


@settings(FUZZ, max_examples=50)
@given(data=st.data())
@pytest.mark.parametrize("endpoint", sorted(BODIES))
def test_dialect_shaped_bodies(seeded: Seeded, endpoint: str, data: st.DataObject) -> None:
    paths, dialect, strategy = BODIES[endpoint]
    path, body = data.draw(paths, "path"), data.draw(strategy, "body")
    key = data.draw(st.sampled_from([KEY_A, KEY_B]), "key")
    headers = {"authorization": f"Bearer {key}"} if dialect != "anthropic" else {"x-api-key": key}
    judge(seeded, dialect, lambda: client().post(seeded.gateway.url + path, content=orjson.dumps(body), timeout=30,
                                              headers={**headers, "content-type": "application/json"}),
          owner=key == KEY_A)


MUTATIONS = ("forge_signature", "edit_thinking", "drop_thinking", "drop_signature", "swap_tool_id",
             "drop_message", "duplicate_message", "junk_block", "edit_text", "empty_content")


@st.composite
def mangled(draw: st.DrawFn, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    h = copy.deepcopy(history)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(MUTATIONS))
        event(kind)
        i = draw(st.integers(0, len(h) - 1))
        msg = h[i]
        blocks = msg["content"] if isinstance(msg["content"], list) else []
        j = draw(st.integers(0, max(0, len(blocks) - 1)))
        b = blocks[j] if blocks else {}
        if kind == "forge_signature" and b.get("type") == "thinking":
            b["signature"] = draw(st.sampled_from(["", "x", "Eo" + "A" * 80, b["signature"][::-1]]))
        elif kind == "edit_thinking" and b.get("type") == "thinking":
            b["thinking"] = draw(st.sampled_from(["", b["thinking"].strip(), b["thinking"] + " ", "forged"]))
        elif kind == "drop_thinking" and b.get("type") == "thinking":
            blocks.pop(j)
        elif kind == "drop_signature" and b.get("type") == "thinking":
            b.pop("signature", None)
        elif kind == "swap_tool_id" and b.get("type") in ("tool_use", "tool_result"):
            b["id" if b["type"] == "tool_use" else "tool_use_id"] = draw(st.sampled_from(
                ["toolu_forged", "", "x" * 300, "toolu_" + "\u00e9" * 10]))
        elif kind == "drop_message" and len(h) > 1:
            h.pop(i)
        elif kind == "duplicate_message":
            h.insert(i, copy.deepcopy(msg))
        elif kind == "junk_block" and blocks:
            blocks.insert(j, draw(json_values))
        elif kind == "edit_text" and b.get("type") == "text":
            b["text"] = draw(st.text(max_size=20))
        elif kind == "empty_content":
            msg["content"] = draw(st.sampled_from([[], "", None]))
    return h


@FUZZ
@given(data=st.data(), stream=st.booleans(), tenant=st.sampled_from(["A", "B"]))
def test_mangled_replays_of_a_recorded_loop(seeded: Seeded, data: st.DataObject, stream: bool, tenant: str) -> None:
    history = data.draw(mangled(seeded.history))
    key = KEY_A if tenant == "A" else KEY_B
    body = {**a_body(history), "stream": stream}
    r = judge(seeded, "anthropic", lambda: client().post(
        seeded.gateway.url + "/v1/messages", content=orjson.dumps(body), timeout=30,
        headers={"x-api-key": key, "anthropic-beta": BETA, "content-type": "application/json"}), owner=tenant == "A")
    if stream and r.status_code == 200:
        assert "event: error" not in r.text, r.text[-300:]

"""Hostile and broken input on every endpoint: a 4xx in the caller's dialect (or a repaired, counted
request), never a 5xx or a traceback, and nothing stored altered by a bad request.

A real gateway on a private Redis holds tenant A's recorded tool loop. Every request here is either
refused (then the whole keyspace, DBSIZE and the DUMP of every key, must be exactly as before) or
served (tenant A's keys must still be exactly as before).
"""

from __future__ import annotations

import copy
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
import redis

from state.keys import new_scid, tenant_prefix
from tests.support.reliability.dialects import check_envelope, client
from tests.support.reliability.fixtures import BETA, KEY_A, KEY_B, MAX_BODY, SECRET, Seeded, a_body
from tests.support.reliability.hostile import ENDPOINTS, nested, raw_bodies, wrong_type_bodies

SCID = "x-ag-conversation-id"


def post(seeded: Seeded, path: str, body: bytes | dict[str, Any], key: str = KEY_A,
         headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()  # orjson stops at depth 255
    hdrs = {"x-api-key": key, "content-type": "application/json", **(headers or {})}
    return client().post(seeded.gateway.url + path, content=content,
                         headers={k: v.encode("utf-8", "surrogateescape") for k, v in hdrs.items()})


class Judge:
    """Collects every answer that breaks the rules instead of stopping at the first."""

    def __init__(self, seeded: Seeded) -> None:
        self.seeded = seeded
        self.problems: list[str] = []
        self.refused = self.served = 0

    def check(self, name: str, dialect: str, send: Any, *, owner: bool = False) -> httpx.Response:
        """One request, with the keyspace compared right before and after it. ``owner``: sent with
        tenant A's key, so a served request may append to A's records."""
        before = self.seeded.keyspace.snapshot()
        r = send()
        after = self.seeded.keyspace.snapshot()
        self._judge(name, dialect, r, before.digest() == after.digest())
        if not owner and after.digest(self.seeded.a_prefix) != before.digest(self.seeded.a_prefix):
            self.problems.append(f"{name}: tenant A's records changed")
        if not before.turns_kept(after):
            self.problems.append(f"{name}: a stored turn was altered or removed")
        return r

    def batch(self, path: str, dialect: str, cases: list[tuple[str, Any]]) -> None:
        """Many requests at once, each under its own credential (so its own tenant): a refused
        request's tenant owns no key afterwards, and no key of anyone else changed."""
        before = self.seeded.keyspace.snapshot()
        keys = [f"sk-hostile-{uuid.uuid4().hex}" for _ in cases]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda c: post(self.seeded, path, c[0][1], key=c[1]),
                                    zip(cases, keys, strict=True)))
        after = self.seeded.keyspace.snapshot()
        tenants = {f"tg:{{{tenant_prefix(SECRET.encode(), k)}:".encode(): k for k in keys}
        for (name, _), key, r in zip(cases, keys, answers, strict=True):
            prefix = f"tg:{{{tenant_prefix(SECRET.encode(), key)}:".encode()
            self._judge(name, dialect, r, r.status_code < 400 or after.digest(prefix)[0] == 0)
        theirs = after.owned(tuple(tenants))
        outside = {k: v for k, v in after.dumps.items() if k not in theirs}
        if outside != {k: v for k, v in before.dumps.items() if k not in theirs}:
            self.problems.append("a batch of hostile requests changed keys that were not theirs")
        if not before.turns_kept(after):
            self.problems.append("a stored turn was altered or removed")

    def _judge(self, name: str, dialect: str, r: httpx.Response, store_unchanged: bool) -> None:
        if r.status_code >= 500:
            self.problems.append(f"{name}: {r.status_code} {r.text[:200]}")
        elif r.status_code >= 400:
            self.refused += 1
            try:
                check_envelope(dialect, r.json())
            except (AssertionError, ValueError) as e:
                self.problems.append(f"{name}: {r.status_code} not a {dialect} envelope: {e!s:.200} {r.text[:200]}")
            if not store_unchanged:
                self.problems.append(f"{name}: refused with {r.status_code} but the store changed")
        else:
            self.served += 1
        if "Traceback" in r.text:
            self.problems.append(f"{name}: traceback in the answer")

    def done(self) -> None:
        assert not self.problems, "\n".join(self.problems[:20])


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_bodies_that_are_not_json_objects(seeded: Seeded, endpoint: str) -> None:
    path, dialect, valid = ENDPOINTS[endpoint]
    judge = Judge(seeded)
    for name, raw in raw_bodies(orjson.dumps(valid)):
        r = judge.check(name, dialect, lambda raw=raw: post(seeded, path, raw))
        if r.status_code < 400 and name not in ("huge number", "bom"):
            judge.problems.append(f"{name}: accepted with {r.status_code}")
    judge.done()
    assert judge.refused >= len(raw_bodies(orjson.dumps(valid))) - 6


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_wrong_types_in_every_field(seeded: Seeded, endpoint: str) -> None:
    path, dialect, valid = ENDPOINTS[endpoint]
    judge = Judge(seeded)
    judge.batch(path, dialect, list(wrong_type_bodies({**valid, "stream": False} if dialect in ("anthropic", "openai")
                                                      and endpoint != "chat_stream" else valid)))
    judge.done()
    assert judge.refused > 0


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_absurd_sizes_and_values(seeded: Seeded, endpoint: str) -> None:
    path, dialect, valid = ENDPOINTS[endpoint]
    judge = Judge(seeded)
    cases: dict[str, Any] = {
        "max_tokens huge": {**valid, "max_tokens": 10**15},
        "max_tokens negative": {**valid, "max_tokens": -5},
        "model 100 KB": {**valid, "model": "m" * 100_000},
        "model unicode": {**valid, "model": "claude-\u202e\U0001f600\x00"},
        "deep unknown field": {**valid, "metadata": nested(200)},
        "deeper unknown field": {**valid, "metadata": nested(450)},  # 900 levels: below orjson's 1024
        "5000 unknown keys": {**valid, **{f"k{i}": i for i in range(5000)}},
    }
    if endpoint in ("messages", "count_tokens"):
        cases["5000 blocks"] = {**valid, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"b{i}"} for i in range(5000)]}]}
        cases["3000 messages"] = {**valid, "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(3001)]}
        cases["deep tool input"] = {**valid, "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_x", "name": "t", "input": nested(400)}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]}
    elif endpoint == "chat_completions":
        cases["3000 messages"] = {**valid, "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(3001)]}
        cases["5000 parts"] = {**valid, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"p{i}"} for i in range(5000)]}]}
        cases["deep tool arguments"] = {**valid, "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "t", "arguments": json.dumps(nested(400))}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "r"}]}
    elif dialect == "gemini":
        cases = {name: body for name, body in cases.items() if name.startswith(("model", "deep", "5000"))}
        cases["maxOutputTokens huge"] = {**valid, "generationConfig": {"maxOutputTokens": 10**15}}
        cases["thinkingBudget negative"] = {**valid, "generationConfig": {"thinkingConfig": {"thinkingBudget": -5}}}
        cases["3000 contents"] = {**valid, "contents": [
            {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"c{i}"}]} for i in range(3001)]}
        cases["5000 parts"] = {**valid, "contents": [{"role": "user", "parts": [{"text": f"p{i}"}
                                                                                for i in range(5000)]}]}
        cases["deep function args"] = {**valid, "contents": [
            {"role": "user", "parts": [{"text": "q"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "t", "args": nested(400)}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "t", "response": {"r": 1}}}]}]}
    else:
        cases["3000 exchanges"] = {**valid, "chat_history": [
            {"request_message": f"q{i}", "response_text": f"a{i}"} for i in range(3000)]}
        cases["5000 nodes"] = {**valid, "nodes": [{"id": i, "type": 0, "text_node": {"content": f"n{i}"}}
                                                  for i in range(5000)]}
    judge.batch(path, dialect, list(cases.items()))
    judge.done()


def test_bodies_over_the_limit(seeded: Seeded) -> None:
    judge = Judge(seeded)
    for endpoint, (path, dialect, valid) in ENDPOINTS.items():
        big = {**valid, "padding": "x" * (MAX_BODY + 1)}
        r = judge.check(f"{endpoint} declared", dialect, lambda path=path, big=big: post(seeded, path, big))
        assert r.status_code == 413, (endpoint, r.status_code)
        chunks = [orjson.dumps(big)[i:i + 65536] for i in range(0, MAX_BODY + 65536, 65536)]
        r = judge.check(f"{endpoint} chunked", dialect, lambda path=path, chunks=chunks: client().post(
            seeded.gateway.url + path, content=iter(chunks), headers={"x-api-key": KEY_A}, timeout=30))
        assert r.status_code == 413, (endpoint, r.status_code)
    judge.done()


def test_huge_and_odd_headers(seeded: Seeded) -> None:
    judge = Judge(seeded)
    path, dialect, valid = ENDPOINTS["messages"]
    odd = {
        "x-api-key 8 KB": {"x-api-key": "k" * 8192},
        "scid 8 KB": {SCID: "s" * 8192},
        "anthropic-beta 8 KB": {"anthropic-beta": ",".join(["b"] * 4000)},
        "latin-1 key": {"x-api-key": "sk-\xe9\xff"},
        "bearer without token": {"authorization": "Bearer", "x-api-key": ""},
    }
    for name, hdrs in odd.items():
        judge.check(name, dialect, lambda hdrs=hdrs: post(seeded, path, valid, key=KEY_B, headers=hdrs))
    # Past the HTTP server's own header limit the connection is refused before any handler runs:
    # the server answers a plain 4xx (or closes), never a 5xx, and keeps serving.
    try:
        r = client().post(seeded.gateway.url + path, content=orjson.dumps(valid), timeout=30,
                       headers={"x-api-key": KEY_B, "x-huge": "h" * 200_000})
        assert r.status_code < 500, r.status_code
    except httpx.HTTPError:
        pass  # closed by the server: acceptable
    assert client().get(seeded.gateway.url + "/healthz").status_code == 200
    judge.done()


def test_scids_malformed_unknown_expired_and_foreign(seeded: Seeded) -> None:
    judge = Judge(seeded)
    path, dialect, _ = ENDPOINTS["messages"]
    # B records a conversation, then its keys vanish (an expired conversation)
    first = post(seeded, path, a_body([{"role": "user", "content": "[[sim:tools=1]] b's own"}]), key=KEY_B,
                 headers={"anthropic-beta": BETA})
    expired = first.headers[SCID]
    with redis.Redis(port=seeded.redis.port) as c:
        gone = [k for k in c.scan_iter(match=f"tg:{{{seeded.tenant_b}:{expired}}}*")]
        assert gone and c.delete(*gone) == len(gone)
    scids = {"malformed": "../../etc/passwd", "too short": "abc", "too long": "a" * 65, "unicode": "\xe9" * 20,
             "unknown": new_scid(), "expired": expired, "another tenant's": seeded.scid}
    b_history = copy.deepcopy(seeded.history)
    for name, scid in scids.items():
        export = client().get(f"{seeded.gateway.url}/gateway/conversations/{scid}", headers={"x-api-key": KEY_B})
        assert export.status_code == 404, (name, export.status_code)
        check_envelope("anthropic", export.json())
        fresh = [{"role": "user", "content": f"hello {name}"}]
        for hist_name, history in (("fresh", fresh), ("a's history", b_history)):
            r = judge.check(f"{name} {hist_name}", dialect, lambda scid=scid, history=history: post(
                seeded, path, a_body(history), key=KEY_B, headers={SCID: scid, "anthropic-beta": BETA}))
            assert r.status_code == 200, (name, hist_name, r.text[:300])
            if hist_name == "fresh":  # nothing of anyone's records was put in front of B's message
                assert len(_sim_messages(seeded)) == 1
    # B may name a thread with any id, A's included: it is B's own thread (keys are tenant-scoped)
    mine = client().get(f"{seeded.gateway.url}/gateway/conversations/{seeded.scid}?format=anthropic",
                     headers={"x-api-key": KEY_B})
    assert mine.status_code == 200 and seeded.history[0]["content"] not in mine.text
    for bad in ("%2e%2e%2f", "a" * 5000, "%00", "%ff%fe", "null", "..%2f..%2fmetrics"):
        export = client().get(f"{seeded.gateway.url}/gateway/conversations/{bad}", headers={"x-api-key": KEY_A})
        assert export.status_code in (307, 404), (bad, export.status_code)  # 307: a path normalised away
    judge.done()


def test_forged_tool_ids_and_signatures_are_repaired_and_counted(seeded: Seeded) -> None:
    judge = Judge(seeded)
    path, dialect, _ = ENDPOINTS["messages"]
    before = _actions(seeded)
    forged = copy.deepcopy(seeded.history)
    for m in forged:
        if m["role"] == "assistant":
            for b in m["content"]:
                if b["type"] == "thinking":
                    b["signature"] = "Eo" + "A" * 120  # forged
    tool_forged = copy.deepcopy(seeded.history)
    tool_forged[-2]["content"] = [b if b["type"] != "tool_use" else {**b, "id": "toolu_forged_" + b["id"][-8:]}
                                  for b in tool_forged[-2]["content"]]
    tool_forged[-1]["content"] = [{**b, "tool_use_id": "toolu_forged_" + b["tool_use_id"][-8:]}
                                  for b in tool_forged[-1]["content"]]
    for key in (KEY_A, KEY_B):
        for name, history in (("forged signatures", forged), ("forged tool ids", tool_forged)):
            r = judge.check(f"{name} as {key}", dialect, lambda history=history, key=key: client().post(
                seeded.gateway.url + path, json=a_body(history), timeout=30,
                headers={"x-api-key": key, "anthropic-beta": BETA}), owner=key == KEY_A)
            assert r.status_code == 200, (name, key, r.text[:300])
            for m in [m for m in _sim_messages(seeded) if m["role"] == "assistant"]:
                sigs = [b.get("signature", "") for b in m["content"] if b.get("type") == "thinking"]
                assert not any(s.startswith("EoAAAA") for s in sigs), "a forged signature went upstream"
    judge.done()
    after = _actions(seeded)
    assert after > before, "the repairs were not counted"


def _sim_messages(seeded: Seeded) -> list[dict[str, Any]]:
    sim_url = seeded.gateway.env["GATEWAY_ANTHROPIC_BASE_URL"]
    body = client().get(sim_url + "/_sim/last").json()["body"]
    return body["messages"]  # type: ignore[no-any-return]


def _actions(seeded: Seeded) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = client().get(seeded.gateway.url + "/metrics").text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "gateway_sanitize_actions_total" and s.labels.get("action") != "kept_verified")

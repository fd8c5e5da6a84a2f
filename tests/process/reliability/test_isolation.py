"""Tenant isolation end to end: two credentials never see each other's records, through any path.

Tenant A recorded a tool loop (``seeded``). Tenant B, knowing everything A sent and received
(conversation id, tool ids, thinking text and its real signatures), tries every way in:

- the conversation id header, the tool ids, the thinking and text hashes, the prefix fingerprint
  (B replays A's history, whole or partly, with signatures stripped, forged or copied), through
  each client surface: Anthropic Messages, OpenAI chat completions and Augment chat-stream;
- the conversation export endpoint;
- and looks at what the gateway exposes: metrics labels and the structured logs.

Nothing of A's is ever restored into B's request, a signature B copied or forged is never
"verified" because A holds the same text (B's requests go upstream without thinking), A's
keys are untouched by B, and neither tenant's identifiers or content show up in metrics or logs.
"""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import httpx
import pytest

from state.keys import tenant_prefix
from tests.support.reliability.dialects import PATHS, client, headers_for
from tests.support.reliability.fixtures import BETA, KEY_A, KEY_B, SECRET, Seeded, a_body
from tests.support.reliability.hostile import MARKER

SCID = "x-ag-conversation-id"
INDEX_KEY = re.compile(rb"tg:\{[0-9a-f]+:i\d+\}:")  # an index bucket's hash tag (``state.keys``)
TRUSTING = {"kept_verified", "restored", "signature_restored", "history_rebuilt"}


def strip(history: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    h = copy.deepcopy(history)
    for m in h:
        if m["role"] != "assistant":
            continue
        for b in m["content"]:
            if b["type"] == "thinking":
                if how == "strip":
                    b.pop("signature", None)
                elif how == "forge":
                    b["signature"] = "Eo" + "B" * 100
    return h


def sim_body(seeded: Seeded) -> dict[str, Any]:
    sim_url = seeded.gateway.env["GATEWAY_ANTHROPIC_BASE_URL"]
    return client().get(sim_url + "/_sim/last").json()["body"]  # type: ignore[no-any-return]


def access(seeded: Seeded) -> list[dict[str, Any]]:
    out = []
    for line in seeded.gateway.log_lines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("logger") == "thinkgate.access":
                out.append(rec)
    return out


def line_for(seeded: Seeded, tenant: str, skip: int) -> dict[str, Any]:
    """The access-log line, after the first ``skip`` lines, of the one request ``tenant`` just made (the
    gateway writes it just after the answer: poll). Not by conversation id: a streamed answer's header
    names the conversation it continued, while its record may fork into a new one."""
    deadline = time.monotonic() + 5
    while True:
        found = [rec for rec in access(seeded)[skip:] if rec.get("tenant") == tenant]
        if found or time.monotonic() > deadline:
            assert len(found) == 1, f"{len(found)} access-log lines for {tenant}"
            return found[0]
        time.sleep(0.02)  # the gateway is another process: poll its log


def to_openai(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An Anthropic history as an OpenAI chat client replays it: thinking (with whatever signature it
    carries) as ``reasoning_details``, tool calls with their ids, one ``tool`` message per result."""
    out: list[dict[str, Any]] = []
    for m in history:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if m["role"] == "user":
            out += [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
                    for b in blocks if b["type"] == "tool_result"]
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            out += [{"role": "user", "content": text}] if text else []
            continue
        msg: dict[str, Any] = {"role": "assistant",
                               "content": "".join(b["text"] for b in blocks if b["type"] == "text") or None}
        details = [{"type": "reasoning.text", "text": b["thinking"],
                    **({"signature": b["signature"]} if "signature" in b else {})}
                   for b in blocks if b["type"] == "thinking"]
        calls = [{"id": b["id"], "type": "function",
                  "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
                 for b in blocks if b["type"] == "tool_use"]
        out.append({**msg, **({"reasoning_details": details} if details else {}),
                    **({"tool_calls": calls} if calls else {})})
    return out


def to_augment(history: list[dict[str, Any]]) -> dict[str, Any]:
    """An Anthropic history as the Augment extension replays it: exchanges with THINKING (8) and
    TOOL_USE (5) response nodes, tool results as TOOL_RESULT (1) request nodes."""
    def results(m: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": i, "type": 1, "tool_result_node": {"tool_use_id": b["tool_use_id"], "content": b["content"]}}
                for i, b in enumerate(m["content"]) if isinstance(m["content"], list) and b["type"] == "tool_result"]

    def text(m: dict[str, Any]) -> str:
        return m["content"] if isinstance(m["content"], str) else \
            "".join(b.get("text", "") for b in m["content"] if b["type"] == "text")

    exchanges = []
    for user, assistant in zip(history[0::2], history[1::2], strict=False):
        nodes = [{"id": i, "type": 8, "thinking": {"summary": b["thinking"], **(
                     {"signature": b["signature"]} if "signature" in b else {})}} if b["type"] == "thinking"
                 else {"id": i, "type": 5, "tool_use": {"tool_use_id": b["id"], "tool_name": b["name"],
                                                         "input_json": json.dumps(b["input"])}}
                 for i, b in enumerate(assistant["content"]) if b["type"] in ("thinking", "tool_use")]
        exchanges.append({"request_message": text(user), "request_nodes": results(user),
                          "response_text": text(assistant), "response_nodes": nodes})
    last = history[-1] if len(history) % 2 else {"role": "user", "content": "go on"}
    return {"model": "claude-opus-4-5", "message": text(last), "nodes": results(last), "chat_history": exchanges,
            "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "tool_definitions": [{"name": "get_weather", "description": "w", "input_schema_json": "{}"}]}


def ask(seeded: Seeded, key: str, history: list[dict[str, Any]], scid: str | None = None,
        stream: bool = False, surface: str = "anthropic") -> httpx.Response:
    headers = {**headers_for(surface, key), **({SCID: scid} if scid else {})}
    if surface == "anthropic":
        body: dict[str, Any] = {**a_body(history), "stream": stream}
        headers["anthropic-beta"] = BETA
    elif surface == "openai":
        body = {"model": "claude-opus-4-5", "messages": to_openai(history), "stream": stream,
                "reasoning_effort": "medium", "tools": [{"type": "function", "function": {
                    "name": "get_weather", "parameters": {"type": "object"}}}]}
    else:
        body = to_augment(history)
    r = client().post(seeded.gateway.url + PATHS[surface], json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text[:300]
    return r


ATTEMPTS = {  # name -> (how B's replay treats A's signatures, send A's conversation id, how much history)
    "copied signatures + A's id": ("copy", True, None),
    "copied signatures": ("copy", False, None),
    "forged signatures (same thinking text)": ("forge", False, None),
    "stripped signatures (tool ids + text hashes)": ("strip", False, None),
    "stripped + A's id": ("strip", True, None),
    "first turn only (fingerprint)": ("strip", False, 3),
    "first turn, copied signature, streamed": ("copy", False, 3),
}


SURFACES = ("anthropic", "openai", "augment")


def fresh_b(surface: str, attempt: str) -> str:
    """A B of its own per attempt: the simulator is deterministic, so an earlier attempt's answer,
    recorded under B, can hold A's very thinking text, and B matching its *own* record is no leak."""
    return f"{KEY_B}-{surface}-{list(ATTEMPTS).index(attempt)}"


@pytest.mark.parametrize("attempt", list(ATTEMPTS))
@pytest.mark.parametrize("surface", SURFACES)
def test_b_cannot_reach_a_records_through_replays(seeded: Seeded, surface: str, attempt: str) -> None:
    """B replays A's loop (tool ids, thinking, signatures, A's conversation id) through each client
    surface; whatever the surface, the request that goes upstream carries nothing restored from A."""
    how, with_id, cut = ATTEMPTS[attempt]
    history = strip(seeded.history, how)[:cut]
    a_before = seeded.keyspace.snapshot().digest(seeded.a_prefix)
    skip = len(access(seeded))
    b_key = fresh_b(surface, attempt)
    r = ask(seeded, b_key, history, seeded.scid if with_id else None, stream="streamed" in attempt,
            surface=surface)

    sent = sim_body(seeded)
    a_signatures = {sig for _, sig in seeded.thinking}
    upstream_sigs = {b.get("signature") for m in sent["messages"] if isinstance(m["content"], list)
                     for b in m["content"] if b.get("type") == "thinking"}
    assert not upstream_sigs & a_signatures, "A's signature went upstream on B's request"
    assert not any(b.get("type") in ("thinking", "redacted_thinking") for m in sent["messages"]
                   if m["role"] == "assistant" and isinstance(m["content"], list) for b in m["content"]), \
        "B's unverifiable thinking was kept"
    assert any(b.get("type") == "tool_use" and b.get("id") in seeded.tool_ids for m in sent["messages"]
               if isinstance(m["content"], list) for b in m["content"]), "B's replay did not carry A's tool ids"
    assert r.headers[SCID] != seeded.scid or with_id  # B's own thread, named after A's id when B sent it
    line = line_for(seeded, tenant_prefix(SECRET.encode(), b_key), skip)
    assert line["via"] == "none", line
    assert not TRUSTING & set(line["actions"]), line["actions"]
    assert seeded.keyspace.snapshot().digest(seeded.a_prefix) == a_before, "B's request changed A's keys"
    # and A, replaying the same history stripped of signatures on the same surface, is still restored
    skip = len(access(seeded))
    ask(seeded, KEY_A, strip(seeded.history, "strip")[:cut], surface=surface)
    a_line = line_for(seeded, seeded.tenant_a, skip)
    assert a_line["via"] != "none", a_line
    assert any(b.get("type") == "thinking" and b.get("signature") in a_signatures for m in sim_body(seeded)["messages"]
               if m["role"] == "assistant" and isinstance(m["content"], list) for b in m["content"]), \
        "A's own replay was not restored: this surface cannot tell B's attempt from a miss"


def test_export_is_tenant_scoped(seeded: Seeded) -> None:
    url = f"{seeded.gateway.url}/gateway/conversations/{seeded.scid}"
    assert client().get(url, headers={"x-api-key": KEY_B}).status_code == 404
    assert client().get(url, headers={"authorization": f"Bearer {KEY_B}"}).status_code == 404
    assert client().get(url).status_code == 401
    mine = client().get(url + "?format=anthropic", headers={"x-api-key": KEY_A})
    assert mine.status_code == 200 and mine.json()["conversation_id"] == seeded.scid
    assert seeded.thinking[0][1] not in mine.text, "signatures are redacted unless asked for"
    full = client().get(url + "?format=anthropic&include_signatures=true", headers={"x-api-key": KEY_A})
    assert seeded.thinking[0][1] in full.text


def test_keys_metrics_and_logs_carry_no_identifiers(seeded: Seeded) -> None:
    ask(seeded, KEY_B, strip(seeded.history, "copy"))  # make sure B has traffic too
    keys = list(seeded.keyspace.client.scan_iter(count=1000))
    markers = [k for k in keys if MARKER.match(k)]  # tenant-less SCID markers: a SCID and "1", nothing else
    assert all(seeded.keyspace.client.get(k) == b"1" for k in markers)
    owners = {k.split(b":")[1].lstrip(b"{") for k in keys if k not in markers}
    bs = [fresh_b(surface, attempt) for surface in SURFACES for attempt in ATTEMPTS]
    assert owners <= {tenant_prefix(SECRET.encode(), k).encode() for k in [KEY_A, KEY_B, *bs]}, owners
    assert all(KEY_A.encode() not in k and KEY_B.encode() not in k for k in keys)
    # a thinking text is kept once, in its turn's record: the index (the exact-text one is keyed by the
    # text's SHA-256 and holds the signature) stores no copy of it
    index = [k for k in keys if INDEX_KEY.match(k)]
    values = [seeded.keyspace.client.get(k) or b"" for k in index]
    assert any(s.encode() in v for v in values for _, s in seeded.thinking)  # the signatures are there
    for text, _ in seeded.thinking:
        assert not any(text[:40].encode() in v for v in values), "a thinking text in an index value"

    metrics = client().get(seeded.gateway.url + "/metrics").text
    secrets = [KEY_A, KEY_B, seeded.scid, seeded.history[0]["content"],
               *(t[:40] for t, _ in seeded.thinking), *(s[:40] for _, s in seeded.thinking), *seeded.tool_ids]
    for s in secrets:
        assert s not in metrics, f"{s[:20]}... appears in /metrics"
    # the tenant prefix (an HMAC of the credential, as in the keys and the access log) is the token counters'
    # bounded ``tenant`` label (issue 26: cost per tenant), and nowhere else in /metrics
    token_series = ("gateway_tokens_total{", "gateway_tokens_created{")
    for tenant in (seeded.tenant_a, seeded.tenant_b):
        lines = [line for line in metrics.splitlines() if tenant in line]
        assert all(line.startswith(token_series) and f'tenant="{tenant}"' in line for line in lines), lines
    assert any(seeded.tenant_a in line for line in metrics.splitlines()), "A's tokens are counted under its prefix"

    log = seeded.gateway.log()
    for s in [KEY_A, KEY_B, seeded.history[0]["content"], *(t[:40] for t, _ in seeded.thinking),
              *(s[:40] for _, s in seeded.thinking)]:
        assert s not in log, f"{s[:20]}... appears in the logs"
    b_lines = [rec for rec in access(seeded) if rec.get("tenant") == seeded.tenant_b]
    assert b_lines and all(rec.get("scid") != seeded.scid or rec.get("via") == "none" for rec in b_lines)

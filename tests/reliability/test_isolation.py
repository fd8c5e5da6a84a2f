"""Tenant isolation end to end: two credentials never see each other's records, through any path.

Tenant A recorded a tool loop (``seeded``). Tenant B, knowing everything A sent and received
(conversation id, tool ids, thinking text and its real signatures), tries every way in:

- the conversation id header, the tool ids, the thinking and text hashes, the prefix fingerprint
  (B replays A's history, whole or partly, with signatures stripped, forged or copied);
- the conversation export endpoint;
- and looks at what the gateway exposes: metrics labels and the structured logs.

Nothing of A's is ever restored into B's request, a signature B copied or forged is never
"verified" because A holds the same text (B's requests go upstream without thinking), A's
keys are untouched by B, and neither tenant's identifiers or content show up in metrics or logs.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import httpx
import pytest

from tests.reliability.conftest import BETA, KEY_A, KEY_B, Seeded, a_body
from tests.reliability.dialects import client

SCID = "x-ag-conversation-id"
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
    for line in seeded.gateway.log().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("logger") == "thinkgate.access":
                out.append(rec)
    return out


def line_for(seeded: Seeded, scid: str, skip: int) -> dict[str, Any]:
    """The access-log line, after the first ``skip`` lines, of the request answered with ``scid``
    (the gateway writes it just after the answer: poll)."""
    deadline = time.monotonic() + 5
    while True:
        found = [rec for rec in access(seeded)[skip:] if rec.get("scid") == scid]
        if found or time.monotonic() > deadline:
            assert found, f"no access-log line for {scid}"
            return found[-1]
        time.sleep(0.02)  # the gateway is another process: poll its log


def ask(seeded: Seeded, key: str, history: list[dict[str, Any]], scid: str | None = None,
        stream: bool = False) -> httpx.Response:
    headers = {"x-api-key": key, "anthropic-beta": BETA, **({SCID: scid} if scid else {})}
    r = client().post(seeded.gateway.url + "/v1/messages", json={**a_body(history), "stream": stream},
                   headers=headers, timeout=30)
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


@pytest.mark.parametrize("attempt", list(ATTEMPTS))
def test_b_cannot_reach_a_records_through_replays(seeded: Seeded, attempt: str) -> None:
    how, with_id, cut = ATTEMPTS[attempt]
    history = strip(seeded.history, how)[:cut]
    a_before = seeded.keyspace.snapshot().digest(seeded.a_prefix)
    skip = len(access(seeded))
    r = ask(seeded, KEY_B, history, seeded.scid if with_id else None, stream="streamed" in attempt)

    sent = sim_body(seeded)
    a_signatures = {sig for _, sig in seeded.thinking}
    upstream_sigs = {b.get("signature") for m in sent["messages"] if isinstance(m["content"], list)
                     for b in m["content"] if b.get("type") == "thinking"}
    assert not upstream_sigs & a_signatures, "A's signature went upstream on B's request"
    assert not any(b.get("type") in ("thinking", "redacted_thinking") for m in sent["messages"]
                   if m["role"] == "assistant" and isinstance(m["content"], list) for b in m["content"]), \
        "B's unverifiable thinking was kept"
    line = line_for(seeded, r.headers[SCID], skip)
    assert line["tenant"] == seeded.tenant_b and line["via"] == "none", line
    assert not TRUSTING & set(line["actions"]), line["actions"]
    assert seeded.keyspace.snapshot().digest(seeded.a_prefix) == a_before, "B's request changed A's keys"
    # and A, replaying the same history stripped of signatures, is still restored from its records
    skip = len(access(seeded))
    a = ask(seeded, KEY_A, strip(seeded.history, "strip")[:cut])
    a_line = line_for(seeded, a.headers[SCID], skip)
    assert a_line["tenant"] == seeded.tenant_a and a_line["via"] != "none"


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
    owners = {k.split(b":")[1].lstrip(b"{") for k in keys}
    assert owners <= {seeded.tenant_a.encode(), seeded.tenant_b.encode()}, owners
    assert all(KEY_A.encode() not in k and KEY_B.encode() not in k for k in keys)

    metrics = client().get(seeded.gateway.url + "/metrics").text
    secrets = [KEY_A, KEY_B, seeded.tenant_a, seeded.tenant_b, seeded.scid, seeded.history[0]["content"],
               *(t[:40] for t, _ in seeded.thinking), *(s[:40] for _, s in seeded.thinking), *seeded.tool_ids]
    for s in secrets:
        assert s not in metrics, f"{s[:20]}... appears in /metrics"

    log = seeded.gateway.log()
    for s in [KEY_A, KEY_B, seeded.history[0]["content"], *(t[:40] for t, _ in seeded.thinking),
              *(s[:40] for _, s in seeded.thinking)]:
        assert s not in log, f"{s[:20]}... appears in the logs"
    b_lines = [rec for rec in access(seeded) if rec.get("tenant") == seeded.tenant_b]
    assert b_lines and all(rec.get("scid") != seeded.scid or rec.get("via") == "none" for rec in b_lines)

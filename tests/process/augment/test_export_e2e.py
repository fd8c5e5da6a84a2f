"""``GET /gateway/conversations/{scid}`` after a real three-iteration parallel tool loop (ADR 002 option 2)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from tests.process_fixtures import ServerProcess, Sim
from tests.support.augment.client import THINKING_NODE, Loop, Reply, run_loop

KEY = "sk-aug-export"
PROMPT = "[[sim:tools=3]] [[sim:parallel=2]] weather in two cities, three times"


@pytest.fixture(scope="module")
def thread(sim: Sim, gateway: ServerProcess) -> tuple[str, Loop]:
    conv = str(uuid.uuid4())
    before = sum(sim.stats()["rejections"].values())
    loop = run_loop(gateway.url, PROMPT, key=KEY, conversation_id=conv, structured=True)
    assert sum(sim.stats()["rejections"].values()) == before
    assert len(loop.replies) == 4 and all(len(r.tool_uses()) == 2 for r in loop.replies[:3])
    return conv, loop


def export(gateway: ServerProcess, scid: str, key: str = KEY, **params: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/gateway/conversations/{scid}", params=params,
                     headers={"authorization": f"Bearer {key}"})


def _thinking(reply: Reply) -> dict[str, str]:
    return reply.of_type(THINKING_NODE)[0]["thinking"]  # type: ignore[no-any-return]


def expected_openai(loop: Loop, *, signatures: bool) -> list[dict[str, Any]]:
    """ADR 002 option 2, built from what the client saw and sent."""
    out: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for body, reply in zip(loop.bodies, loop.replies, strict=True):
        for node in body["nodes"]:
            tr = node["tool_result_node"]
            content = tr["content"] or json.dumps(
                [{"type": "text", "text": cn["text_content"]} for cn in tr["content_nodes"]], separators=(",", ":"))
            out.append({"role": "tool", "tool_call_id": tr["tool_use_id"], "content": content})
        th = _thinking(reply)
        sig = th["signature"] if signatures else f"[redacted len={len(th['signature'])}]"
        msg: dict[str, Any] = {
            "role": "assistant", "content": reply.text, "reasoning_content": th["summary"],
            "reasoning_details": [{"type": "reasoning.text", "text": th["summary"], "signature": sig,
                                   "format": "anthropic-claude-v1", "index": 0}]}
        if reply.tool_uses():
            msg["tool_calls"] = [
                {"id": tu["tool_use_id"], "type": "function",
                 "function": {"name": tu["tool_name"],
                              "arguments": json.dumps(json.loads(tu["input_json"]), separators=(",", ":"))}}
                for tu in reply.tool_uses()]
        out.append(msg)
    return out


def test_openai_export_is_per_iteration_and_redacted(gateway: ServerProcess, thread: tuple[str, Loop]) -> None:
    scid, loop = thread
    r = export(gateway, scid)
    assert r.status_code == 200
    data = r.json()
    assert data["conversation_id"] == scid and data["format"] == "openai" and data["signatures"] == "redacted"
    assert [t["position"] for t in data["turns"]] == [0, 1, 2, 3]
    assert {t["dialect"] for t in data["turns"]} == {"augment"}
    assert data["messages"] == expected_openai(loop, signatures=False)
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["user"] + ["assistant", "tool", "tool"] * 3 + ["assistant"]
    assert _thinking(loop.replies[0])["signature"] not in r.text


def test_include_signatures(gateway: ServerProcess, thread: tuple[str, Loop]) -> None:
    scid, loop = thread
    r = export(gateway, scid, include_signatures="true")
    assert r.status_code == 200 and r.json()["signatures"] == "included"
    assert r.json()["messages"] == expected_openai(loop, signatures=True)


def test_anthropic_format(gateway: ServerProcess, thread: tuple[str, Loop]) -> None:
    scid, loop = thread
    msgs = export(gateway, scid, format="anthropic").json()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 4
    th = _thinking(loop.replies[0])
    assert msgs[1]["content"][0] == {"type": "thinking", "thinking": th["summary"],
                                     "signature": f"[redacted len={len(th['signature'])}]"}
    assert [b["type"] for b in msgs[2]["content"]] == ["tool_result", "tool_result"]
    assert isinstance(msgs[2]["content"][1]["content"], list)  # the structured result, as sent upstream
    full = export(gateway, scid, format="anthropic", include_signatures="1").json()["messages"]
    assert full[1]["content"][0]["signature"] == th["signature"]


def test_unknown_foreign_and_anonymous(gateway: ServerProcess, thread: tuple[str, Loop]) -> None:
    scid, _ = thread
    for r in (export(gateway, str(uuid.uuid4())), export(gateway, scid, key="sk-aug-other-tenant"),
              export(gateway, "not a scid")):
        assert r.status_code == 404
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "not_found_error"
    assert httpx.get(f"{gateway.url}/gateway/conversations/{scid}").status_code == 401
    assert export(gateway, scid, format="yaml").status_code == 400

"""The cross-conversation oracle (``[[sim:conv=NAME]]``): every flavor names the conversation in its
thinking text, remembers what it mints, and counts requests carrying another conversation's content."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson
import pytest

from tests.support.sim.helpers import answer, history, post, request, tool_results
from thinkgate_sim.gemini import plan_parts
from thinkgate_sim.gemini_rules import ThoughtSigner
from thinkgate_sim.oracle import ConversationOracle, conversation_line
from thinkgate_sim.scenarios import parse_scenario, pick_tool, thinking_text

GEMINI = "/v1beta/models/gemini-3-pro-preview:generateContent"
GEMINI_STREAM = "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse"
GOOGLE_KEY = {"x-goog-api-key": "k"}
BEARER = {"authorization": "Bearer sk-test"}
COMPAT = {"openrouter": ("/openrouter/api/v1/chat/completions", "google/gemini-3-pro-preview"),
          "copilot": ("/copilot/chat/completions", "copilot/gemini-3-pro-preview"),
          "deepseek": ("/deepseek/v1/chat/completions", "deepseek-reasoner"),
          "gemini_openai": ("/v1beta/openai/chat/completions", "gemini-3-pro-preview")}
# Computed by the simulator before the oracle existed: a request without the marker thinks exactly this.
UNMARKED = {
    "seed": ("  Considering request 88524dfbd7cf carefully.  \r\n\r\nStep 1: café — 思考 🤔 the indigo path, then "
             "orchid.   \r\n   indented: 7a6a06d1\t\n\nConclusion (delta): proceed with the plan. \n"),
    "anthropic": ("  Considering request 1a05237915a0 carefully.  \r\n\r\nStep 1: café — 思考 🤔 the juniper path, "
                  "then harbor.   \r\n   indented: e0aa887b\t\n\nConclusion (lagoon): proceed with the plan. \n"),
    "openrouter": ("  Considering request 1288a9edaf10 carefully.  \r\n\r\nStep 1: café — 思考 🤔 the orchid path, "
                   "then prairie.   \r\n   indented: 0a33820d\t\n\nConclusion (indigo): proceed with the plan. \n"),
    "gemini": ("  Considering request a9e18e3e6c5f carefully.  \r\n\r\nStep 1: café — 思考 🤔 the juniper path, "
               "then nimbus.   \r\n   indented: e0b566c9\t\n\nConclusion (ember): proceed with the plan. \n"),
}


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    return (await client.get("/_sim/stats")).json()  # type: ignore[no-any-return]


def kinds(st: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(d["conversation"], d["foreign"], d["kind"]) for d in st["foreign_details"]}


def gemini_body(text: str, *more: dict[str, Any]) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}, *more],
            "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}


def compat_body(profile: str, text: str, *more: dict[str, Any]) -> dict[str, Any]:
    return {"model": COMPAT[profile][1], "messages": [{"role": "user", "content": text}, *more],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]}


# ------------------------------------------------------------------ the class itself

def test_oracle_remembers_owners_and_scans_the_whole_body() -> None:
    oracle = ConversationOracle()
    oracle.remember("a", "signature", "sig-a")
    oracle.remember("b", "tool_id", "toolu_b")
    oracle.remember(None, "signature", "unmarked")  # not a conversation: not remembered
    oracle.remember("a", "thinking", "")  # empty: proves nothing
    assert len(oracle) == 2
    body = {"x": [{"y": "sig-a"}, "toolu_b", 3, None, {"z": ["unmarked"]}]}
    assert oracle.scan("a", body) == [("b", "tool_id")]
    assert oracle.scan("b", body) == [("a", "signature")]
    assert oracle.scan("c", body) == [("a", "signature"), ("b", "tool_id")]
    assert oracle.scan(None, body) == [], "requests without the marker are not checked"


def test_oracle_thinking_line_and_ambiguous_tokens() -> None:
    oracle = ConversationOracle()
    text = thinking_text("s", "alpha")
    assert f"\r\n{conversation_line('alpha')}\r\n" in text
    assert oracle.scan("beta", {"t": "quoted: " + text}) == [("alpha", "thinking_line")]
    assert oracle.scan("alpha", {"t": text}) == []
    assert oracle.scan("beta", {"t": "Final answer (conversation 1a2b3c4d)."}) == [], "not a thinking line"
    oracle.remember("a", "opaque", "same")
    oracle.remember("b", "opaque", "same")  # minted for both: ambiguous, never counted
    assert oracle.scan("c", ["same"]) == []


def test_oracle_memory_is_bounded() -> None:
    oracle = ConversationOracle(limit=2)
    for k in range(3):
        oracle.remember("a", "tool_id", f"t{k}")
    assert len(oracle) == 2
    assert oracle.scan("b", ["t0", "t1", "t2"]) == [("a", "tool_id")]  # t0 forgotten


def test_marker_syntax() -> None:
    assert parse_scenario("[[sim:conv=Team_a-1]] hi").conv == "Team_a-1"
    assert parse_scenario("[[sim:conv=bad name]] [[sim:conv=]] hi").conv is None
    assert parse_scenario("[[sim:conv=" + "x" * 65 + "]]").conv is None
    assert parse_scenario("[[sim:conv=first]] [[sim:conv=second]]").conv == "first"


# ------------------------------------------------------------------ thinking texts

async def test_thinking_text_without_the_marker_is_unchanged(client: httpx.AsyncClient) -> None:
    assert thinking_text("abc/1/0") == UNMARKED["seed"]
    reply = await answer(client, {**request("hello"), "model": "claude-sonnet-4-5"})
    assert reply["content"][0]["thinking"] == UNMARKED["anthropic"]
    path, _ = COMPAT["openrouter"]
    resp = await client.post(path, headers=BEARER, json={"model": "google/gemini-3-pro-preview",
                                                         "messages": [{"role": "user", "content": "hello"}]})
    assert resp.json()["choices"][0]["message"]["reasoning"] == UNMARKED["openrouter"]
    resp = await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body("hello"))
    assert resp.json()["candidates"][0]["content"]["parts"][0]["text"] == UNMARKED["gemini"]


async def test_every_flavor_names_the_conversation_in_its_thinking(client: httpx.AsyncClient) -> None:
    line = "\r\nconversation team-a\r\n"
    reply = await answer(client, request("[[sim:conv=team-a]] hello"))
    assert line in reply["content"][0]["thinking"]
    for profile, (path, _) in COMPAT.items():
        msg = (await client.post(path, headers=BEARER, json=compat_body(profile, "[[sim:conv=team-a]] hi"))).json()
        if profile != "gemini_openai":  # Gemini's compatibility layer sends no thought text
            message = msg["choices"][0]["message"]
            assert line in message.get("reasoning_content", message.get("reasoning_text", message.get("reasoning")))
    resp = await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=team-a]] hello"))
    assert line in resp.json()["candidates"][0]["content"]["parts"][0]["text"]
    assert (await stats(client))["foreign"] == 0


# ------------------------------------------------------------------ Anthropic

async def anthropic_history(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    """[u, a(thinking, redacted, text, tool_use), u(result)] of conversation ``name``."""
    return await history(client, request(f"[[sim:conv={name}]] q [[sim:tools=2]] [[sim:redacted]]"), 1)


async def test_anthropic_own_history_is_not_foreign(client: httpx.AsyncClient) -> None:
    body = await anthropic_history(client, "a")
    reply = await answer(client, body)
    body["messages"] += [{"role": "assistant", "content": reply["content"]}, tool_results(reply)]
    assert (await post(client, body)).status_code == 200
    st = await stats(client)
    assert (st["foreign"], st["foreign_details"]) == (0, [])


async def test_anthropic_request_carrying_another_conversations_turn(client: httpx.AsyncClient) -> None:
    theirs = await anthropic_history(client, "a")
    ours = request("[[sim:conv=b]] q [[sim:tools=2]]")
    ours["messages"] += copy.deepcopy(theirs["messages"][1:])  # a gateway restoring the wrong turn
    await post(client, ours)  # rejected or not: the oracle looks first
    st = await stats(client)
    assert st["foreign"] == 1
    assert kinds(st) == {("b", "a", k) for k in ("thinking", "signature", "redacted", "tool_id")}
    assert {d["flavor"] for d in st["foreign_details"]} == {"anthropic"}


@pytest.mark.parametrize("kind", ["thinking", "signature", "redacted", "tool_id", "thinking_line"])
async def test_anthropic_each_kind_of_token(client: httpx.AsyncClient, kind: str) -> None:
    blocks = (await anthropic_history(client, "a"))["messages"][1]["content"]
    token = {"thinking": blocks[0]["thinking"], "signature": blocks[0]["signature"], "redacted": blocks[1]["data"],
             "tool_id": blocks[3]["id"], "thinking_line": "summary of it:\n" + blocks[0]["thinking"]}[kind]
    body = request("x")
    body["messages"][0]["content"] = [{"type": "text", "text": "[[sim:conv=b]] q"}, {"type": "text", "text": token}]
    assert (await post(client, body)).status_code == 200
    st = await stats(client)
    assert st["foreign"] == 1 and kinds(st) == {("b", "a", kind)}


async def test_requests_without_the_marker_are_not_checked(client: httpx.AsyncClient) -> None:
    theirs = await anthropic_history(client, "a")
    unmarked = request("q [[sim:tools=2]]")
    unmarked["messages"] += theirs["messages"][1:]
    await post(client, unmarked)
    assert (await stats(client))["foreign"] == 0


async def test_count_tokens_is_checked_and_reset_clears_the_counts(client: httpx.AsyncClient) -> None:
    theirs = await anthropic_history(client, "a")
    ours = request("[[sim:conv=b]] q")
    ours["messages"] += theirs["messages"][1:]
    counted = {k: v for k, v in ours.items() if k != "max_tokens"}  # not a count_tokens field
    resp = await client.post("/v1/messages/count_tokens", content=orjson.dumps(counted),
                             headers={"x-api-key": "k"})
    assert resp.status_code == 200
    assert (await stats(client))["foreign"] == 1
    reset = (await client.post("/_sim/reset")).json()
    assert (reset["foreign"], reset["foreign_details"]) == (0, [])
    await post(client, ours)  # what was minted before the reset is still remembered
    assert (await stats(client))["foreign"] == 1


async def test_foreign_details_are_capped(client: httpx.AsyncClient) -> None:
    blocks = (await anthropic_history(client, "a"))["messages"][1]["content"]
    for _ in range(60):
        body = request("x")
        body["messages"][0]["content"] = [{"type": "text", "text": "[[sim:conv=b]] q"},
                                          {"type": "text", "text": blocks[3]["id"]}]
        await post(client, body)
    st = await stats(client)
    assert st["foreign"] == 60 and len(st["foreign_details"]) == 50


# ------------------------------------------------------------------ Gemini

async def gemini_turn(client: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    resp = await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body(f"[[sim:conv={name}]] q [[sim:tools=1]]"))
    parts = resp.json()["candidates"][0]["content"]["parts"]
    assert parts[0]["thought"] and "thoughtSignature" in parts[2]
    return [{"role": "model", "parts": parts},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"ok": 1}}}]}]


async def test_gemini_own_turn_passes_another_conversations_is_flagged(client: httpx.AsyncClient) -> None:
    turn = await gemini_turn(client, "a")
    own = await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=a]] q [[sim:tools=1]]", *turn))
    assert own.status_code == 200 and (await stats(client))["foreign"] == 0
    sig_only = copy.deepcopy(turn)
    sig_only[0]["parts"] = sig_only[0]["parts"][2:]  # just the signed call
    await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=b]] q [[sim:tools=1]]", *sig_only))
    st = await stats(client)
    assert st["foreign"] == 1 and kinds(st) == {("b", "a", "thought_signature")}
    assert st["foreign_details"][0]["flavor"] == "gemini-aistudio"
    await client.post("/vertex" + GEMINI, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=b]] q", *turn))
    st = await stats(client)
    assert st["foreign"] == 2 and ("b", "a", "thinking") in kinds(st)


async def test_gemini_streamed_signature_is_remembered(client: httpx.AsyncClient) -> None:
    resp = await client.post(GEMINI_STREAM, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=a]] q"))
    chunks = [orjson.loads(line[6:]) for line in resp.text.split("\r\n\r\n") if line.startswith("data: ")]
    last = chunks[-1]["candidates"][0]["content"]["parts"][0]
    assert last["text"] == "" and last["thoughtSignature"]
    model = {"role": "model", "parts": [{"text": "answer", "thoughtSignature": last["thoughtSignature"]}]}
    await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=b]] q", model,
                                                                   {"role": "user", "parts": [{"text": "and?"}]}))
    assert kinds(await stats(client)) == {("b", "a", "thought_signature")}


async def test_anthropic_thinking_in_a_gemini_request_is_flagged(client: httpx.AsyncClient) -> None:
    """One oracle for all flavors: content minted by one dialect is recognised in another."""
    thinking = (await anthropic_history(client, "a"))["messages"][1]["content"][0]["thinking"]
    model = {"role": "model", "parts": [{"text": thinking, "thought": True}, {"text": "ok"}]}
    await client.post(GEMINI, headers=GOOGLE_KEY, json=gemini_body("[[sim:conv=b]] q", model,
                                                                   {"role": "user", "parts": [{"text": "and?"}]}))
    st = await stats(client)
    assert kinds(st) == {("b", "a", "thinking")} and st["foreign_details"][0]["flavor"] == "gemini-aistudio"


# ------------------------------------------------------------------ OpenAI-compatible profiles

EXPECTED = {"openrouter": {"thinking", "opaque", "tool_id"}, "copilot": {"thinking", "opaque", "tool_id"},
            "deepseek": {"thinking", "tool_id"}, "gemini_openai": {"thought_signature", "tool_id"}}


@pytest.mark.parametrize("profile", list(COMPAT))
async def test_compat_profiles(client: httpx.AsyncClient, profile: str) -> None:
    path, _ = COMPAT[profile]
    first = compat_body(profile, "[[sim:conv=a]] q [[sim:tools=2]]")
    msg = (await client.post(path, headers=BEARER, json=first)).json()["choices"][0]["message"]
    turn = [msg, *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in msg["tool_calls"])]
    own = await client.post(path, headers=BEARER, json=compat_body(profile, "[[sim:conv=a]] q [[sim:tools=2]]", *turn))
    assert own.status_code == 200 and (await stats(client))["foreign"] == 0
    await client.post(path, headers=BEARER, json=compat_body(profile, "[[sim:conv=b]] q [[sim:tools=2]]", *turn))
    st = await stats(client)
    assert st["foreign"] == 1 and kinds(st) == {("b", "a", k) for k in EXPECTED[profile]}
    assert {d["flavor"] for d in st["foreign_details"]} == {f"compat-{profile}"}


def test_the_tool_marker_names_the_tool_each_profile_calls() -> None:
    """``[[sim:tool=NAME]]``: the tool rounds call NAME when the request offers it, else the first tool offered."""
    assert parse_scenario("[[sim:tool=run_shell_command]] hi").tool == "run_shell_command"
    offered = [("update_topic", {}), ("run_shell_command", {"properties": {"command": {"type": "string"}}})]
    assert pick_tool(offered, "run_shell_command") == offered[1]
    assert pick_tool(offered, "bash") == offered[0] and pick_tool(offered, None) == offered[0]
    assert pick_tool([], "bash") is None
    body = {"contents": [{"role": "user", "parts": [{"text": "[[sim:tools=1]] [[sim:tool=b]] [[sim:parallel=2]]"}]}],
            "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}]}
    parts = plan_parts(body, "gemini-3-pro-preview", ThoughtSigner(b"s"), "r")
    assert [p["functionCall"]["name"] for p in parts if "functionCall" in p] == ["b", "b"]

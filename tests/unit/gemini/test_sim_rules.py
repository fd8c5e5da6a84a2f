"""The simulator's Gemini and OpenAI-compatible rules (reference 16-23), exact texts and envelopes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from thinkgate_sim.app import SimConfig, create_sim_app
from thinkgate_sim.gemini_rules import ThoughtSigner, check_request, rule16_message

MODEL = "gemini-3-pro-preview"
KEY = {"x-goog-api-key": "k"}
AISTUDIO_16 = ("Function call is missing a thought_signature in functionCall parts. This is required for tools to "
               "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
               "data, function call `default_api:f` , position 2. Please refer to "
               "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")
VERTEX_16 = ("Unable to submit request because function call `default_api:f` in the 2. content block is missing a "
             "`thought_signature`. Learn more: https://docs.cloud.google.com/vertex-ai/generative-ai/docs/"
             "thought-signatures")


@pytest.fixture()
def client() -> Any:
    with TestClient(create_sim_app(SimConfig())) as c:
        yield c


def _turn(sig: str | None, second: str | None = None) -> list[dict[str, Any]]:
    first: dict[str, Any] = {"functionCall": {"name": "f", "args": {"a": 1}}}
    if sig is not None:
        first["thoughtSignature"] = sig
    other: dict[str, Any] = {"functionCall": {"name": "f", "args": {"a": 2}}}
    if second is not None:
        other["thoughtSignature"] = second
    return [{"role": "user", "parts": [{"text": "q"}]}, {"role": "model", "parts": [first, other]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}] * 2}]


def test_rule_16_texts_both_profiles() -> None:
    signer = ThoughtSigner(b"s")
    assert rule16_message("aistudio", "f", 2) == AISTUDIO_16 and rule16_message("vertex", "f", 2) == VERTEX_16
    v = check_request({"contents": _turn(None)}, MODEL, signer, "vertex")
    assert v is not None and (v.rule, v.message) == (16, VERTEX_16)
    assert check_request({"contents": _turn(None)}, "gemini-2.5-pro", signer, "aistudio") is None  # optional on 2.5


def test_bypass_values_per_profile_and_forged_signatures() -> None:
    signer = ThoughtSigner(b"s")
    assert check_request({"contents": _turn("skip_thought_signature_validator")}, MODEL, signer, "vertex") is None
    assert check_request({"contents": _turn("context_engineering_is_the_way_to_go")}, MODEL, signer,
                         "aistudio") is None
    v = check_request({"contents": _turn("context_engineering_is_the_way_to_go")}, MODEL, signer, "vertex")
    assert v is not None and v.rule == 17
    minted = signer.mint(MODEL, "r", 0, _turn(None)[1]["parts"][0])
    assert check_request({"contents": _turn(minted)}, MODEL, signer, "aistudio") is None
    v = check_request({"contents": _turn(minted, minted)}, MODEL, signer, "aistudio")
    assert v is not None and v.rule == 17, "a signature copied onto another call is not valid for it"
    v = check_request({"contents": _turn(minted)}, "gemini-3-flash-preview", signer, "aistudio")
    assert v is not None and v.rule == 17, "signatures are bound to the model"


def test_earlier_turns_are_not_checked_and_counts_must_match() -> None:
    signer = ThoughtSigner(b"s")
    older = [*_turn(None), {"role": "model", "parts": [{"text": "done"}]}, {"role": "user", "parts": [{"text": "n"}]}]
    assert check_request({"contents": older}, MODEL, signer, "aistudio") is None
    short = _turn("skip_thought_signature_validator")
    short[2]["parts"] = short[2]["parts"][:1]
    v = check_request({"contents": short}, MODEL, signer, "aistudio")
    assert v is not None and v.rule == 101
    both = {"contents": _turn(None)[:1], "generationConfig": {"thinkingConfig": {"thinkingLevel": "low",
                                                                                  "thinkingBudget": 10}}}
    v = check_request(both, MODEL, signer, "aistudio")
    assert v is not None and v.rule == 18


def test_http_envelopes(client: Any) -> None:
    r = client.post(f"/v1beta/models/{MODEL}:generateContent", json={"contents": _turn(None)}, headers=KEY)
    assert r.status_code == 400
    assert r.json() == {"error": {"code": 400, "message": AISTUDIO_16, "status": "INVALID_ARGUMENT"}}
    r = client.post(f"/vertex/v1beta/models/{MODEL}:generateContent", json={"contents": _turn(None)}, headers=KEY)
    assert r.json()["error"]["message"] == VERTEX_16
    r = client.post(f"/v1beta/models/{MODEL}:generateContent", json={"contents": _turn(None)})
    assert r.status_code == 403 and r.json()["error"]["status"] == "PERMISSION_DENIED"
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "r"}]
    r = client.post("/v1beta/openai/chat/completions", json={"model": MODEL, "messages": messages},
                    headers={"authorization": "Bearer k"})
    assert r.status_code == 400 and isinstance(r.json(), list) and r.json()[0]["error"]["status"] == "INVALID_ARGUMENT"


def test_stream_puts_the_text_signature_in_a_final_empty_part(client: Any) -> None:
    r = client.post(f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", headers=KEY,
                    json={"contents": [{"role": "user", "parts": [{"text": "hello"}]}]})
    chunks = [line for line in r.text.splitlines() if line.startswith("data: ")]
    last = orjson.loads(chunks[-1][6:])
    assert last["candidates"][0]["content"]["parts"] == [{"text": "", "thoughtSignature": last["candidates"][0][
        "content"]["parts"][0]["thoughtSignature"]}]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert len({orjson.loads(c[6:])["responseId"] for c in chunks}) == 1


def _compat_loop(client: Any, path: str, drop: str | None,
                 mangle: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """One tool round on a compat profile, then its replay with ``drop`` removed from (or ``mangle``
    applied to) the assistant message."""
    headers = {"authorization": "Bearer k"}
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "[[sim:tools=1]] q"}],
                            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    msg = client.post(path, json=body, headers=headers).json()["choices"][0]["message"]
    if drop:
        msg.pop(drop)
    if mangle:
        mangle(msg)
    body["messages"] += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "r"}]
    return client.post(path, json=body, headers=headers)


def test_compat_profiles_reject_dropped_reasoning(client: Any) -> None:
    for path in ("/openrouter/api/v1/chat/completions", "/copilot/chat/completions", "/deepseek/v1/chat/completions"):
        assert _compat_loop(client, path, None).status_code == 200
    r = _compat_loop(client, "/openrouter/api/v1/chat/completions", "reasoning_details")
    err = r.json()["error"]
    assert r.status_code == 400 and err["message"] == "Provider returned error"
    assert err["metadata"]["raw"].startswith("Gemini models require OpenRouter reasoning details to be preserved")
    assert "in the 2. content block is missing a `thought_signature`" in err["metadata"]["raw"]
    r = _compat_loop(client, "/copilot/chat/completions", "reasoning_opaque")
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("Unable to submit request")
    r = _compat_loop(client, "/deepseek/v1/chat/completions", "reasoning_content")
    assert r.json() == {"error": {
        "message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}


def test_copilot_rejects_an_empty_content_list(client: Any) -> None:
    """Rule 22: a tool-only assistant message must carry ``content: null``, never ``[]`` (seed 004)."""
    r = _compat_loop(client, "/copilot/chat/completions", None, lambda m: m.update(content=[]))
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "invalid request body", "code": "invalid_request_body"}}
    assert _compat_loop(client, "/copilot/chat/completions", None, lambda m: m.update(content=None)).status_code == 200


def test_openrouter_rejects_reasoning_details_without_the_encrypted_entry(client: Any) -> None:
    """Rule 21: keeping only the ``reasoning.text`` entries is as bad as dropping them all."""
    def text_only(m: dict[str, Any]) -> None:
        m["reasoning_details"] = [d for d in m["reasoning_details"] if d["type"] == "reasoning.text"]
        assert m["reasoning_details"], "the answer carried a text entry to keep"

    r = _compat_loop(client, "/openrouter/api/v1/chat/completions", None, text_only)
    upstream = orjson.dumps({"error": {"code": 400, "message": VERTEX_16, "status": "INVALID_ARGUMENT"}},
                            option=orjson.OPT_INDENT_2).decode()
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "Provider returned error", "code": 400, "metadata": {
        "raw": "Gemini models require OpenRouter reasoning details to be preserved in each request. Please refer to "
               "our docs: https://openrouter.ai/docs/use-cases/reasoning-tokens#preserving-reasoning-blocks. "
               f"Upstream error: {upstream}\n", "provider_name": "Google"}}}


DEEPSEEK_23 = {"error": {"message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
                         "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}


def test_deepseek_answers_need_their_reasoning_back_in_spans_with_tool_calls(client: Any) -> None:
    """Rule 23 (docs/upstream-rules.md): every assistant message the simulator minted, text-only answers included,
    between two user messages where the model called tools, while the request carries ``tools`` and thinking mode is
    on (``thinking.type`` not ``disabled``). A text answer in a span without tool calls need not come back."""
    path, headers = "/deepseek/v1/chat/completions", {"authorization": "Bearer k"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    first = [{"role": "user", "content": "[[sim:tools=1]] hello"}]
    step = client.post(path, json={"model": "m", "messages": first, "tools": tools},
                       headers=headers).json()["choices"][0]["message"]
    assert step["reasoning_content"] and step["tool_calls"]
    loop = [*first, step, {"role": "tool", "tool_call_id": step["tool_calls"][0]["id"], "content": "ok"}]
    answer = client.post(path, json={"model": "m", "messages": loop, "tools": tools},
                         headers=headers).json()["choices"][0]["message"]
    assert answer["reasoning_content"] and "tool_calls" not in answer

    def replay(msgs: list[dict[str, Any]], *, with_tools: bool = True, **extra: Any) -> Any:
        body: dict[str, Any] = {"model": "m", "messages": [*msgs, {"role": "user", "content": "and then?"}], **extra}
        if with_tools:
            body["tools"] = tools
        return client.post(path, json=body, headers=headers)

    bare = {k: v for k, v in answer.items() if k != "reasoning_content"}
    r = replay([*loop, bare])
    assert (r.status_code, r.json()) == (400, DEEPSEEK_23), "a text answer in a span with tool calls"
    parts = {**bare, "content": [{"type": "text", "text": answer["content"]}]}  # content as text parts
    assert replay([*loop, parts]).status_code == 400
    bare_step = {k: v for k, v in step.items() if k != "reasoning_content"}
    assert replay([*first, bare_step, *loop[2:], answer]).status_code == 400, "a step's own reasoning"
    assert replay([*loop, answer]).status_code == 200
    assert replay([*loop, bare], with_tools=False).status_code == 200, "without tools, reasoning need not come back"
    assert replay([*loop, bare], thinking={"type": "disabled"}).status_code == 200, "thinking mode off"
    written_out = [*first, {"role": "assistant", "content": "[called tool f with {}]"},
                   {"role": "user", "content": "[tool result]\nok"}, bare]
    assert replay(written_out).status_code == 200, "a span without tool calls: its reasoning is ignored"
    foreign = {**bare, "content": "An answer this simulator never gave."}
    assert replay([*loop, foreign]).status_code == 200, "only its own (minted) answers are checked"


def test_rate_limit_answers_as_google_does_without_a_retry_after_header(client: Any) -> None:
    """``[[sim:fault=ratelimit:S]]``: AI Studio names the delay in the body (RetryInfo), Vertex does not; neither
    sends ``retry-after``. With ``fault_times=1`` the next request of the conversation goes through."""
    def post(prefix: str, text: str) -> Any:
        body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
        return client.post(f"{prefix}/models/{MODEL}:generateContent", json=body, headers=KEY)

    r = post("/v1beta", "[[sim:fault=ratelimit:7]] [[sim:fault_times=1]] hi")
    err = r.json()["error"]
    assert r.status_code == 429 and "retry-after" not in r.headers
    assert (err["code"], err["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert err["message"].startswith("You exceeded your current quota") and err["message"].endswith("retry in 7s.")
    assert [d for d in err["details"] if d["@type"].endswith("google.rpc.RetryInfo")] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]
    assert post("/v1beta", "[[sim:fault=ratelimit:7]] [[sim:fault_times=1]] hi").status_code == 200
    r = post("/vertex/v1beta", "[[sim:fault=ratelimit:7]] again")
    assert r.status_code == 429 and "retry-after" not in r.headers
    assert r.json() == {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": (
        "Resource exhausted. Please try again later. Please refer to "
        "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.")}}


def _claude_loop(client: Any, mangle: Callable[[dict[str, Any]], None], **params: Any) -> Any:
    """One tool round of ``anthropic/...`` on the OpenRouter profile, then its replay with ``mangle`` applied."""
    headers = {"authorization": "Bearer k"}
    body: dict[str, Any] = {"model": "anthropic/claude-sonnet-4.5", "reasoning": {"max_tokens": 2048},
                            "messages": [{"role": "user", "content": "[[sim:tools=1]] q"}],
                            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    msg = client.post("/openrouter/api/v1/chat/completions", json=body,
                      headers=headers).json()["choices"][0]["message"]
    assert msg["reasoning_details"][0]["format"] == "anthropic-claude-v1" and msg["reasoning_details"][0]["signature"]
    mangle(msg)
    body["messages"] += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "r"}]
    return client.post("/openrouter/api/v1/chat/completions", json={**body, **params}, headers=headers)


def _anthropic_raw(r: Any) -> str:
    err = r.json()["error"]
    assert r.status_code == 400 and err["message"] == "Provider returned error"
    assert err["metadata"]["provider_name"] == "Anthropic"
    return str(orjson.loads(err["metadata"]["raw"])["error"]["message"])


def test_openrouter_anthropic_models_follow_anthropics_thinking_rules(client: Any) -> None:
    """docs/upstream-rules.md ``compat-anthropic-N``: the body as OpenRouter translates it, Anthropic's rules, the
    error relayed in OpenRouter's envelope."""
    assert _claude_loop(client, lambda m: None).status_code == 200

    def unsigned(m: dict[str, Any]) -> None:
        m["reasoning_details"] = [{"type": "reasoning.text", "text": m["reasoning_details"][0]["text"]}]

    def forged(m: dict[str, Any]) -> None:
        m["reasoning_details"][0]["signature"] = "c2lnbmF0dXJl"

    assert _anthropic_raw(_claude_loop(client, unsigned)) == "messages.1.content.0.thinking.signature: Field required"
    invalid = "messages.1.content.0: Invalid `signature` in `thinking` block"
    assert _anthropic_raw(_claude_loop(client, forged)) == invalid
    dropped = _anthropic_raw(_claude_loop(client, lambda m: m.pop("reasoning_details")))
    assert dropped.startswith("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`")
    assert _claude_loop(client, lambda m: m.pop("reasoning_details"), reasoning={"enabled": False}).status_code == 200

"""Issue 36: Claude on Bedrock (InvokeModel) and on Vertex AI, Gemini on Vertex AI, through real processes: the
official SDKs as clients, a gateway whose routes send models to the platforms at the strict simulator (SigV4 with a
test key, event-stream framing, Google's token endpoint and bearer check), each platform's thinking rules enforced.

Straight to the simulator, a loop whose client drops its thinking fails with the platform's own error (the official
``AnthropicBedrock`` and ``AnthropicVertex`` clients); through the gateway the same loop completes with zero upstream
4xx and the thinking back on every replayed turn. A conversation that starts on the Claude API and falls back to
Bedrock for the same model mid-loop keeps its thinking across the platforms (Claude's signatures are valid on every
platform: docs/upstream-rules.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx
import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.support.cloud.helpers import (
    BEDROCK_CLAUDE,
    CONVERSE_CLAUDE,
    KEY_ID,
    PROJECT,
    REGION,
    SECRET,
    VERTEX_CLAUDE,
    VERTEX_GEMINI,
    cloud_env,
)

pytestmark = pytest.mark.timeout(120)
T = TypeVar("T")
TOOLS: Any = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}]
OPENAI_TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
INTERLEAVED = "interleaved-thinking-2025-05-14"
CLAUDES = {"bedrock": BEDROCK_CLAUDE, "bedrock-converse": CONVERSE_CLAUDE, "vertex": VERTEX_CLAUDE}


@pytest.fixture(scope="module")
def cloud_gateway(sim: Sim, gateways: GatewayFactory, tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    return gateways.start(sim.url, cloud_env(sim, tmp_path_factory.mktemp("cloud")))


OPEN: list[Any] = []  # the clients a test made: closed after it (their connection pools)


def _closed_after(client: T) -> T:
    OPEN.append(client)
    return client


def _anthropic(url: str, key: str) -> anthropic.Anthropic:
    return _closed_after(anthropic.Anthropic(base_url=url, api_key=key, max_retries=0))


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


def _dropped(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What an IDE client replays of an assistant turn: its thinking dropped."""
    return [b for b in content if b["type"] not in ("thinking", "redacted_thinking")]


def _messages_loop(client: anthropic.Anthropic, model: str, prompt: str, *, stream: bool, drop: bool,
                   extra: Any = None) -> tuple[list[Any], str]:
    messages: list[Any] = [{"role": "user", "content": prompt}]
    for _ in range(4):
        kw: Any = {"model": model, "max_tokens": 4096, "thinking": THINKING, "tools": TOOLS, "messages": messages,
                   "extra_headers": {"anthropic-beta": INTERLEAVED},  # (every turn thinks; Bedrock: in the body)
                   **({"extra_body": extra} if extra else {})}
        if stream:
            with client.messages.stream(**kw) as s:
                answer = s.get_final_message()
        else:
            answer = client.messages.create(**kw)
        content = [b.model_dump(exclude_none=True) for b in answer.content]
        calls = [b for b in content if b["type"] == "tool_use"]
        messages.append({"role": "assistant", "content": _dropped(content) if drop else content})
        if not calls:
            return messages, answer.stop_reason or ""
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"], "content": "sunny"}
                                                     for c in calls]})
    raise AssertionError("the loop did not finish")


def _kept(body: dict[str, Any]) -> list[bool]:
    """Per replayed assistant turn: does it open with its signed thinking (the Messages form, or Converse's)?"""
    def first(m: dict[str, Any]) -> bool:
        b = m["content"][0]
        rc = b.get("reasoningContent", {}).get("reasoningText", {})
        return (b.get("type") == "thinking" and bool(b.get("signature"))) or bool(rc.get("signature"))
    return [first(m) for m in body["messages"] if m["role"] == "assistant"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("platform", sorted(CLAUDES))
def test_a_messages_client_that_drops_thinking_completes_on_claudes_platform(
        sim: Sim, cloud_gateway: ServerProcess, platform: str, stream: bool) -> None:
    """The Messages surface sends a routed Claude model to its platform (signed, in the platform's body and
    framing); the client drops every thinking block, the gateway restores them, the platform accepts them."""
    client = _anthropic(cloud_gateway.url, f"sk-ant-cloud-{platform}")
    before = sim.stats()
    _, stop = _messages_loop(client, CLAUDES[platform], f"[[sim:tools=2]] [[sim:conv=cloud-{platform}-{stream}]] "
                             "weather?", stream=stream, drop=True)
    after = sim.stats()
    assert stop == "end_turn" and after["rejections"] == before["rejections"], after["rejections"]
    assert after["accepted"] - before["accepted"] == 3 and after["unauthorized"] == before["unauthorized"]
    last = sim.last()
    assert "model" not in last["body"] and _kept(last["body"]) == [True, True]
    if platform == "bedrock-converse":
        assert last["path"] == f"/model/{CONVERSE_CLAUDE}/" + ("converse-stream" if stream else "converse")
        assert last["body"]["additionalModelRequestFields"] == {"thinking": THINKING, "anthropic_beta": [INTERLEAVED]}
        assert last["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
        return
    if platform == "bedrock":
        assert last["path"] == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/" + (
            "invoke-with-response-stream" if stream else "invoke")
        assert last["body"]["anthropic_version"] == "bedrock-2023-05-31" and "stream" not in last["body"]
        assert last["body"]["anthropic_beta"] == [INTERLEAVED]
        assert last["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
    else:
        assert last["path"] == (f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/"
                                f"{VERTEX_CLAUDE}:{'streamRawPredict' if stream else 'rawPredict'}")
        assert last["body"]["anthropic_version"] == "vertex-2023-10-16"
        assert last["headers"]["anthropic-beta"] == INTERLEAVED
        assert last["headers"]["authorization"].startswith("Bearer ya29.sim.")
    assert "x-api-key" not in last["headers"]  # the client's key never reaches the platform


@pytest.mark.parametrize("platform", ["bedrock", "vertex"])
def test_straight_to_the_platform_the_same_loop_fails_with_its_own_error(sim: Sim, platform: str) -> None:
    """The official platform clients, straight to the simulator: the turn without its thinking is the platform's
    400 (Bedrock: ``ValidationException``, "The model returned the following errors: ..."; Vertex: Anthropic's
    envelope)."""
    client: anthropic.Anthropic
    if platform == "bedrock":
        client = _closed_after(anthropic.AnthropicBedrock(  # type: ignore[assignment]
            aws_region="us-east-1", aws_access_key=KEY_ID, aws_secret_key=SECRET, base_url=sim.url, max_retries=0))
    else:
        token = httpx.post(sim.url + "/token", data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                                                     "assertion": _assertion()}).json()["access_token"]
        client = _closed_after(anthropic.AnthropicVertex(  # type: ignore[assignment]
            region=REGION, project_id=PROJECT, access_token=token, base_url=sim.url + "/v1", max_retries=0))
    # (the SDK's default body version, 2026-10-21, is Bedrock's for Claude 4.7 and later only: Sonnet 4.5 takes its own)
    extra = {"anthropic_version": "bedrock-2023-05-31"} if platform == "bedrock" else None
    with pytest.raises(anthropic.BadRequestError) as refused:
        _messages_loop(client, CLAUDES[platform], f"[[sim:tools=2]] [[sim:conv=straight-{platform}]] weather?",
                       stream=False, drop=True, extra=extra)
    text = str(refused.value)
    assert "Expected `thinking` or `redacted_thinking`, but found `text`" in text, text
    if platform == "bedrock":
        assert "The model returned the following errors: messages.1.content.0.type" in text, text
        assert refused.value.response.headers["x-amzn-errortype"].startswith("ValidationException:")
    else:
        assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def _assertion() -> str:
    import base64
    import json
    import time
    part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    claims = {"iss": f"t@{PROJECT}.iam.gserviceaccount.com", "scope": "https://www.googleapis.com/auth/cloud-platform",
              "aud": "token", "iat": int(time.time()), "exp": int(time.time()) + 600}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


@pytest.mark.parametrize("model", [BEDROCK_CLAUDE, CONVERSE_CLAUDE, VERTEX_CLAUDE, VERTEX_GEMINI],
                         ids=["bedrock", "bedrock-converse", "vertex-claude", "vertex-gemini"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_openai_client_tool_loop_keeps_thinking_on_each_platform(
        sim: Sim, cloud_gateway: ServerProcess, model: str, stream: bool) -> None:
    """An OpenAI chat client (which replays no thinking at all) on every new upstream: zero upstream 4xx, and every
    replayed turn reaches the platform with its thinking (Claude: signed thinking first; Gemini: the signature on
    the call)."""
    client = _closed_after(openai.OpenAI(base_url=cloud_gateway.url + "/v1", api_key="sk-cloud-openai", max_retries=0))
    before = sim.stats()
    messages: list[Any] = [{"role": "user", "content": f"[[sim:tools=2]] [[sim:conv=oa-{model}-{stream}]] weather?"}]
    for _ in range(4):
        if stream:
            parts = list(client.chat.completions.create(model=model, messages=messages, tools=OPENAI_TOOLS,
                                                        reasoning_effort="low", stream=True))
            calls: dict[int, Any] = {}
            text = ""
            for p in parts:
                for d in p.choices[0].delta.tool_calls or () if p.choices else ():
                    c = calls.setdefault(d.index, {"id": d.id, "type": "function",
                                                   "function": {"name": "", "arguments": ""}})
                    c["function"]["name"] += d.function.name or "" if d.function else ""
                    c["function"]["arguments"] += d.function.arguments or "" if d.function else ""
                text += (p.choices[0].delta.content or "") if p.choices else ""
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = [calls[k] for k in sorted(calls)]
        else:
            answer = client.chat.completions.create(model=model, messages=messages, tools=OPENAI_TOOLS,
                                                    reasoning_effort="low")
            msg = answer.choices[0].message.model_dump(exclude_none=True)
        messages.append(msg)
        if not msg.get("tool_calls"):
            break
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in msg["tool_calls"]]
    after = sim.stats()
    assert after["rejections"] == before["rejections"], after["rejections"]
    assert messages[-1]["content"] and not messages[-1].get("tool_calls")
    body = sim.last()["body"]
    if "contents" in body:  # Gemini on Vertex: the first call of each step signed
        steps = [c for c in body["contents"] if c["role"] == "model"]
        assert steps and all(any("thoughtSignature" in p for p in c["parts"]) for c in steps), steps
    else:  # (without interleaved thinking only the loop's first turn thinks: the one the rules need back)
        assert _kept(body)[0], body["messages"]


def test_a_loop_that_falls_back_from_the_claude_api_to_bedrock_keeps_its_thinking(
        sim: Sim, gateways: GatewayFactory, tmp_path: Path) -> None:
    """Anthropic direct answers 529 at the loop's second round: the round goes to Bedrock for the same model
    (``GATEWAY_FALLBACKS``) with the thinking the Claude API minted (valid on every platform), the next round back to
    the Claude API with the thinking Bedrock minted; zero upstream 4xx, thinking on every replayed turn."""
    env = cloud_env(sim, tmp_path, GATEWAY_FALLBACKS=f"claude-sonnet-4-5={BEDROCK_CLAUDE}")
    gw = gateways.start(sim.url, env)
    client = _anthropic(gw.url, "sk-ant-cloud-fallback")
    before = sim.stats()
    seen: list[tuple[str, list[bool]]] = []
    original = client.messages.create

    def create(**kw: Any) -> Any:
        answer = original(**kw)
        last = sim.last()
        seen.append((last["path"], _kept(last["body"])))
        return answer
    client.messages.create = create  # type: ignore[method-assign]
    _, stop = _messages_loop(client, "claude-sonnet-4-5", "[[sim:conv=cloud-fallback]] [[sim:tools=3]] "
                             "[[sim:fault=overloaded]] [[sim:fault_round=2]] [[sim:fault_times=1]] weather?",
                             stream=False, drop=True)
    after = sim.stats()
    assert stop == "end_turn" and after["rejections"] == before["rejections"], after["rejections"]
    paths = [p.split("/")[1] for p, _ in seen]
    assert paths == ["v1", "v1", "model", "v1"], seen  # round 2 (the third request) on Bedrock, then back
    assert all(all(kept) for _, kept in seen) and seen[-1][1] == [True, True, True], seen
    assert metric_sum(gw, "gateway_fallbacks_total") == 1


def test_a_platform_that_refuses_the_credential_is_the_clients_error_not_a_500(
        sim: Sim, gateways: GatewayFactory, tmp_path: Path) -> None:
    """A wrong AWS secret: Bedrock's 403 (``InvalidSignatureException``) in the client's own envelope."""
    gw = gateways.start(sim.url, cloud_env(sim, tmp_path, AWS_SECRET_ACCESS_KEY="not-the-secret"))
    client = _anthropic(gw.url, "sk-ant-cloud-badkey")
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        client.messages.create(model=BEDROCK_CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    assert "signature we calculated does not match" in refused.value.body["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_gemini_client_on_vertex_gets_the_gemini_apis_answers(sim: Sim, cloud_gateway: ServerProcess,
                                                                  stream: bool) -> None:
    """The Gemini native surface in front of Gemini on Vertex AI: the client's ``?key=`` stays at the gateway (the
    call carries Google's bearer), the answer is the Gemini API's; a replayed call keeps its signature."""
    action = "streamGenerateContent?alt=sse" if stream else "generateContent"
    contents: list[Any] = [{"role": "user", "parts": [{"text": f"[[sim:tools=1]] [[sim:conv=native-{stream}]] hi"}]}]
    tools = [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]
    for _ in range(3):
        answer = httpx.post(f"{cloud_gateway.url}/v1beta/models/{VERTEX_GEMINI}:{action}&key=k1".replace(
            "Content&", "Content?"), json={"contents": contents, "tools": tools}, timeout=30)
        assert answer.status_code == 200, answer.text
        chunks = [httpx.Response(200, content=line[6:]).json() for line in answer.text.splitlines()
                  if line.startswith("data: ")] if stream else [answer.json()]
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        calls = [p for p in parts if "functionCall" in p]
        contents.append({"role": "model", "parts": [p for p in parts if "text" not in p or p.get("text")]})
        if not calls:
            break
        contents.append({"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
                                                                          "response": {"ok": True}}}]})
    last = sim.last()
    assert last["path"].startswith(f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/")
    assert "key=" not in last["query"] and last["headers"]["authorization"].startswith("Bearer ya29.sim.")
    assert not calls


def test_straight_to_converse_the_official_aws_client_meets_bedrocks_error(sim: Sim) -> None:
    """boto3's ``bedrock-runtime`` client (Converse, its own SigV4 and parsers) straight to the simulator: a faithful
    first round works (its stream too), a replay without the reasoning block is Bedrock's ``ValidationException``."""
    import boto3
    from botocore.exceptions import ClientError

    client = _closed_after(boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=sim.url,
                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET))
    kw: Any = {"modelId": CONVERSE_CLAUDE, "inferenceConfig": {"maxTokens": 2048},
               "additionalModelRequestFields": {"thinking": THINKING},
               "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}}]}}
    messages: list[Any] = [{"role": "user", "content": [{"text": "[[sim:tools=1]] [[sim:conv=boto3]] weather?"}]}]
    answer = client.converse(messages=messages, **kw)
    content = answer["output"]["message"]["content"]
    assert answer["stopReason"] == "tool_use" and "reasoningContent" in content[0], content
    events = list(client.converse_stream(messages=messages, **kw)["stream"])
    assert {next(iter(e)) for e in events} >= {"messageStart", "contentBlockDelta", "messageStop", "metadata"}
    use = next(b["toolUse"] for b in content if "toolUse" in b)
    replay = [*messages, {"role": "assistant", "content": [b for b in content if "reasoningContent" not in b]},
              {"role": "user", "content": [{"toolResult": {"toolUseId": use["toolUseId"],
                                                           "content": [{"text": "ok"}]}}]}]
    with pytest.raises(ClientError) as refused:
        client.converse(messages=replay, **kw)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert refused.value.response["Error"]["Message"].startswith(
        "The model returned the following errors: messages.1.content.0.type: Expected `thinking`")


def test_straight_to_vertex_gemini_a_dropped_signature_is_vertexs_error(sim: Sim) -> None:
    token = httpx.post(sim.url + "/token", data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                                                 "assertion": _assertion()}).json()["access_token"]
    url = f"{sim.url}/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/{VERTEX_GEMINI}:generateContent"
    tools = [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]
    contents: list[Any] = [{"role": "user", "parts": [{"text": "[[sim:tools=2]] [[sim:conv=vx-straight]] hi"}]}]
    auth = {"authorization": f"Bearer {token}"}
    assert httpx.post(url, json={"contents": contents, "tools": tools}).status_code == 401  # no token
    first = httpx.post(url, json={"contents": contents, "tools": tools}, headers=auth).json()
    parts = first["candidates"][0]["content"]["parts"]
    dropped = [{k: v for k, v in p.items() if k != "thoughtSignature"} for p in parts]
    contents += [{"role": "model", "parts": dropped}, {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"ok": True}}}]}]
    refused = httpx.post(url, json={"contents": contents, "tools": tools}, headers=auth)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"].startswith("Unable to submit request because function call "
                                                         "`default_api:get_weather` in the 2. content block is missing")


def test_by_default_a_cloud_route_serves_gateway_keys_only(sim: Sim, gateways: GatewayFactory, tmp_path: Path) -> None:
    """The platform's credential is the gateway's own: a request without a gateway key is a 401 in the client's
    envelope (nothing reaches the platform); with one, it is served, and no client credential reaches the platform.
    The Claude API route beside it still forwards the client's own key."""
    admin = "admin-token-cloud-0123456789"
    env = cloud_env(sim, tmp_path, GATEWAY_CLOUD_WITHOUT_KEYS="false", GATEWAY_ADMIN_TOKEN=admin)
    gw = gateways.start(sim.url, env)
    before = sim.stats()["requests"]
    own = _anthropic(gw.url, "sk-ant-own-key")
    with pytest.raises(anthropic.AuthenticationError, match="serves requests with a gateway key only"):
        own.messages.create(model=BEDROCK_CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert sim.stats()["requests"] == before
    assert own.messages.create(model="claude-sonnet-4-5", max_tokens=64,
                               messages=[{"role": "user", "content": "hi"}]).content  # (the Claude API: as before)
    made = httpx.post(f"{gw.url}/admin/keys", json={"name": "cloud-team"}, timeout=10,
                      headers={"authorization": f"Bearer {admin}"})
    assert made.status_code == 201, made.text
    keyed = _anthropic(gw.url, made.json()["key"])
    for model in (BEDROCK_CLAUDE, VERTEX_CLAUDE):
        assert keyed.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]).content
        seen = sim.last()["headers"]
        assert "x-api-key" not in seen and not seen["authorization"].startswith("Bearer tgk_"), seen


@pytest.mark.parametrize("platform", sorted(CLAUDES))
def test_count_tokens_is_counted_by_claudes_platform(sim: Sim, cloud_gateway: ServerProcess, platform: str) -> None:
    """``/v1/messages/count_tokens`` for a Claude model on a platform: Bedrock's CountTokens (the InvokeModel body,
    or a Converse input), Vertex's ``count-tokens:rawPredict``; the answer is the Messages API's."""
    client = _anthropic(cloud_gateway.url, "sk-ant-cloud-count")
    counted = client.messages.count_tokens(model=CLAUDES[platform], messages=[{"role": "user", "content": "hello"}],
                                           tools=TOOLS)
    assert counted.input_tokens > 0
    last = sim.last()
    if platform == "vertex":
        assert last["path"].endswith("/publishers/anthropic/models/count-tokens:rawPredict")
        assert last["body"]["model"] == VERTEX_CLAUDE and last["body"]["anthropic_version"] == "vertex-2023-10-16"
    else:
        assert last["path"] == f"/model/{CLAUDES[platform]}/count-tokens"
        assert set(last["body"]["input"]) == {"converse" if platform == "bedrock-converse" else "invokeModel"}


def test_a_block_converse_has_no_form_for_is_the_clients_400(sim: Sim, cloud_gateway: ServerProcess) -> None:
    """A Messages request with a block Bedrock's Converse API cannot carry (an image), routed there: 400 in the
    Messages API's envelope naming it, nothing sent upstream, never a 500."""
    client = _anthropic(cloud_gateway.url, "sk-ant-cloud-image")
    before = sim.stats()["requests"]
    image: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=CONVERSE_CLAUDE, max_tokens=64,
                               messages=[{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "no form in Bedrock's Converse API" in refused.value.body["error"]["message"]  # type: ignore[index]
    assert sim.stats()["requests"] == before


@pytest.mark.parametrize("model", ["us.anthropic.claude-opus-5-5-v1:0", "claude-opus-5-5@20261101"],
                         ids=["bedrock", "vertex"])
def test_a_model_that_binds_its_thinking_keeps_its_prefix_on_a_platform(
        sim: Sim, gateways: GatewayFactory, tmp_path: Path, model: str) -> None:
    """A bound model (Opus 5.5) on Bedrock and Vertex, a client that rewrites its system prompt on every request:
    the gateway keeps the recorded prefix (the client's new prompt as a mid-conversation system message, the beta
    in the platform's form), every earlier thinking block reaches the platform, zero 4xx."""
    from tests.process.e2e.test_binding_gateway import loop, rewrites_system, thinking_blocks

    routes = f"us.anthropic.=bedrock@us-east-1,claude-opus-5-5@=vertex@{PROJECT}/{REGION}"
    gw = gateways.start(sim.url, cloud_env(sim, tmp_path, GATEWAY_ROUTES=routes))
    before = sim.stats()["rejections"]
    seen: list[dict[str, Any]] = []
    replies = loop([gw.url], rewrites_system, stream=False, seen=seen, sim=sim, model=model)
    assert len(replies) == 4 and sim.stats()["rejections"] == before
    assert [thinking_blocks(b) for b in seen] == [0, 1, 2, 3]
    assert all(b["system"] == seen[0]["system"] for b in seen[1:])
    assert [m for m in seen[-1]["messages"] if m["role"] == "system"], "the client's new prompts, as system messages"


def test_a_platform_credential_that_cannot_be_had_is_a_502_naming_the_upstream(
        sim: Sim, gateways: GatewayFactory, tmp_path: Path) -> None:
    """No Google credentials where ADC looks, no AWS keys: each platform's request is a 502 in the client's envelope
    naming the upstream and why (never the credential, never a traceback), and nothing reaches the platform."""
    env = cloud_env(sim, tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "missing.json"),
                    AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    gw = gateways.start(sim.url, env)
    client = _anthropic(gw.url, "sk-ant-cloud-nocreds")
    before = sim.stats()["requests"]
    for model, upstream in ((VERTEX_CLAUDE, "vertex"), (BEDROCK_CLAUDE, "bedrock")):
        with pytest.raises(anthropic.InternalServerError) as failed:
            client.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
        assert failed.value.status_code == 502
        assert f"could not sign the request to upstream {upstream}" in str(failed.value.body), failed.value.body
    assert sim.stats()["requests"] == before and "Traceback" not in gw.log()


@pytest.mark.parametrize("model", [BEDROCK_CLAUDE, CONVERSE_CLAUDE], ids=["invoke", "converse"])
def test_an_exception_inside_bedrocks_event_stream_reaches_the_client_as_an_error_event(
        sim: Sim, cloud_gateway: ServerProcess, model: str) -> None:
    """Bedrock fails a started stream with an ``exception`` frame (throttling): the client's stream ends with the
    Messages API's ``error`` event (overloaded) read through each API's framing; the next request is served."""
    client = _anthropic(cloud_gateway.url, "sk-ant-cloud-midstream")
    prompt = f"[[sim:conv=midstream-{model}]] [[sim:fault=midstream]] [[sim:fault_times=1]] hello"
    with pytest.raises(anthropic.APIStatusError) as failed, client.messages.stream(
            model=model, max_tokens=256, messages=[{"role": "user", "content": prompt}]) as s:
        s.get_final_message()
    assert "overloaded" in str(failed.value.body) or "throttlingException" in str(failed.value.body), failed.value.body
    again = client.messages.create(model=model, max_tokens=256, messages=[{"role": "user", "content": prompt}])
    assert again.stop_reason == "end_turn"  # (the fault was the first request's only)


@pytest.mark.parametrize("model", [BEDROCK_CLAUDE, CONVERSE_CLAUDE, VERTEX_CLAUDE],
                         ids=["invoke", "converse", "vertex"])
def test_a_big_body_reaches_its_platform_whole(sim: Sim, cloud_gateway: ServerProcess, model: str) -> None:
    """A body past ``GATEWAY_OFFLOAD_BODY_KB`` (256 KiB), whose platform rewrite runs in the worker's offload thread
    as the stages do (``handler._body``): the platform receives the whole history, the answer comes back."""
    client = _anthropic(cloud_gateway.url, "sk-ant-cloud-big")
    history: list[Any] = []
    for n in range(300):
        history += [{"role": "user", "content": f"line {n}: " + "word " * 200}, {"role": "assistant", "content": "ok"}]
    answer = client.messages.create(model=model, max_tokens=64, messages=[*history, {"role": "user", "content": "hi"}])
    assert answer.content
    assert len(sim.last()["body"]["messages"]) == 601

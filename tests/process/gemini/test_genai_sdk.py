"""The official google-genai SDK -> real `thinkgate serve` (the /v1beta Gemini surface) -> the simulator."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.process_fixtures import ServerProcess, Sim
from tests.support.gemini.helpers import GEMINI, Rejections

WEATHER = types.FunctionDeclaration(name="get_weather", description="Weather for a city",
                                    parameters_json_schema={"type": "object",
                                                            "properties": {"city": {"type": "string"}}})
CONFIG = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[WEATHER])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    thinking_config=types.ThinkingConfig(include_thoughts=True))


@pytest.fixture()
def gw(provider_gateway: ServerProcess) -> ServerProcess:
    return provider_gateway


def make_client(url: str, key: str = "gk-test-genai") -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=url, api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)))


@pytest.fixture()
def client(gw: ServerProcess) -> Iterator[genai.Client]:
    c = make_client(gw.url)
    try:
        yield c
    finally:
        c.close()


def answer(client: genai.Client, contents: list[types.Content], stream: bool) -> types.Content:
    if not stream:
        resp = client.models.generate_content(model=GEMINI, contents=contents, config=CONFIG)
        assert resp.candidates and resp.candidates[0].content
        return resp.candidates[0].content
    parts: list[types.Part] = []
    for chunk in client.models.generate_content_stream(model=GEMINI, contents=contents, config=CONFIG):
        assert chunk.candidates and chunk.candidates[0].content
        parts += chunk.candidates[0].content.parts or []
    return types.Content(role="model", parts=parts)


def play(client: genai.Client, prompt: str, stream: bool) -> list[types.Content]:
    contents = [types.Content(role="user", parts=[types.Part(text=prompt)])]
    answers: list[types.Content] = []
    for _ in range(8):
        content = answer(client, contents, stream)
        answers.append(content)
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        if not calls:
            return answers
        contents.append(content)
        contents.append(types.Content(role="user", parts=[
            types.Part.from_function_response(name=c.name or "", response={"weather": "sunny", "args": c.args})
            for c in calls]))
    raise AssertionError("tool loop did not finish")


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_genai_tool_loop(client: genai.Client, sim: Sim, stream: bool) -> None:
    with Rejections(sim):
        answers = play(client, "[[sim:tools=3]] [[sim:parallel=2]] weather?", stream)
    assert len(answers) == 4
    for content in answers[:3]:
        parts = content.parts or []
        assert parts[0].thought is True and "思考 🤔" in "".join(p.text or "" for p in parts if p.thought)
        calls = [p for p in parts if p.function_call]
        assert len(calls) == 2 and calls[0].thought_signature and not calls[1].thought_signature
    final = answers[-1].parts or []
    assert "Final answer after 3 tool rounds" in "".join(p.text or "" for p in final if not p.thought)
    assert final[-1].thought_signature, "the text answer's signature (an empty-text part when streamed)"


def test_google_error_envelope_for_own_and_relayed_errors(client: genai.Client, gw: ServerProcess) -> None:
    with pytest.raises(errors.APIError) as e:
        client.models.generate_content(model=GEMINI, contents="[[sim:fault=overloaded]] hi", config=CONFIG)
    assert e.value.code == 503 and e.value.status == "UNAVAILABLE"
    with pytest.raises(errors.APIError) as e:
        client.models.generate_content(model="claude-opus-4-5", contents="hi")
    assert e.value.code == 400 and e.value.status == "INVALID_ARGUMENT"
    assert "no upstream configured for model claude-opus-4-5 that this endpoint can call" in (e.value.message or "")


def test_stream_without_alt_sse_is_a_json_array(gw: ServerProcess, sim: Sim) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "[[sim:tools=1]] array form"}]}],
            "tools": [{"functionDeclarations": [{"name": "get_weather"}]}]}
    with Rejections(sim):
        r = httpx.post(f"{gw.url}/v1beta/models/{GEMINI}:streamGenerateContent", json=body,
                       headers={"x-goog-api-key": "gk-array"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    chunks = r.json()
    assert isinstance(chunks, list) and len(chunks) > 1
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert any("functionCall" in p and p.get("thoughtSignature") for p in parts)


def test_midstream_upstream_error_reaches_the_sdk_as_a_google_error(client: genai.Client, sim: Sim) -> None:
    """HTTP 200, some chunks, then the upstream's error chunk: the SDK raises Google's error (it reads
    ``{"error": {...}}`` chunks of an ``alt=sse`` stream), never a short answer that ends quietly."""
    received: list[types.GenerateContentResponse] = []
    with pytest.raises(errors.ServerError) as e:
        for chunk in client.models.generate_content_stream(
                model=GEMINI, contents="[[sim:fault=midstream]] [[sim:tools=1]] weather?", config=CONFIG):
            received.append(chunk)
    assert received and received[0].candidates, "the chunks before the failure were relayed"
    assert (e.value.code, e.value.status, e.value.message) == (503, "UNAVAILABLE", "The model is overloaded.")
    assert sim.last()["query"] == "alt=sse"


@pytest.mark.parametrize("action", ["generateContent", "streamGenerateContent"])
def test_a_thought_part_in_the_users_turn_is_answered_and_recorded(gw: ServerProcess, action: str) -> None:
    """Found by schemathesis: a ``thought: true`` part after the last model turn made recording the turn
    (the prompt it answered) fail with a 500 / a cut stream. It is stored in its provider form instead,
    and the conversation continues from the record."""
    first = {"role": "user", "parts": [{"text": f"[[sim:tools=0]] thought in the prompt {action}"},
                                       {"text": "an earlier thought", "thought": True}]}
    headers = {"x-goog-api-key": "gk-thought-prompt"}
    r = httpx.post(f"{gw.url}/v1beta/models/{GEMINI}:{action}", json={"contents": [first]}, headers=headers)
    assert r.status_code == 200, r.text
    scid = r.headers["x-ag-conversation-id"]
    answer = r.json() if action == "generateContent" else r.json()[-1]
    model_turn = {"role": "model", "parts": answer["candidates"][0]["content"]["parts"]}
    nxt = {"contents": [first, model_turn, {"role": "user", "parts": [{"text": "and then?"}]}]}
    r2 = httpx.post(f"{gw.url}/v1beta/models/{GEMINI}:generateContent", json=nxt,
                    headers={**headers, "x-ag-conversation-id": scid})
    assert r2.status_code == 200, r2.text
    assert r2.headers["x-ag-conversation-id"] == scid, "the recorded turn was found again"


def test_a_native_loop_sends_the_clients_fields_byte_for_byte(gw: ServerProcess, sim: Sim) -> None:
    """A Gemini client in front of the Gemini upstream is the same dialect (issue 33 item 3): the repaired contents are
    spliced into the client's own JSON, its other fields reach the upstream as the bytes it wrote (raw bytes: the SDK
    writes its own canonical JSON). The second request drops the model turn's thought signature, which repair puts
    back from the record."""
    tools = b'[ {"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]} ]'
    odd = (b'"generationConfig" : {"temperature": 0.50, "thinkingConfig": {"includeThoughts": true}}, '
           b'"safetySettings": [ {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"} ], '
           b'"labels": {"team": "\\u00e9t\\u00e9"}, "tools": ' + tools)
    url = f"{gw.url}/v1beta/models/{GEMINI}:generateContent"
    headers = {"x-goog-api-key": "gk-test-bytes", "content-type": "application/json"}
    user = {"role": "user", "parts": [{"text": "[[sim:tools=2]] weather in Paris?"}]}

    def post(contents: list[dict[str, object]]) -> dict[str, object]:
        r = httpx.post(url, content=b'{"contents": ' + json.dumps(contents).encode() + b", " + odd + b"}",
                       headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    with Rejections(sim):
        first = post([user])
        model = first["candidates"][0]["content"]  # type: ignore[index]
        calls = [p["functionCall"] for p in model["parts"] if "functionCall" in p]
        assert calls, model
        stripped = {"role": "model", "parts": [{k: v for k, v in p.items() if k != "thoughtSignature"}
                                               for p in model["parts"] if not p.get("thought")]}
        results = {"role": "user", "parts": [{"functionResponse": {"name": c["name"], "response": {"ok": True}}}
                                             for c in calls]}
        post([user, stripped, results])
    last = httpx.get(sim.url + "/_sim/last", params={"raw": "1"}).json()
    for field in (b'{"temperature": 0.50, "thinkingConfig": {"includeThoughts": true}}',
                  b'[ {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"} ]',
                  b'{"team": "\\u00e9t\\u00e9"}', tools):
        assert field.decode() in last["raw"], field
    sent = last["body"]["contents"][1]["parts"]
    assert any("thoughtSignature" in p for p in sent), "the dropped signature is restored"

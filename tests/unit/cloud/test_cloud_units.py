"""The cloud platforms' parts without processes: routes, model ids, the request bodies each platform takes, SigV4
(botocore's signer checked by the simulator's own verifier), the event-stream framing (the simulator's encoder read
by botocore's parser, cut at every byte) and Converse both ways (the gateway's writer read by the simulator's own
reader, the simulator's stream read by the gateway's translator)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import orjson
import pytest
from botocore.credentials import Credentials

from gateway.app.settings import Settings
from gateway.dialects import registry
from gateway.dialects.accumulate import Snapshot, accumulate, message_dict
from gateway.dialects.bedrock import converse
from gateway.dialects.bedrock import wire as bedrock
from gateway.dialects.bedrock.sigv4 import sign
from gateway.dialects.routing import RouteError, Router, model_family, parse_routes
from gateway.dialects.vertex import wire as vertex
from thinkgate_sim import cloud as sim_cloud
from thinkgate_sim import eventstream, sigv4
from thinkgate_sim.render import stream_events

KEY_ID, SECRET = next(iter(sigv4.TEST_KEYS.items()))
URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
MESSAGE: dict[str, Any] = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "thinking", "thinking": "Let me look.", "signature": "c2lnbmF0dXJl"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
    "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 7}}


def test_routes_name_each_platform_by_its_location() -> None:
    routes = parse_routes("us.anthropic.=bedrock@us-east-1,eu.=bedrock-converse@eu-west-1,"
                          "claude-=vertex@my-project/us-east5,gemini-=vertex@my-project/us-east5")
    assert [(r.upstream, r.location) for r in routes] == [
        ("bedrock", "us-east-1"), ("bedrock-converse", "eu-west-1"), ("vertex", "my-project/us-east5"),
        ("vertex", "my-project/us-east5")]
    router = Router(routes)
    caps = router.caps_for("us.anthropic.claude-opus-4-7-v1")  # the built-in table by the Claude name inside
    assert (caps.upstream, caps.kind, caps.adaptive_only, caps.can_disable_thinking) == ("bedrock", "bedrock", True,
                                                                                         False)
    assert router.caps_for("claude-sonnet-4-5@20250929").kind == "vertex-anthropic"
    assert router.caps_for("gemini-3-pro-preview").kind == "vertex-gemini"
    for bad, why in (("x=bedrock@mars-1", "AWS region"), ("x=vertex@p/us-east5", "PROJECT/REGION"),
                     ("x=bedrock@us-east-1,y=bedrock@us-west-2", "two locations")):
        with pytest.raises(RouteError, match=why):
            parse_routes(bad)


def test_each_platform_has_its_endpoint_and_an_override() -> None:
    routes = "a=bedrock@us-west-2,b=vertex@my-project/global,c=vertex@my-project/global"
    assert {k: v for k, v in Settings(routes=routes).upstream_urls().items() if k in registry.CLOUD} == {
        "bedrock": "https://bedrock-runtime.us-west-2.amazonaws.com",
        "vertex": "https://aiplatform.googleapis.com/v1/projects/my-project/locations/global"}
    urls = Settings(routes=routes, vertex_base_url="http://psc.internal").upstream_urls()
    assert urls["vertex"] == "http://psc.internal/v1/projects/my-project/locations/global"


def test_a_platform_model_id_is_its_claude_family() -> None:
    for model in ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic.claude-sonnet-4-5-20250929-v1:0",
                  "claude-sonnet-4-5@20250929", "global.anthropic.claude-sonnet-4-5-20250929-v1:0"):
        assert model_family(model) == "claude-sonnet-4-5", model


def test_invoke_and_raw_predict_take_the_messages_body_their_way() -> None:
    body = orjson.dumps({"model": "m", "stream": True, "max_tokens": 5, "messages": []})
    out = orjson.loads(bedrock.finish(body, {"anthropic-beta": "a, b"}))
    assert out == {"max_tokens": 5, "messages": [], "anthropic_version": "bedrock-2023-05-31",
                   "anthropic_beta": ["a", "b"]}
    out = orjson.loads(vertex.finish(body, {}))
    assert out == {"stream": True, "max_tokens": 5, "messages": [], "anthropic_version": "vertex-2023-10-16"}
    assert bedrock.path("arn:aws:bedrock:us-east-1:1:inference-profile/x", True) == (
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/invoke-with-response-stream")


def _signed(body: bytes, url: str = URL, secret: str = SECRET) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    return {**{k.lower(): v for k, v in sign(Credentials(KEY_ID, secret), "us-east-1", "POST", url, headers, body)
               .items()}, "host": "bedrock-runtime.us-east-1.amazonaws.com", **headers}


def test_botocores_signature_passes_the_simulators_check_and_a_changed_byte_fails_it() -> None:
    body = b'{"messages":[]}'
    path = URL.split(".com", 1)[1]
    assert sigv4.verify("POST", path, "", _signed(body), body) is None
    assert sigv4.verify("POST", path, "", _signed(body), body + b" ") == sigv4.MISMATCH
    assert sigv4.verify("POST", path, "", _signed(body, secret="wrong"), body) == sigv4.MISMATCH
    assert sigv4.verify("POST", path, "", {"host": "h"}, body) == sigv4.MISSING
    other = {**_signed(body), "authorization": _signed(body)["authorization"].replace(KEY_ID, "AKIDOTHER")}
    assert sigv4.verify("POST", path, "", other, body) == sigv4.UNKNOWN_KEY


def _framed(frames: bytes, step: int) -> list[str]:
    reader = bedrock.EventStreamFraming()
    return [e.data for k in range(0, len(frames), step) for e in reader.feed(frames[k:k + step])]


@pytest.mark.parametrize("step", [1, 3, 7, 64, 100_000])
def test_the_event_stream_reads_the_same_events_however_it_is_cut(step: int) -> None:
    events = [data for _, data in stream_events(MESSAGE)]
    frames = b"".join(eventstream.chunk(e) for e in events)
    assert [orjson.loads(d) for d in _framed(frames, step)] == events


def test_an_exception_in_the_stream_and_a_broken_frame_are_error_events() -> None:
    frames = eventstream.chunk({"type": "ping"}) + eventstream.exception("throttlingException", "slow down")
    out = [orjson.loads(d) for d in _framed(frames, 5)]
    assert out[1] == {"type": "error", "error": {"type": "overloaded_error",
                                                 "message": "throttlingException: slow down"}}
    broken = bytearray(eventstream.chunk({"type": "ping"}))
    broken[-1] ^= 1
    assert orjson.loads(_framed(bytes(broken), 100)[0])["type"] == "error"


def test_converse_carries_every_block_and_the_thinking_config_as_bedrock_reads_them() -> None:
    request = {"model": "m", "max_tokens": 300, "system": "be brief", "temperature": 1,
               "thinking": {"type": "enabled", "budget_tokens": 200},
               "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}],
               "messages": [{"role": "user", "content": "weather?"},
                            {"role": "assistant", "content": MESSAGE["content"] + [
                                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}]},
                            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                          "content": "sunny", "is_error": True}]}]}
    sent = orjson.loads(converse.finish(orjson.dumps(request), {"anthropic-beta": "interleaved-thinking-2025-05-14"}))
    read, betas = sim_cloud.converse_as_messages(sent, "claude-sonnet-4-5")
    assert betas == {"interleaved-thinking-2025-05-14"}
    assert read["thinking"] == request["thinking"] and read["max_tokens"] == 300
    assert read["messages"][1]["content"] == request["messages"][1]["content"]  # every block, byte for byte
    assert read["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                               "content": [{"type": "text", "text": "sunny"}]}]
    with pytest.raises(Exception, match="no form in Bedrock's Converse API"):
        converse.finish(orjson.dumps({**request, "messages": [{"role": "user", "content": [{"type": "image"}]}]}), {})


@pytest.mark.parametrize("step", [1, 9, 100_000])
def test_a_converse_stream_is_the_message_the_json_answer_is(step: int) -> None:
    translator = converse.ConverseTranslator("claude-sonnet-4-5")
    snap = Snapshot()
    frames = b"".join(sim_cloud._converse_events(MESSAGE))
    for data in _framed(frames, step):
        for event in translator.feed(data):
            accumulate(event, snap)
    for event in translator.end():
        accumulate(event, snap)
    message = message_dict(snap)
    assert snap.complete and message["content"] == MESSAGE["content"]
    assert message["stop_reason"] == "tool_use" and message["usage"]["output_tokens"] == 7
    whole = {"output": {"message": {"role": "assistant", "content": [sim_cloud._converse_block(b)
                                                                     for b in MESSAGE["content"]]}},
             "stopReason": "tool_use", "usage": {"inputTokens": 12, "outputTokens": 7}}
    assert converse.as_message(whole, "m")["content"] == MESSAGE["content"]


def test_the_base_install_has_no_cloud_library_and_the_extras_name_them() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("botocore", "boto3", "google-auth", "requests")) for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert [d.split(">")[0] for d in extras["aws"]] == ["botocore"]
    assert {d.split(">")[0] for d in extras["gcp"]} == {"google-auth", "requests"}


def test_a_gemini_signature_goes_back_only_to_the_platform_that_minted_it() -> None:
    """Claude's signatures are valid on every platform (judged by model family); Google documents no such thing for
    ``thoughtSignature``: the origin of a Gemini turn names its upstream, so another platform's is degraded."""
    from gateway.dialects.routing import origin_of, reads_thinking

    router = Router(parse_routes("vertex-=vertex@my-project/global"))
    on_vertex, on_studio = router.caps_for("vertex-gemini-3-pro-preview"), router.caps_for("gemini-3-pro-preview")
    assert origin_of(on_vertex, "gemini-3-pro-preview") != origin_of(on_studio, "gemini-3-pro-preview")
    assert reads_thinking("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929")
    assert reads_thinking("claude-sonnet-4-5@20250929", "global.anthropic.claude-sonnet-4-5-20250929-v1:0")


async def test_temporary_credentials_near_expiry_are_refreshed_off_the_event_loop() -> None:
    """IRSA's and instance roles' credentials are refreshed by botocore with a blocking call: a signer whose
    credentials are due refreshes them in a thread, and signs with the new ones."""
    import threading
    from datetime import datetime, timedelta

    from botocore.credentials import RefreshableCredentials

    from gateway.dialects.bedrock.sigv4 import SigV4

    refreshed_in: list[str] = []

    def refresh() -> dict[str, str]:
        refreshed_in.append(threading.current_thread().name)
        expiry = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        return {"access_key": "AKIDREFRESHED", "secret_key": SECRET, "token": "session", "expiry_time": expiry}

    stale = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
    signer = SigV4("us-east-1")
    signer._credentials = RefreshableCredentials.create_from_metadata(
        {"access_key": KEY_ID, "secret_key": SECRET, "token": "old", "expiry_time": stale}, refresh, "test")
    headers = await signer("POST", URL, {"content-type": "application/json"}, b"{}")
    assert refreshed_in and refreshed_in[0] != threading.main_thread().name
    assert "Credential=AKIDREFRESHED/" in headers["Authorization"] and headers["X-Amz-Security-Token"] == "session"


def test_the_signing_benchmark_runs_its_short_form(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``bench/cloud_sign.py`` (BENCHMARKS.md "What a cloud platform adds to a request") in its short form."""
    from bench import cloud_sign

    # (small bodies only: freeing megabytes would move this process's malloc mmap threshold under the allocator tests)
    monkeypatch.setattr("sys.argv", ["cloud_sign.py", "--repeats", "5", "--sizes", "10,60"])
    cloud_sign.main()
    out = capsys.readouterr().out
    assert out.count(" KB | ") == 2 and "event-stream read (botocore, base64)" in out


async def test_a_platforms_rewrite_of_a_big_body_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler hands a cloud platform's body rewrite (``UpstreamDialect.finish``) of a body past
    ``GATEWAY_OFFLOAD_BODY_KB`` to the worker's offload thread, as the stages are; a small one stays on the loop."""
    import dataclasses
    import threading

    import httpx

    from gateway.app.factory import create_app
    from gateway.surfaces import common
    from state.memory_store import MemoryStore
    from tests.unit.gateway.test_handler import FakeUpstream
    from tests.unit.gateway.test_route_once import ANTHROPIC_ANSWER

    rewritten_in: list[str] = []
    row = common.UPSTREAM_DIALECTS["bedrock"]
    assert row.finish is not None
    finish = row.finish

    def recording(body: bytes, client: Any) -> bytes:
        rewritten_in.append(threading.current_thread().name)
        return finish(body, client)

    monkeypatch.setitem(common.UPSTREAM_DIALECTS, "bedrock", dataclasses.replace(row, finish=recording))
    settings = Settings(routes="us.anthropic.=bedrock@us-east-1", cloud_without_keys=True, offload_body_kb=64)
    bedrock = FakeUpstream("bedrock", body=ANTHROPIC_ANSWER)
    app = create_app(settings, store=MemoryStore(), upstreams={"bedrock": bedrock})  # type: ignore[dict-item]
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        for words in (10, 40_000):  # a few bytes, then about 200 KB
            body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "word " * words}]}
            answer = await client.post("/v1/messages", content=orjson.dumps(body),
                                       headers={"x-api-key": "sk-ant-own", "anthropic-version": "2023-06-01"})
            assert answer.status_code == 200, answer.text
    loop_thread = threading.current_thread().name
    assert rewritten_in[0] == loop_thread and rewritten_in[1] != loop_thread, rewritten_in
    assert all("model" not in sent and sent["anthropic_version"] == "bedrock-2023-05-31"
               for _, sent, _, _ in bedrock.sent)

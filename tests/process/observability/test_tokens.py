"""Token counters and the series at zero in a real ``thinkgate serve`` in front of the simulator: the tokens each
upstream dialect reports (Anthropic usage, OpenAI-compatible usage with cached and reasoning details, Gemini
``usageMetadata``), streamed and not, counted by model family and by a bounded tenant label."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from gateway.app.factory import default_upstreams
from gateway.app.settings import Settings
from gateway.ops import metrics, metrics_workers
from gateway.pipeline.identify import tenant_of
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, scrape
from tests.support.gemini.helpers import DEEPSEEK, GEMINI, gateway_env

SECRET = "tokens-test-secret-0123456789abcdef"  # >= 32 bytes
KEY_A, KEY_B = "sk-test-tokens-tenant-a", "sk-test-tokens-tenant-b"


@pytest.fixture(scope="module")
def env(sim: Sim) -> dict[str, str]:
    return gateway_env(sim, GATEWAY_SECRET=SECRET, GATEWAY_METRICS_TENANTS="1")


@pytest.fixture(scope="module")
def gw(sim: Sim, gateways: GatewayFactory, env: dict[str, str]) -> ServerProcess:
    """A gateway whose one named tenant (GATEWAY_METRICS_TENANTS=1) is KEY_A's: its first request."""
    sp = gateways.start(sim.url, env)
    with anthropic.Anthropic(base_url=sp.url, api_key=KEY_A, max_retries=0) as client:
        client.messages.create(model="claude-opus-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    return sp


@pytest.fixture()
def oai(gw: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY_B, max_retries=0) as c:
        yield c


def tokens(gw: ServerProcess) -> dict[tuple[str, str, str], float]:
    """(model, tenant, type) -> gateway_tokens_total."""
    return {(d["model"], d["tenant"], d["type"]): v for labels, v in scrape(gw).get("gateway_tokens_total", {}).items()
            for d in [dict(labels)]}


def counted(before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float]) -> dict[
        tuple[str, str, str], float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_every_known_series_is_at_zero_before_the_first_request(sim: Sim, gateways: GatewayFactory,
                                                                env: dict[str, str]) -> None:
    fresh = gateways.start(sim.url, env)
    m = scrape(fresh)
    assert m["gateway_tool_chain_repairs_total"] == {(("kind", k),): 0.0 for k in metrics.TOOL_REPAIR_KINDS - {"other"}}
    configured = default_upstreams(Settings.from_env(env))
    for name, values in metrics_workers.zero_series(configured):
        sample = name if not name.endswith("_seconds") else name + "_count"
        labels = tuple(sorted(zip(metrics.LABELS[name], values, strict=True)))
        assert m[sample][labels] == 0.0, (name, labels)


def test_anthropic_usage_is_counted_for_the_first_tenant_by_its_prefix(gw: ServerProcess) -> None:
    prefix = tenant_of(SECRET, {"x-api-key": KEY_A})
    assert prefix
    before = tokens(gw)
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY_A, max_retries=0) as client:
        msg = client.messages.create(model="claude-opus-4-5", max_tokens=1024,
                                     messages=[{"role": "user", "content": "hello"}])
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=1024,
                                    messages=[{"role": "user", "content": "hello again"}]) as s:
            streamed = s.get_final_message()
    got = counted(before, tokens(gw))
    assert got[("claude-opus", prefix, "input")] == msg.usage.input_tokens > 0
    assert got[("claude-opus", prefix, "output")] == msg.usage.output_tokens > 0
    assert got[("claude-sonnet", prefix, "input")] == streamed.usage.input_tokens > 0
    assert got[("claude-sonnet", prefix, "output")] == streamed.usage.output_tokens > 1  # message_delta's, cumulative
    assert {k[2] for k in got} <= {"input", "output"}  # the simulator reports no cache use: nothing counted


def test_openai_compatible_usage_counts_cached_and_reasoning_tokens_beyond_the_tenant_limit(
        gw: ServerProcess, oai: openai.OpenAI) -> None:
    """The second tenant is past GATEWAY_METRICS_TENANTS=1: "other"."""
    before = tokens(gw)
    done = oai.chat.completions.create(model=DEEPSEEK, messages=[{"role": "user", "content": "think"}],
                                       reasoning_effort="low")
    chunks = list(oai.chat.completions.create(model=DEEPSEEK, messages=[{"role": "user", "content": "think more"}],
                                              reasoning_effort="low", stream=True,
                                              stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert done.usage is not None and usage is not None
    assert done.usage.prompt_tokens_details is not None and done.usage.prompt_tokens_details.cached_tokens == 4
    got = counted(before, tokens(gw))
    model = ("deepseek-reasoner", "other")
    assert got[(*model, "cache_read")] == 2 * 4
    assert got[(*model, "input")] == done.usage.prompt_tokens + usage.prompt_tokens - 8
    assert got[(*model, "output")] == done.usage.completion_tokens + usage.completion_tokens
    assert 0 < got[(*model, "reasoning")] <= got[(*model, "output")]


def test_gemini_usage_metadata_is_counted_streamed_and_not(gw: ServerProcess, oai: openai.OpenAI) -> None:
    before = tokens(gw)
    done = oai.chat.completions.create(model=GEMINI, messages=[{"role": "user", "content": "hello"}],
                                       reasoning_effort="low")
    chunks = list(oai.chat.completions.create(model=GEMINI, messages=[{"role": "user", "content": "hello"}],
                                              reasoning_effort="low", stream=True,
                                              stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert done.usage is not None and usage is not None
    got = counted(before, tokens(gw))
    assert got[("gemini-pro", "other", "input")] == done.usage.prompt_tokens + usage.prompt_tokens
    assert got[("gemini-pro", "other", "output")] == done.usage.completion_tokens + usage.completion_tokens
    assert 0 < got[("gemini-pro", "other", "reasoning")] < got[("gemini-pro", "other", "output")]  # thoughtsTokenCount

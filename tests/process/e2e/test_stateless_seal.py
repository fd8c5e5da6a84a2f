"""Issue 31, item 4: the stateless path never 400s on replayed thinking. With no record to judge a replay by (the
state machine off, records expired, Redis down), an OpenAI chat client in front of OpenRouter's ``anthropic/...``
models replays ``reasoning_details`` whose signed text it trimmed, re-encoded, truncated or blanked, or whose
signatures it moved between turns: forwarded as they came, the upstream answers 400 ``Invalid signature in
thinking block``. thinkgate seals every opaque value it relays to an OpenAI chat client (a tenant-bound MAC over the
exact entry, in an extra key of the entry: ``openai_compat.Seals``) and keeps, without records, only what
still opens; the rest is degraded per ``GATEWAY_UNVERIFIABLE_THINKING``. The seal never reaches the upstream.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from tests.support.e2e.traffic import replayed_turns
from tests.support.gemini.helpers import OPENROUTER_CLAUDE, ask, gateway_env, run_loop
from tests.support.manglings.openai import MANGLINGS, REASONING_TEXT
from tests.support.reliability.recording_proxy import RecordingProxy

BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}


@pytest.fixture(scope="module")
def stateless(sim: Sim, gateways: GatewayFactory) -> Iterator[tuple[ServerProcess, RecordingProxy]]:
    proxy = RecordingProxy(sim.url).start()
    env = {k: v.replace(sim.url, proxy.url) for k, v in gateway_env(sim).items()}
    sp = gateways.start(proxy.url, env | {"GATEWAY_STATE_MACHINE_ENABLED": "false",
                                          "GATEWAY_SECRET": "issue-31-stateless-seal-0123456789"})
    yield sp, proxy
    sp.stop()
    proxy.close()


def play(gw: ServerProcess, case: str, stream: bool) -> tuple[str, list[str]]:
    name = f"s{uuid.uuid4().hex[:10]}"
    errors: list[str] = []
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=f"sk-seal-{name}", max_retries=0, timeout=30,
                       default_headers=BETA) as client:
        def send(history: list[dict[str, Any]]) -> Any:
            return ask(client, OPENROUTER_CLAUDE, history, stream=stream, max_tokens=4096,
                       extra_body={"reasoning": {"max_tokens": 2048}})
        try:
            run_loop(send, f"[[sim:tools=3]] [[sim:conv={name}]] weather? ({case})", mangle=MANGLINGS[case])
        except openai.APIStatusError as e:
            errors.append(f"{e.status_code} {str(e.message)[:300]}")
    return name, errors


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", ["faithful", *REASONING_TEXT])
def test_changed_reasoning_never_reaches_the_upstream_and_intact_reasoning_is_kept(
        stateless: tuple[ServerProcess, RecordingProxy], sim: Sim, case: str, stream: bool) -> None:
    gw, proxy = stateless
    before = dict(sim.stats()["rejections"])
    name, errors = play(gw, case, stream)
    exchanges = proxy.of(name)
    assert not errors and all(e.status == 200 for e in exchanges), (errors, [e.status for e in exchanges])
    assert dict(sim.stats()["rejections"]) == before
    assert all("thinkgate_seal" not in str(e.body) for e in exchanges), "a seal reached the upstream"
    kept = [replayed_turns(e) for e in exchanges]
    if case == "faithful":  # every replayed turn's reasoning opened: kept, without a record
        assert all(all(turns) for turns in kept) and sum(map(len, kept)) == 6, kept

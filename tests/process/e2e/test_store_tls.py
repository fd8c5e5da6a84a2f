"""A served gateway on a TLS-only Redis (``GATEWAY_REDIS_URL=rediss://...?ssl_ca_certs=...``), as managed Redis in the
cloud is reached: two replicas, a tool loop with thinking whose client drops every thinking block from the history
it replays, each request on the other replica. The strict simulator accepts each request only with the thinking
restored from the records the other replica wrote over TLS. A URL whose CA does not match is named in the log."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import anthropic
import httpx

from tests.process_fixtures import GatewayFactory, Sim
from tests.redis_fixtures import RedisServer
from tests.support.e2e.helpers import THINKING, WEATHER_TOOL, block_dicts, tool_results
from tests.tls_certs import TlsFiles

SECRET = "tls-store-secret-0123456789abcdef"
KEY = "sk-ant-tls-store"


def _drop_thinking(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
            if m["role"] == "assistant" else m for m in history]


def test_a_tool_loop_is_restored_from_a_tls_redis(sim: Sim, gateways: GatewayFactory, redis_tls_url: str,
                                                  redis_tls_server: RedisServer) -> None:
    env = {"GATEWAY_REDIS_URL": redis_tls_url, "GATEWAY_SECRET": SECRET, "GATEWAY_STORE_TIMEOUT_MS": "2000",
           "GATEWAY_LOG_LEVEL": "INFO"}
    replicas = [gateways.start(sim.url, env), gateways.start(sim.url, env)]
    for gw in replicas:
        assert httpx.get(gw.url + "/readyz").json()["store"] == {"backend": "redis", "ok": True, "circuit": "closed"}
    clients = [anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) for gw in replicas]
    history: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=3]] weather in three cities over TLS"}]
    answers: list[anthropic.types.Message] = []
    try:
        for i in range(4):
            before = sum(sim.stats()["rejections"].values())
            answer = clients[i % 2].messages.create(model="claude-opus-4-5", max_tokens=4096, tools=[WEATHER_TOOL],
                                                    thinking=THINKING, messages=_drop_thinking(history))
            assert sum(sim.stats()["rejections"].values()) == before
            answers.append(answer)
            if i:  # what went upstream: thinking on, every earlier turn's thinking back, signature and all
                sent = sim.last()["body"]
                assert sent.get("thinking") == THINKING
                restored = [m["content"][0] for m in sent["messages"] if m["role"] == "assistant"]
                assert restored == [block_dicts(a)[0] for a in answers[:-1]]
            if answer.stop_reason != "tool_use":
                break
            history += [{"role": "assistant", "content": block_dicts(answer)},
                        {"role": "user", "content": tool_results(answer)}]
    finally:
        for c in clients:
            c.close()
    assert len(answers) == 4 and answers[-1].stop_reason == "end_turn"
    with redis_tls_server.client() as admin:  # the turns are in the TLS Redis
        assert admin.dbsize() > 0
    for gw in replicas:
        assert "not reachable" not in gw.log() and SECRET not in gw.log()
        gw.stop()


def test_a_redis_whose_certificate_it_cannot_verify_is_named_in_the_log(
        sim: Sim, gateways: GatewayFactory, redis_tls_url: str, tls_files: TlsFiles) -> None:
    url = redis_tls_url.partition("?")[0] + "?ssl_ca_certs=" + quote(str(tls_files.other_ca))
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": url, "GATEWAY_SECRET": SECRET, "GATEWAY_LOG_LEVEL": "INFO"})
    with anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0) as client:
        answer = client.messages.create(model="claude-opus-4-5", max_tokens=1024,
                                        messages=[{"role": "user", "content": "hello over a store that is down"}])
    assert answer.content  # served, statelessly
    store = httpx.get(gw.url + "/readyz").json()["store"]
    assert store["ok"] is False  # and why, for whoever looks at the replica (still ready: it serves statelessly)
    assert store["detail"].startswith("ConnectionError: TLS: SSLCertVerificationError: certificate verify"), store
    assert ("state store redis not reachable at start (ConnectionError: TLS: SSLCertVerificationError: certificate "
            "verify failed: ") in gw.log()
    gw.stop()

"""One tenant cannot fill the Redis all tenants share (issue 22, item 4), through a served gateway on a real Redis:
past ``GATEWAY_TENANT_STORAGE_MB`` a tenant's turns are not recorded (its requests are still answered, counted as
``gateway_storage_limited_total{limit="tenant_budget"}``) while another tenant's are; a prompt larger than
``GATEWAY_MAX_PROMPT_KB`` is not stored (before: a pasted 29 MB text added 25 MB to Redis for 24 h)."""

from __future__ import annotations

import itertools
import os

import anthropic
import httpx

from state import keys
from state.keys import tenant_prefix
from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum
from tests.redis_fixtures import RedisServer

SECRET = "storage-limits-secret-0123456789abcdef"


def _ask(gw: ServerProcess, key: str, text: str) -> str:
    with anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0) as client:
        raw = client.messages.with_raw_response.create(model="claude-opus-4-5", max_tokens=64,
                                                       messages=[{"role": "user", "content": text}])
        assert raw.http_response.status_code == 200 and raw.parse().content
        return raw.headers["x-ag-conversation-id"]


def _recorded(gw: ServerProcess, key: str, scid: str) -> bool:
    return httpx.get(f"{gw.url}/gateway/conversations/{scid}", headers={"x-api-key": key}).status_code == 200


def test_a_tenant_past_its_budget_is_served_but_not_recorded(sim: Sim, gateways: GatewayFactory,
                                                             redis_server: RedisServer) -> None:
    redis_server.flush()
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": SECRET,
                                  "GATEWAY_TENANT_STORAGE_MB": "1", "GATEWAY_MAX_PROMPT_KB": "0"})
    limited = lambda: metric_sum(gw, "gateway_storage_limited_total", limit="tenant_budget")  # noqa: E731
    assert limited() == 0
    scids = [_ask(gw, "sk-heavy", os.urandom(200_000).hex()) for _ in range(10)]  # ~200 KB stored each
    recorded = [_recorded(gw, "sk-heavy", s) for s in scids]
    k = recorded.index(False)  # the first turn past 1 MiB (the one that crossed it is recorded: its reply tells)
    assert 4 <= k <= 7 and recorded == [True] * k + [False] * (10 - k), recorded
    assert limited() == 10 - k
    light = _ask(gw, "sk-light", "hi")  # another tenant: its own budget
    assert _recorded(gw, "sk-light", light)
    assert "Traceback" not in gw.log()


def test_a_huge_prompt_is_not_stored(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> None:
    redis_server.flush()
    gw = gateways.start(sim.url, {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": SECRET,
                                  "GATEWAY_MAX_PROMPT_KB": "64"})
    with redis_server.client() as r:
        before = int(r.info("memory")["used_memory"])
        scid = _ask(gw, "sk-paste", os.urandom(1_500_000).hex())  # a 3 MB pasted text
        grown = int(r.info("memory")["used_memory"]) - before
    assert _recorded(gw, "sk-paste", scid)  # the turn is recorded
    assert grown < 512 * 1024, grown  # the prompt is not (uncapped: about 3 MB)
    assert metric_sum(gw, "gateway_storage_limited_total", limit="prompt_capped") == 1


def test_two_replicas_stop_recording_a_tenant_as_one_would(sim: Sim, gateways: GatewayFactory,
                                                           redis_server: RedisServer) -> None:
    """Issue 32 item 6: with two replicas a tenant's storage overshot its budget by a third (each replica learnt it
    from its own next record). Every load reads the tenant's counter in its own round trip now, so once one replica
    crossed the budget the other records nothing more: nothing is recorded after the counter passed it."""
    redis_server.flush()
    env = {"GATEWAY_REDIS_URL": redis_server.url, "GATEWAY_SECRET": SECRET, "GATEWAY_TENANT_STORAGE_MB": "1",
           "GATEWAY_MAX_PROMPT_KB": "0"}
    pair = [gateways.start(sim.url, env) for _ in range(2)]
    counter = keys.tenant_bytes_key(tenant_prefix(SECRET.encode(), "sk-two"))
    totals = [0]
    with redis_server.client() as r:
        for i in range(10):
            # a reply to continue: a request that replays history loads first (a first request looks nothing up)
            _ask_again(pair[i % 2], "sk-two", os.urandom(200_000).hex())
            totals.append(int(r.get(counter) or 0))
    grown = [b - a for a, b in itertools.pairwise(totals)]
    crossed = next(i for i, t in enumerate(totals) if t > 1 << 20)
    assert all(g == 0 for g in grown[crossed:]), (totals, grown)
    assert totals[-1] - max(grown) <= 1 << 20, totals


def _ask_again(gw: ServerProcess, key: str, text: str) -> None:
    """One turn answering ``text`` after an earlier exchange (so the request replays history: it is looked up)."""
    with anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0) as client:
        history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                   {"role": "user", "content": text}]
        assert client.messages.create(model="claude-opus-4-5", max_tokens=64, messages=history).content

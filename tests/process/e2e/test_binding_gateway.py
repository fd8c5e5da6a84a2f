"""Binding models through two real gateway replicas on one real redis-server, with the official ``anthropic`` SDK.

The simulator binds every thinking block of a bound model (``claude-opus-5-5``) to its prefix (system, tool set,
earlier messages; ``protocols.md`` 1.8, 1.9). Two IDE-style clients replay their history faithfully but change what
is around it: one rewrites its system prompt on every request, one adds a tool after the first request. Straight to
the simulator both fail with the binding 400 at their second request (the first after a tool round). Through
thinkgate, every request going to the other replica than the one before:

* with the prefix kept (the default): the recorded system and tools are sent, the client's changes as a
  mid-conversation system message and ``tool_addition`` blocks; the tool loops complete with no 4xx and every
  earlier thinking block reaches the upstream on every turn (nothing dropped);
* with ``GATEWAY_KEEP_PREFIX=false``: a request replaying a block produced under another prefix opts into
  ``drop_block``; the loops complete with no 4xx, the upstream reports what it dropped (``input_transformations``,
  passed to the client) and it drops from the block whose prefix changed, never one of a turn produced after it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim, metric_sum, start_process
from tests.redis_fixtures import RedisServer
from tests.support.sim.helpers import BOUND_400, BOUND_MODEL, CLOCK_TOOL, NEEDS_BETA, SYSTEM_CHANGED, WEATHER_TOOL

KEY = "sk-ant-binding-test-key-0123456789abcdef"
SECRET = "binding-test-secret-0123456789abcdef"
UNKNOWN_BOUND = "claude-opus-4-5"
Shape = Callable[[int], dict[str, Any]]


def counted(pair: list[ServerProcess], name: str, **labels: str) -> float:
    return sum(metric_sum(sp, name, **labels) for sp in pair)


def rewrites_system(n: int) -> dict[str, Any]:
    return {"system": [{"type": "text", "text": f"You are a coding assistant. Current time: 12:{n:02d}.",
                        "cache_control": {"type": "ephemeral"}}], "tools": [WEATHER_TOOL, CLOCK_TOOL]}


def adds_a_tool(n: int) -> dict[str, Any]:
    return {"system": "You are a coding assistant.", "tools": [WEATHER_TOOL] if n == 0 else [WEATHER_TOOL, CLOCK_TOOL]}


SHAPES = [pytest.param(rewrites_system, id="system"), pytest.param(adds_a_tool, id="tools")]


def start_pair(gateways: GatewayFactory, sim: Sim, redis_url: str, **env: str) -> list[ServerProcess]:
    full = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_SECRET": SECRET, "GATEWAY_STORE_TIMEOUT_MS": "1000", **env}
    return [gateways.start(sim.url, full) for _ in range(2)]


@pytest.fixture(scope="module")
def kept(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[list[ServerProcess]]:
    pair = start_pair(gateways, sim, redis_server.url)
    yield pair
    for sp in pair:
        sp.stop()


@pytest.fixture(scope="module")
def degraded(sim: Sim, gateways: GatewayFactory, redis_server: RedisServer) -> Iterator[list[ServerProcess]]:
    pair = start_pair(gateways, sim, redis_server.url, GATEWAY_KEEP_PREFIX="false")
    yield pair
    for sp in pair:
        sp.stop()


def loop(urls: list[str], shape: Shape, *, stream: bool, seen: list[dict[str, Any]] | None = None,
         sim: Sim | None = None, limit: int | None = None, model: str = BOUND_MODEL) -> list[Any]:
    """A 3-round tool loop on the bound model, request n to ``urls[n % len(urls)]``; the replies (raises the SDK's
    error on a 4xx). ``seen``: each request's body as the simulator received it."""
    clients = [anthropic.Anthropic(base_url=u, api_key=KEY, max_retries=0) for u in urls]
    try:
        return _loop(clients, shape, stream=stream, seen=seen, sim=sim, limit=limit, model=model)
    finally:
        for c in clients:
            c.close()


def _loop(clients: list[anthropic.Anthropic], shape: Shape, *, stream: bool, seen: list[dict[str, Any]] | None,
          sim: Sim | None, limit: int | None, model: str) -> list[Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Fix the failing test {secrets.token_hex(4)} [[sim:tools=3]]"}]
    replies: list[Any] = []
    for n in range(8):
        params: dict[str, Any] = {"model": model, "max_tokens": 4096, "thinking": {"type": "adaptive"},
                                  "messages": messages, **shape(n)}
        client = clients[n % len(clients)]
        if stream:
            with client.messages.stream(**params) as s:
                reply: Any = s.get_final_message()
        else:
            reply = client.messages.create(**params)
        if seen is not None and sim is not None:
            seen.append(sim.last()["body"])
        replies.append(reply)
        if reply.stop_reason != "tool_use" or len(replies) == limit:
            return replies
        messages = [*messages, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                 for b in reply.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                                                 for b in reply.content if b.type == "tool_use"]}]
    raise AssertionError("the tool loop did not finish")


def thinking_blocks(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant" for b in m["content"]
               if b["type"] == "thinking")


def transformations(reply: Any) -> list[dict[str, Any]]:
    found = getattr(reply, "input_transformations", None) or []
    return [t if isinstance(t, dict) else t.model_dump() for t in found]


@pytest.mark.parametrize("shape", SHAPES)
def test_straight_to_the_simulator_the_second_request_fails(sim: Sim, shape: Shape) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        loop([sim.url], shape, stream=False)
    message = BOUND_400.format(i=1, j=0) + NEEDS_BETA + (SYSTEM_CHANGED if shape is rewrites_system else "")
    assert err.value.body["error"]["message"] == message  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("shape", SHAPES)
def test_prefix_kept_through_two_replicas(sim: Sim, kept: list[ServerProcess], redis_server: RedisServer,
                                          shape: Shape, stream: bool) -> None:
    redis_server.flush()
    before = sim.stats()["rejections"]
    rewrites = {k: counted(kept, "gateway_prefix_rewrites_total", kind=k) for k in ("system_message", "tool_changes")}
    seen: list[dict[str, Any]] = []
    replies = loop([sp.url for sp in kept], shape, stream=stream, seen=seen, sim=sim)
    assert len(replies) == 4 and all(r.content[0].type == "thinking" for r in replies)
    assert sim.stats()["rejections"] == before
    # every earlier block reached the upstream on every turn, none dropped (no drop_block, no strip)
    assert [thinking_blocks(b) for b in seen] == [0, 1, 2, 3]
    assert all("block_binding" not in b["thinking"] for b in seen)
    first = seen[0]
    for body in seen[1:]:
        assert body["system"] == first["system"]  # the recorded system prompt, every time
        assert [t["name"] for t in body["tools"] if not t.get("defer_loading")] == \
            [t["name"] for t in first["tools"]]
    inserted = [m for m in seen[-1]["messages"] if m["role"] == "system"]
    if shape is rewrites_system:  # the client's new prompt at each turn it changed, as a system message
        assert [m["content"][0]["text"] for m in inserted] == [
            f"You are a coding assistant. Current time: 12:{n:02d}." for n in (1, 2, 3)]
        assert counted(kept, "gateway_prefix_rewrites_total", kind="system_message") - rewrites["system_message"] == 3
    else:  # the new tool: deferred in tools, added by a tool_addition where the client added it
        assert inserted == [{"role": "system", "content": [
            {"type": "tool_addition", "tool": {"type": "tool_reference", "name": CLOCK_TOOL["name"]}}]}]
        assert {**CLOCK_TOOL, "defer_loading": True} in seen[-1]["tools"]
        assert counted(kept, "gateway_prefix_rewrites_total", kind="tool_changes") - rewrites["tool_changes"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("shape", SHAPES)
def test_drop_block_when_the_prefix_is_not_kept(sim: Sim, degraded: list[ServerProcess], redis_server: RedisServer,
                                                shape: Shape, stream: bool) -> None:
    redis_server.flush()
    before = sim.stats()["rejections"]
    drops = counted(degraded, "gateway_binding_drops_total", reason="prefix_binding_mismatch")
    opted = counted(degraded, "gateway_prefix_rewrites_total", kind="drop_block")
    seen: list[dict[str, Any]] = []
    replies = loop([sp.url for sp in degraded], shape, stream=stream, seen=seen, sim=sim)
    assert len(replies) == 4 and all(r.content[0].type == "thinking" for r in replies)  # thinking on every turn
    assert sim.stats()["rejections"] == before
    assert transformations(replies[0]) == [] and "block_binding" not in seen[0]["thinking"]
    for body, reply in zip(seen[1:], replies[1:], strict=True):
        assert body["thinking"] == {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
        dropped = transformations(reply)  # passed to the client as the upstream reported them
        assert dropped and {(t["type"], t["reason"]) for t in dropped} == {
            ("thinking_dropped", "prefix_binding_mismatch")}
        # from the first block produced under the old prefix (the chain takes the later ones with it)
        assert dropped[0]["path"] == "messages.1.content.0"
    reported = sum(len(transformations(r)) for r in replies)
    assert counted(degraded, "gateway_binding_drops_total", reason="prefix_binding_mismatch") - drops == reported
    assert counted(degraded, "gateway_prefix_rewrites_total", kind="drop_block") - opted == 3


@pytest.fixture(scope="module")
def unknown_binding_sim() -> Iterator[Sim]:
    """A simulator on which a model thinkgate's routing table does not know to bind (``claude-opus-4-5``) binds."""
    sp = start_process("sim", ["sim", "--bound-models", f"{UNKNOWN_BOUND},{BOUND_MODEL}"], "/_sim/stats")
    try:
        yield Sim(sp)
    finally:
        sp.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_binding_400_is_retried_once_without_the_stale_blocks(unknown_binding_sim: Sim, gateways: GatewayFactory,
                                                                stream: bool) -> None:
    """A model thinkgate does not know binds: its prefix is not kept, the binding 400 reaches thinkgate, which removes
    the named block and every later thinking block and retries once; the client never sees the 400."""
    sim = unknown_binding_sim
    sp = gateways.start(sim.url)
    try:
        before = sim.stats()["rejections"].get("15", 0)
        seen: list[dict[str, Any]] = []
        replies = loop([sp.url], rewrites_system, stream=stream, seen=seen, sim=sim, limit=3, model=UNKNOWN_BOUND)
        assert len(replies) == 3 and all(r.content[0].type == "thinking" for r in replies)
        assert sim.stats()["rejections"].get("15", 0) - before == 2  # requests 2 and 3, each retried once
        assert metric_sum(sp, "gateway_upstream_errors_total", kind="binding_mismatch") == 2
        assert metric_sum(sp, "gateway_binding_retries_total", outcome="ok") == 2
        assert metric_sum(sp, "gateway_prefix_rewrites_total", kind="stripped") == 2
        assert metric_sum(sp, "gateway_requests_total", status="4xx") == 0
        assert thinking_blocks(seen[1]) == 0 and thinking_blocks(seen[2]) == 0  # what the retries sent
    finally:
        sp.stop()


def two_turns(urls: list[str], *, sim: Sim, seen: list[dict[str, Any]]) -> list[Any]:
    """Two user turns of one tool round each; the client adds a tool when it asks its second question."""
    clients = [anthropic.Anthropic(base_url=u, api_key=KEY, max_retries=0) for u in urls]
    try:
        return _two_turns(clients, sim=sim, seen=seen)
    finally:
        for c in clients:
            c.close()


def _two_turns(clients: list[anthropic.Anthropic], *, sim: Sim, seen: list[dict[str, Any]]) -> list[Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Fix the failing test {secrets.token_hex(4)} [[sim:tools=1]]"}]
    replies: list[Any] = []
    for n in range(4):
        tools = [WEATHER_TOOL] if n < 2 else [WEATHER_TOOL, CLOCK_TOOL]
        reply = clients[n % len(clients)].messages.create(
            model=BOUND_MODEL, max_tokens=4096, thinking={"type": "adaptive"}, system="You are a coding assistant.",
            tools=tools, messages=messages)  # type: ignore[arg-type]
        seen.append(sim.last()["body"])
        replies.append(reply)
        messages = [*messages, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                 for b in reply.content]}]
        if reply.stop_reason == "tool_use":
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                for b in reply.content if b.type == "tool_use"]})
        else:
            messages.append({"role": "user", "content": "Now check the clock too."})
    return replies


def test_a_tool_added_at_a_new_turn(sim: Sim, kept: list[ServerProcess], degraded: list[ServerProcess],
                                    redis_server: RedisServer) -> None:
    """Straight to the simulator the second turn fails; kept, every block reaches the upstream; not kept, only the
    first turn's blocks (produced under the old tool set) are removed, by thinkgate from the front of the history,
    and the second turn's stay (no drop_block, which would drop every block after the first stale one)."""
    with pytest.raises(anthropic.BadRequestError) as err:
        two_turns([sim.url], sim=sim, seen=[])
    assert err.value.body["error"]["message"] == BOUND_400.format(i=1, j=0) + NEEDS_BETA  # type: ignore[index]
    stripped = counted(degraded, "gateway_prefix_rewrites_total", kind="stripped")
    for pair, sent in ((kept, [0, 1, 2, 3]), (degraded, [0, 1, 0, 1])):
        redis_server.flush()
        before = sim.stats()["rejections"]
        seen: list[dict[str, Any]] = []
        replies = two_turns([sp.url for sp in pair], sim=sim, seen=seen)
        assert all(r.content[0].type == "thinking" for r in replies)
        assert sim.stats()["rejections"] == before
        assert [thinking_blocks(b) for b in seen] == sent
        assert all("block_binding" not in b["thinking"] for b in seen)
    assert counted(degraded, "gateway_prefix_rewrites_total", kind="stripped") - stripped == 2


def count_params(first: dict[str, Any], reply: Any) -> dict[str, Any]:
    """The ``count_tokens`` parameters of the request after ``first`` (a body as the simulator received it) and its
    tool round ``reply``, from a client that rewrote its system prompt since."""
    body = {**first, "messages": [*first["messages"],
                                  {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                    for b in reply.content]},
                                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id,
                                                                "content": "ok"}
                                                               for b in reply.content if b.type == "tool_use"]}],
            **rewrites_system(5)}
    return {k: v for k, v in body.items() if k in ("model", "system", "tools", "messages", "thinking")}


def test_count_tokens_of_a_system_rewriting_client(sim: Sim, kept: list[ServerProcess],
                                                   redis_server: RedisServer) -> None:
    """The upstream checks the binding in ``count_tokens`` too (1.9): straight to the simulator the rewritten request
    is the binding 400; through thinkgate it is counted with the recorded prefix."""
    redis_server.flush()
    seen: list[dict[str, Any]] = []
    replies = loop([sp.url for sp in kept], rewrites_system, stream=False, seen=seen, sim=sim, limit=2)
    params = count_params(seen[0], replies[0])
    with anthropic.Anthropic(base_url=sim.url, api_key=KEY, max_retries=0) as direct:
        with pytest.raises(anthropic.BadRequestError):
            direct.messages.count_tokens(**params)
    for sp in kept:
        with anthropic.Anthropic(base_url=sp.url, api_key=KEY, max_retries=0) as client:
            assert client.messages.count_tokens(**params).input_tokens > 0


REFUSED = [pytest.param(7, "system: Input should be a valid list", id="number"),
           pytest.param([{"type": "text"}], "system.0.text: Field required", id="block-without-text"),
           pytest.param("", "system: text content blocks must be non-empty", id="empty")]


@pytest.mark.parametrize(("system", "message"), REFUSED)
def test_a_system_the_api_refuses_gets_its_400_where_the_prefix_is_kept(
        sim: Sim, kept: list[ServerProcess], redis_server: RedisServer, system: Any, message: str) -> None:
    """A client's own refused system prompt (rule 109), sent where thinkgate keeps the recorded prefix, gets the
    upstream's 400 in Anthropic's envelope, from ``/v1/messages`` and ``count_tokens`` (it crashed or vanished into a
    system message before)."""
    redis_server.flush()
    seen: list[dict[str, Any]] = []
    replies = loop([kept[0].url], rewrites_system, stream=False, seen=seen, sim=sim, limit=1)
    messages = [*seen[0]["messages"],
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in replies[0].content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                                             for b in replies[0].content if b.type == "tool_use"]}]
    params: dict[str, Any] = {"model": BOUND_MODEL, "thinking": {"type": "adaptive"}, "messages": messages,
                              "tools": [WEATHER_TOOL, CLOCK_TOOL], "system": system}
    for sp in kept:
        with anthropic.Anthropic(base_url=sp.url, api_key=KEY, max_retries=0) as client:
            for call in (lambda: client.messages.create(max_tokens=4096, **params),
                         lambda: client.messages.count_tokens(**params)):
                with pytest.raises(anthropic.BadRequestError) as err:
                    call()
                assert err.value.body["error"] == {"type": "invalid_request_error",  # type: ignore[index]
                                                   "message": message}


def edited_after_a_round(sp: ServerProcess, sim: Sim, model: str) -> dict[str, Any]:
    """The ``count_tokens`` parameters of a client that ran one tool round through ``sp`` and then edited its first
    message (no recorded prefix can put an edited user message back: the replayed block is bound to the original)."""
    seen: list[dict[str, Any]] = []
    first = loop([sp.url], rewrites_system, stream=False, seen=seen, sim=sim, limit=1, model=model)[0]
    params = count_params(seen[0], first)
    opening = params["messages"][0]
    params["messages"][0] = {**opening, "content": opening["content"] + " (edited)"}
    return params


@pytest.mark.parametrize("model", [BOUND_MODEL, UNKNOWN_BOUND], ids=["bound", "unknown-bound"])
def test_count_tokens_retries_a_binding_400_once(unknown_binding_sim: Sim, gateways: GatewayFactory,
                                                 model: str) -> None:
    """A client that edits its first message after a tool round: the thinking block it replays was produced after
    the original, and no recorded prefix can put an edited user message back, so ``count_tokens`` answers the binding
    400 (on a bound model as on one thinkgate does not know to bind). As on ``/v1/messages``, thinkgate removes the
    named block and every later thinking block and retries once: the client gets its count, never the 400."""
    sim = unknown_binding_sim
    sp = gateways.start(sim.url)
    try:
        params = edited_after_a_round(sp, sim, model)
        with anthropic.Anthropic(base_url=sim.url, api_key=KEY, max_retries=0) as direct:
            with pytest.raises(anthropic.BadRequestError) as err:
                direct.messages.count_tokens(**params)
        assert err.value.body["error"]["message"].startswith(BOUND_400.format(i=1, j=0))  # type: ignore[index]
        with anthropic.Anthropic(base_url=sp.url, api_key=KEY, max_retries=0) as client:
            assert client.messages.count_tokens(**params).input_tokens > 0
        assert metric_sum(sp, "gateway_upstream_errors_total", kind="binding_mismatch") == 1
        assert metric_sum(sp, "gateway_binding_retries_total", outcome="ok") == 1
        assert metric_sum(sp, "gateway_prefix_rewrites_total", kind="stripped") == 1
        assert metric_sum(sp, "gateway_requests_total", status="4xx") == 0
    finally:
        sp.stop()


def test_openai_chat_client_rewriting_its_system_message(sim: Sim, kept: list[ServerProcess],
                                                         redis_server: RedisServer) -> None:
    """The same through ``/v1/chat/completions`` (the official ``openai`` SDK): the client's system message changes on
    every request; the recorded one is sent, the new one as a mid-conversation system message."""
    import openai

    redis_server.flush()
    before = sim.stats()["rejections"]
    tools: list[Any] = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                              "required": ["city"]}}}]
    msgs: list[Any] = [{"role": "user", "content": f"Check the weather {secrets.token_hex(4)} [[sim:tools=3]]"}]
    clients = [openai.OpenAI(base_url=sp.url + "/v1", api_key=KEY, max_retries=0) for sp in kept]
    try:
        for n in range(8):
            system = {"role": "system", "content": f"You are a coding assistant. Current time: 12:{n:02d}."}
            reply = clients[n % 2].chat.completions.create(
                model=BOUND_MODEL, messages=[system, *msgs], tools=tools, max_tokens=2048,
                extra_body={"thinking": {"type": "adaptive"}})
            message = reply.choices[0].message
            if not message.tool_calls:
                break
            msgs += [message.model_dump(exclude_none=True),
                     *({"role": "tool", "tool_call_id": t.id, "content": "ok"} for t in message.tool_calls)]
    finally:
        for c in clients:
            c.close()
    assert n == 3 and sim.stats()["rejections"] == before
    last = sim.last()["body"]
    assert last["system"] == "You are a coding assistant. Current time: 12:00."
    assert [m["content"][0]["text"] for m in last["messages"] if m["role"] == "system"] == [
        f"You are a coding assistant. Current time: 12:{n:02d}." for n in (1, 2, 3)]
    assert thinking_blocks(last) == 3


def test_a_client_that_replays_no_history(sim: Sim, kept: list[ServerProcess], redis_server: RedisServer) -> None:
    """A client that names its conversation (``X-AG-Conversation-Id``) and sends only its new messages, with a new
    system prompt each time: the history is rebuilt from the records with each inserted system message once, in
    its place (what thinkgate inserted is kept in the prefix note, not in the recorded prompt)."""
    redis_server.flush()
    before = sim.stats()["rejections"]
    base: dict[str, Any] = {"model": BOUND_MODEL, "max_tokens": 2048, "thinking": {"type": "adaptive"},
                            "tools": [WEATHER_TOOL]}
    first = {"role": "user", "content": f"Fix the failing test {secrets.token_hex(4)} [[sim:tools=3]]"}
    clients = [anthropic.Anthropic(base_url=sp.url, api_key=KEY, max_retries=0) for sp in kept]
    try:
        raw = clients[0].messages.with_raw_response.create(**base, system="S0", messages=[first])
        scid, reply = raw.headers["x-ag-conversation-id"], raw.parse()
        for n in range(1, 4):
            results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                                                   for b in reply.content if b.type == "tool_use"]}
            reply = clients[n % 2].messages.create(**base, system=f"S{n}", messages=[results],
                                                   extra_headers={"x-ag-conversation-id": scid})
            assert reply.content[0].type == "thinking"
    finally:
        for c in clients:
            c.close()
    assert reply.stop_reason == "end_turn" and sim.stats()["rejections"] == before
    last = sim.last()["body"]
    assert last["system"] == "S0" and thinking_blocks(last) == 3
    assert [m["content"][0]["text"] for m in last["messages"] if m["role"] == "system"] == ["S1", "S2", "S3"]


def test_a_binding_400_on_a_body_too_deep_to_write_again_is_relayed(unknown_binding_sim: Sim,
                                                                   gateways: GatewayFactory) -> None:
    """The same edited client, with a tool schema nested 261 levels deep: valid JSON the first call forwards byte for
    byte, but deeper than the retry can encode (orjson writes 255 levels). The client gets the upstream's binding
    400 as it came, never a 500, and the retry is counted as failed."""
    sim = unknown_binding_sim
    sp = gateways.start(sim.url)
    try:
        params = edited_after_a_round(sp, sim, UNKNOWN_BOUND)
        deep: dict[str, Any] = {"type": "object"}
        for _ in range(130):  # 261 levels: over the 255 orjson writes
            deep = {"type": "object", "properties": {"a": deep}}
        params["tools"] = [*params["tools"], {"name": "deep", "input_schema": deep}]
        with anthropic.Anthropic(base_url=sp.url, api_key=KEY, max_retries=0) as client:
            with pytest.raises(anthropic.BadRequestError) as err:
                client.messages.count_tokens(**params)
        assert err.value.body["error"]["message"].startswith(BOUND_400.format(i=1, j=0))  # type: ignore[index]
        assert metric_sum(sp, "gateway_binding_retries_total", outcome="failed") == 1
        assert metric_sum(sp, "gateway_requests_total", status="5xx") == 0
        assert "Traceback" not in sp.log()
    finally:
        sp.stop()


def redefines_a_tool(n: int) -> dict[str, Any]:
    """From the second request on, ``get_weather`` takes a required ``location`` instead of a ``city``."""
    weather = WEATHER_TOOL if n == 0 else {**WEATHER_TOOL, "input_schema": {
        "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}
    return {"system": "You are a coding assistant.", "tools": [weather, CLOCK_TOOL]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_tool_redefined_under_its_name_reaches_the_model_as_the_client_has_it(
        sim: Sim, kept: list[ServerProcess], redis_server: RedisServer, stream: bool) -> None:
    """Keep-prefix cannot keep a tool whose definition changed under the same name (tool changes only add or remove
    names): the recorded definition would have the model call ``get_weather`` with a ``city`` the client's tool no
    longer takes. The upstream gets the client's definition, the model's calls follow it, and the thinking produced
    under the old tool set is dropped (``drop_block``), never a 4xx."""
    redis_server.flush()
    before = sim.stats()["rejections"]
    seen: list[dict[str, Any]] = []
    replies = loop([sp.url for sp in kept], redefines_a_tool, stream=stream, seen=seen, sim=sim)
    assert len(replies) == 4 and sim.stats()["rejections"] == before
    for body, reply in zip(seen[1:], replies[1:], strict=True):
        weather = next(t for t in body["tools"] if t["name"] == "get_weather")
        assert weather["input_schema"]["required"] == ["location"]
        assert body["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
        for call in (b for b in reply.content if b.type == "tool_use" and b.name == "get_weather"):
            assert set(call.input) == {"location"}, call.input

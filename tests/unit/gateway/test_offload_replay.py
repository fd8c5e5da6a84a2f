"""Which requests leave the event loop (``pipeline.off_loop``): a body of ``GATEWAY_OFFLOAD_BODY_KB`` or more is worked
on in a thread, unless it replays a body this worker kept with fewer new bytes than that (``stages._replays``): its
stages parse only what it inserted, less work than a thread hop costs, and so does its record's write. What a replay
inserts past the bound, or a big body that replays nothing, still goes to the thread."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, Request
from gateway.pipeline import stages as pipeline
from gateway.pipeline.exchange import ClientRequest, Exchange
from state.memory_store import MemoryStore

HEADERS = {"x-api-key": "sk-offload-replay", "anthropic-version": "2023-06-01"}


def _body(turns: int) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "[[sim:tools=99]] go"}]
    for i in range(turns):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_off_{i}", "name": "f", "input": {"pad": "x" * 200}}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_off_{i}",
                                                      "content": "ok " * 50}]})
    return orjson.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": messages})


class _Where:
    """The ANTHROPIC decoder, noting the thread each request was decoded on."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.refuse = False  # the resume refuses the new messages: ``take`` cannot continue from its match
        self.decoder = pipeline.ReplayDecoder(pipeline.ANTHROPIC.kind, self._decode, self._resume)

    def _resume(self, parsed: dict[str, Any], kept: list[Message | None], tail: list[Any]) -> list[Message] | None:
        return None if self.refuse else pipeline.ANTHROPIC.resume(parsed, kept, tail)

    def _decode(self, body: Any, messages: list[Message] | None) -> Request:
        self.threads.append(threading.get_ident())
        return pipeline.ANTHROPIC.decode(body, messages)

    def on_loop(self) -> bool:
        return self.threads[-1] == threading.get_ident()


async def _served(gw: Any, body: bytes, where: _Where) -> Exchange:
    ex = Exchange(ClientRequest(endpoint="messages", dialect="anthropic", request_id="req_offload", headers=HEADERS,
                                query="", raw_body=body))
    await pipeline.prepare(ex, gw, where.decoder)
    assert ex.continuation.ticket is not None
    gw.replay_memo.keep(ex.continuation.ticket)  # as the record stage does once the turn is recorded
    return ex


async def test_a_replays_record_is_written_where_its_stages_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's write (its path hash over the new messages, its encoding) follows the stages: on the loop for a
    small replay, in the thread for a replay that inserted a big body's worth (hashing it on the loop would hold it)."""
    app = create_app(Settings(secret="offload-replay-" + "0" * 32, offload_body_kb=4), store=MemoryStore(),
                     upstreams={})
    gw, where, writes = app.state.gateway, _Where(), []
    write = pipeline._turn_write

    def noted(*args: Any) -> Any:
        writes.append(threading.get_ident())
        return write(*args)

    monkeypatch.setattr(pipeline, "_turn_write", noted)
    answer = anthropic.decode_turn({"id": "msg_off", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
                                    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                                    "usage": {"input_tokens": 1, "output_tokens": 1}})
    loop = threading.get_ident()
    for turns, on_loop in ((20, False), (21, True), (40, False)):
        ex = Exchange(ClientRequest(endpoint="messages", dialect="anthropic", request_id="req_offload",
                                    headers=HEADERS, query="", raw_body=_body(turns)))
        await pipeline.prepare(ex, gw, where.decoder)
        await pipeline.record(ex, gw, answer)  # (which keeps the request in the memo for the next)
        assert ex.plan.recorded, turns
        assert (writes[-1] == loop) is on_loop and where.on_loop() is on_loop, turns


async def test_a_big_replay_stays_on_the_loop_unless_it_inserted_a_big_body_worth() -> None:
    app = create_app(Settings(secret="offload-replay-" + "0" * 32, offload_body_kb=4), store=MemoryStore(),
                     upstreams={})
    gw, where = app.state.gateway, _Where()
    first = _body(20)
    assert len(first) > 8 << 10  # past the bound
    ex = await _served(gw, first, where)
    assert not where.on_loop() and not ex.continuation.ticket.reused  # replays nothing: in the thread
    ex = await _served(gw, _body(21), where)  # one turn more: well under 4 KiB new
    assert where.on_loop() and ex.continuation.ticket.reused  # a replay: on the loop
    ex = await _served(gw, _body(40), where)  # 19 turns more: past the bound
    assert not where.on_loop() and ex.continuation.ticket.reused  # a replay still, of a big body's worth: the thread
    ex = await _served(gw, _body(40), where)  # a retry of the same body: nothing new
    assert where.on_loop() and ex.continuation.ticket.reused


async def test_with_no_memo_a_big_body_is_worked_on_in_the_thread() -> None:
    app = create_app(Settings(secret="offload-replay-" + "0" * 32, offload_body_kb=4, replay_memo_mb=0),
                     store=MemoryStore(), upstreams={})
    gw, where = app.state.gateway, _Where()
    for turns in (20, 21):
        ex = Exchange(ClientRequest(endpoint="messages", dialect="anthropic", request_id="req_offload",
                                    headers=HEADERS, query="", raw_body=_body(turns)))
        await pipeline.prepare(ex, gw, where.decoder)
        assert not where.on_loop()


async def test_a_small_replay_take_cannot_continue_is_decoded_whole_in_the_thread() -> None:
    """The match said "a small replay" but ``take`` could not continue from it (here the resume refuses the new
    messages): the body is decoded whole, and that happens in the thread, not on the loop the match kept it on."""
    app = create_app(Settings(secret="offload-replay-" + "0" * 32, offload_body_kb=4), store=MemoryStore(),
                     upstreams={})
    gw, where = app.state.gateway, _Where()
    await _served(gw, _body(20), where)
    where.refuse = True
    ex = await _served(gw, _body(21), where)
    assert not where.on_loop() and not ex.continuation.ticket.reused  # decoded whole, in the thread
    assert len(where.threads) == 2  # decoded once (the take's miss decoded nothing)

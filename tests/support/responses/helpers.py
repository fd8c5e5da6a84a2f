"""Drives Responses-API tool loops with the official openai SDK (``client.responses.create``, streamed or not) and
replays their output the way different clients do: faithfully, without reasoning items, without
``encrypted_content``, as bare item references, or by ``previous_response_id`` alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from tests.process_fixtures import Sim

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
REASONING = {"effort": "medium", "summary": "auto"}
INCLUDE = ["reasoning.encrypted_content"]
KEY = "sk-responses-acceptance-0123456789abcdef"  # the tests' API key (its tenant)
Items = list[dict[str, Any]]


def faithful(items: Items) -> Items:
    return items


def drop_reasoning(items: Items) -> Items:
    return [i for i in items if i.get("type") != "reasoning"]


def drop_encrypted(items: Items) -> Items:
    return [{k: v for k, v in i.items() if k != "encrypted_content"} for i in items]


def references(items: Items) -> Items:
    return [{"type": "item_reference", "id": i["id"]} for i in items]


MANGLES: dict[str, Callable[[Items], Items]] = {"faithful": faithful, "drop_reasoning": drop_reasoning,
                                                "drop_encrypted": drop_encrypted, "references": references}
# every way ``run_loop`` replays: the manglings, and ``previous_response_id`` alone
CASES: tuple[str, ...] = (*sorted(MANGLES), "previous")


@dataclass
class Turn:
    response: dict[str, Any]
    events: list[str] = field(default_factory=list)
    scid: str | None = None
    upstream: dict[str, Any] | None = None  # the body the simulator received for it (``run_loop``'s ``sim``)
    upstream_path: str = ""  # ... and the path it was sent to
    streamed: list[tuple[str, str]] = field(default_factory=list)  # (output_item.added|done, item id), streamed

    @property
    def output(self) -> Items:
        return list(self.response["output"])

    @property
    def calls(self) -> Items:
        return [i for i in self.output if i["type"] == "function_call"]


def create(client: openai.OpenAI, *, stream: bool, **kw: Any) -> Turn:
    """One response, as a dict, with the stream's event types in order when streamed."""
    if not stream:
        raw = client.responses.with_raw_response.create(**kw)
        return Turn(raw.parse().model_dump(mode="json", exclude_none=True), [],
                    raw.headers.get("x-ag-conversation-id"))
    events: list[str] = []
    streamed: list[tuple[str, str]] = []
    final: dict[str, Any] | None = None
    with client.responses.with_streaming_response.create(stream=True, **kw) as raw:
        for ev in raw.parse():
            events.append(ev.type)
            if ev.type in ("response.output_item.added", "response.output_item.done"):
                streamed.append((ev.type.rsplit(".", 1)[-1], str(ev.item.id)))
            if ev.type in ("response.completed", "response.incomplete", "response.failed"):
                final = ev.response.model_dump(mode="json", exclude_none=True)
        scid = raw.headers.get("x-ag-conversation-id")
    assert final is not None, events
    return Turn(final, events, scid, streamed=streamed)


def run_loop(clients: Sequence[openai.OpenAI], model: str, prompt: str, *, stream: bool, mangle: str,
             rounds: int = 8, header: bool = False, sim: Sim | None = None,
             before: Callable[[], None] | None = None, store: bool | None = None,
             replay: Callable[[Items], Items] | None = None) -> list[Turn]:
    """A tool loop alternating over ``clients`` (one per replica); ``mangle`` names how the client replays
    (``replay``, when given, is how instead: a client of the test's own).
    ``header``: each request names the previous answer's conversation (``X-AG-Conversation-Id``); ``sim``: each
    turn keeps the body the simulator received; ``before``: called before every request; ``store``: sent on every
    request (default: true with ``previous_response_id``, else false)."""
    history: Items = [{"role": "user", "content": prompt}]
    new: Items = list(history)
    turns: list[Turn] = []
    for n in range(rounds):
        kw: dict[str, Any] = {"model": model, "tools": [WEATHER], "reasoning": REASONING, "include": INCLUDE,
                              "max_output_tokens": 8192}
        if mangle == "previous":
            previous = {"previous_response_id": turns[-1].response["id"]} if turns else {}
            kw.update(input=new, store=True if store is None else store, **previous)
        else:
            kw.update(input=history, store=False if store is None else store)
        if header and turns and turns[-1].scid:
            kw["extra_headers"] = {"x-ag-conversation-id": turns[-1].scid}
        if before is not None:
            before()
        turn = create(clients[n % len(clients)], stream=stream, **kw)
        if sim is not None:
            last = sim.last()
            turn.upstream, turn.upstream_path = last["body"], str(last.get("path", ""))
        turns.append(turn)
        results = [{"type": "function_call_output", "call_id": c["call_id"], "output": f"sunny in round {n}"}
                   for c in turn.calls]
        if not results:
            break
        replayed = turn.output if mangle == "previous" else (replay or MANGLES[mangle])(turn.output)
        history += replayed + results
        new = results
    return turns

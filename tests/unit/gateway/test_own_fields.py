"""A client's own top-level fields are what it sent (``ClientRequest.fields``), not a side channel on the canonical
request (issue 33 item 3): the call table hands them to an upstream of the client's own dialect only, the client's
bytes of each value it passes spliced in (``gateway.dialects.client_json``)."""

from __future__ import annotations

from typing import Any, cast

import orjson

from gateway.app.deps import Gateway
from gateway.dialects.canonical import SurfaceOptions
from gateway.dialects.openai_chat import codec as openai_chat
from gateway.dialects.routing import ModelCaps
from gateway.pipeline.exchange import ClientRequest, Exchange
from gateway.surfaces.common import UPSTREAM_DIALECTS, Call
from gateway.vocab import ClientDialect

RAW = (b'{"model": "or/m", "messages": [{"role": "user", "content": "hi"}], "x_vendor": {"n": 1E2},'
       b' "seed": 7, "logit_bias": {"5": 1}}')
CAPS = ModelCaps("openrouter", kind="openai", flavor="openrouter")


def _sent(dialect: ClientDialect, fields: dict[str, Any] | None, surface: SurfaceOptions | None = None) -> bytes:
    req = openai_chat.decode_request(orjson.loads(RAW), route="openai")
    if surface is not None:
        req.surface = surface
    ex = Exchange(ClientRequest("chat_completions", dialect, "req_1", {}, "", RAW, fields))
    return UPSTREAM_DIALECTS["openai"].encode(Call(CAPS, req), ex, cast(Gateway, None))


def test_a_chat_clients_fields_reach_a_chat_upstream_as_it_wrote_them() -> None:
    sent = _sent("openai", orjson.loads(RAW))
    assert b'"x_vendor":{"n": 1E2}' in sent and b'"logit_bias":{"5": 1}' in sent, "the client's bytes of its values"


def test_a_client_of_another_dialect_passes_none_of_its_fields() -> None:
    sent = orjson.loads(_sent("responses", orjson.loads(RAW)))
    assert "x_vendor" not in sent and "seed" not in sent and sent["messages"] == [{"role": "user", "content": "hi"}]


def test_what_the_switch_dropped_is_not_passed() -> None:
    sent = orjson.loads(_sent("openai", orjson.loads(RAW), SurfaceOptions(dropped_params=("logit_bias",))))
    assert "logit_bias" not in sent and sent["x_vendor"] == {"n": 100.0}

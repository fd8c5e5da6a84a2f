"""A same-dialect body keeps the client's bytes of every value thinkgate passes (issue 33 item 3,
``gateway.dialects.client_json``): found without parsing the history again, whatever the client's formatting."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects import client_json
from gateway.dialects.client_json import splice, value_spans

HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "reasoning_content": "x"}]


def _parsed(raw: bytes) -> dict[str, Any]:
    body = orjson.loads(raw)
    return {k: (None if k == "messages" else v) for k, v in body.items()}


def _decided(client: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """What a same_dialect would decide: the client's objects, new messages and ``changes``."""
    out = {k: ({"replaced": True} if k == "messages" else v) for k, v in client.items()}
    out.update(changes)
    return out


def test_values_pass_as_the_client_wrote_them() -> None:
    raw = (b'{"model":"m","temperature":0.70,"metadata":{"who":"\\u00e9t\\u00e9","n":1E2},'
           b'"messages":' + orjson.dumps(HISTORY) + b',"stop":[ "a" , "b" ],"seed":12}')
    client = _parsed(raw)
    got = splice(raw, client, _decided(client, model="upstream-model"), "messages")
    assert b'"temperature":0.70' in got and b'{"who":"\\u00e9t\\u00e9","n":1E2}' in got
    assert b'"stop":[ "a" , "b" ]' in got and b'"seed":12' in got
    assert b'"model":"upstream-model"' in got and b'"reasoning_content"' not in got
    assert orjson.loads(got) == {**orjson.loads(raw), "model": "upstream-model", "messages": {"replaced": True}}


@pytest.mark.parametrize("dumps", [
    lambda body: json.dumps(body).encode(),                             # ", " and ": ", ASCII escapes
    lambda body: json.dumps(body, indent=2).encode(),                   # pretty-printed
    lambda body: orjson.dumps(body),                                    # compact, UTF-8
    lambda body: json.dumps(body, ensure_ascii=False, indent="\t").encode(),
])
@pytest.mark.parametrize("order", [("messages", "model", "stream_options", "temperature"),
                                   ("model", "messages", "stream_options", "temperature"),
                                   ("model", "stream_options", "temperature", "messages")])
def test_the_history_is_found_in_any_formatting_and_place(dumps: Any, order: tuple[str, ...]) -> None:
    full = {"model": "m", "messages": HISTORY, "stream_options": {"include_usage": False, "é": "ü"},
            "temperature": 0.5}
    raw = dumps({k: full[k] for k in order})
    client = _parsed(raw)
    spans = value_spans(raw, client, "messages")
    assert spans is not None
    for key in order:
        a, b = spans[key]
        assert orjson.loads(raw[a:b]) == full[key]
    out = _decided(client, stream_options={"include_usage": True})
    assert orjson.loads(splice(raw, client, out, "messages")) == out


@pytest.mark.parametrize("raw", [
    b'{"model":"a","messages":[],"model":"b"}',                      # the same key twice, different values
    b'{"\\u006dodel":"a","messages":[]}',                            # a key written with escapes
    b'{"model":"a","messages":[]} ',
])
def test_a_body_read_otherwise_is_encoded_whole(raw: bytes) -> None:
    client = _parsed(raw)
    out = _decided(client)
    assert orjson.loads(splice(raw, client, out, "messages")) == out


def test_a_value_thinkgate_decided_is_encoded_even_when_equal() -> None:
    raw = b'{"model":"m","messages":[],"stream":true}'
    client = _parsed(raw)
    out = _decided(client, stream=True, extra=1)  # True is the same object: passed; extra is thinkgate's
    got = splice(raw, client, out, "messages")
    assert got == b'{"model":"m","messages":{"replaced":true},"stream":true,"extra":1}'


_json = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False,
                     allow_infinity=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                   max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(fields=st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: k != "messages"), _json, max_size=5),
       at=st.integers(0, 5), indent=st.sampled_from([None, 1, "\t"]), ascii_=st.booleans())
def test_any_body_splices_to_what_was_decided(fields: dict[str, Any], at: int, indent: Any, ascii_: bool) -> None:
    items = list(fields.items())
    items.insert(min(at, len(items)), ("messages", HISTORY))
    raw = json.dumps(dict(items), indent=indent, ensure_ascii=ascii_).encode()
    client = _parsed(raw)
    out = _decided(client)
    got = splice(raw, client, out, "messages")
    assert orjson.loads(got) == orjson.loads(orjson.dumps(out))
    spans = value_spans(raw, client, "messages")
    if spans is not None:
        for key, value in fields.items():
            a, b = spans[key]
            assert raw[a:b] in got and orjson.loads(raw[a:b]) == orjson.loads(orjson.dumps(value))


def test_a_hostile_body_costs_a_bounded_number_of_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of the key's text inside the history, and the field's own key written with an escape, so that every
    one of them is a candidate: the scanner reads at most ``SCANS`` values (3,000 without the bound), then the body is
    encoded whole (still what was decided)."""
    calls = []
    real = client_json._scan

    def counted(text: str, at: int) -> Any:
        calls.append(len(text))
        return real(text, at)

    monkeypatch.setattr(client_json, "_scan", counted)
    history = [{"role": "user", "content": [{"type": "tool_result", "temperature": 0.5}]} for _ in range(3000)]
    raw = b'{"model":"m","messages":' + orjson.dumps(history) + b',"temp\\u0065rature":0.50}'
    client = _parsed(raw)
    out = _decided(client)
    assert orjson.loads(splice(raw, client, out, "messages")) == out
    assert 0 < len(calls) <= client_json.SCANS <= 16


def test_a_value_longer_than_the_window_is_not_scanned_past_it() -> None:
    big = [1.50] * (client_json.WINDOW // 4)  # written as 1.50: not orjson's form, longer than the window
    raw = b'{"model":"m","extra":' + json.dumps(big).replace("1.5", "1.50").encode() + b',"messages":[]}'
    client = _parsed(raw)
    assert value_spans(raw, client, "messages") is None
    out = _decided(client, model="n")
    assert orjson.loads(splice(raw, client, out, "messages")) == orjson.loads(orjson.dumps(out))

"""A Responses client's request for a Responses upstream (same dialect): what the gateway does not need to change
passes as the client sent it.

``same_dialect`` takes the body thinkgate derived from the canonical request (``responses_upstream.encode_request``)
and the client's own top-level fields (``ClientRequest.fields``, in its order, values as received)
and keeps the client's fields, in the client's order, but for what thinkgate decides:

* ``model``, ``input`` (the repaired items), ``instructions`` (the client's with its ``system`` / ``developer``
  items' text, which the decoder moved out of ``input``), ``stream``;
* ``store: false`` (thinkgate is the conversation's memory: the upstream keeps nothing, any replica serves the
  next request) and no ``previous_response_id`` (it names a response thinkgate minted, rebuilt into ``input``);
* ``include``: the client's list, with what thinkgate asks (``reasoning.encrypted_content``: reasoning items go
  back from the records) added;
* ``reasoning`` passes as sent while thinking stays on; with thinking off (repair's choice) it is what thinkgate
  derived (none);
* ``temperature`` / ``top_p`` only while the canonical request still has them (sanitize may drop them).

Everything else (``metadata``, ``text``, ``tools`` and ``tool_choice`` as sent, hosted tools included,
``truncation``, ``user``, ``service_tier``, ``prompt_cache_key``, fields this code has never heard of) passes
through unchanged. Keys only thinkgate derived follow the client's (``metadata.user_id``'s ``safety_identifier``
only when the client sent no ``metadata`` of its own).
"""

from __future__ import annotations

from gateway.dialects.canonical import JSON, Request

_OWNED = frozenset({"model", "input", "instructions", "stream", "store", "previous_response_id"})
_SANITIZED = ("temperature", "top_p")


def same_dialect(derived: dict[str, JSON], client: dict[str, JSON], req: Request) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, value in client.items():
        if key in _OWNED:
            if key in derived:
                out[key] = derived[key]
        elif key == "include":
            listed = value if isinstance(value, list) else []
            needed = derived.get(key)
            out[key] = [*listed, *(i for i in needed if i not in listed)] if isinstance(needed, list) else listed
        elif key == "reasoning":
            if req.thinking_enabled():
                out[key] = value
            elif key in derived:
                out[key] = derived[key]
        elif key not in _SANITIZED or key in req.params:
            out[key] = value
    for key, value in derived.items():
        if key not in out and not (key == "safety_identifier" and "metadata" in client):
            out[key] = value
    return out

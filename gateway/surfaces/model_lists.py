"""The models a client may ask for, in each protocol's list shape (``GET /v1/models``, ``GET /v1beta/models``).

A listing names the models the routing table can serve: each upstream of the listing's own protocol is asked for its
own list (Anthropic ``GET /v1/models``, Gemini ``GET /v1beta/models``, an OpenAI-compatible or Responses upstream
``GET {base}/models``) with the client's credential, and an entry is kept when the routing table sends that model to
that upstream; then the configured routes that name a model (``route_models``: a ``GATEWAY_ROUTES`` prefix that ends
in a letter or digit, such as ``gemini-3-flash-preview``, not ``google/`` or ``deepseek-``), so a model routed to an
upstream that offers no list is listed too; then the models this worker saw the upstream answer for the tenant
(``ModelLists.saw``), so a model a client used is in its picker even where no list names it. The client's key goes
only to upstreams of the protocol it asked in (an Anthropic SDK's key is never sent to Google to list models). Each
worker keeps the lists (``ModelLists``, owned by the app) per tenant and upstream for ``TTL_S`` seconds.

Shapes: OpenAI ``{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}``; Anthropic
``{"data": [{"type": "model", "id", "display_name", "created_at"}], "has_more", "first_id", "last_id"}`` (``limit``,
``after_id``, ``before_id`` honoured, as the Anthropic SDK pages); Gemini ``{"models": [...]}`` with each upstream
entry as it came. Pure but for ``ModelLists``' clock.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.dialects.canonical import JSON
from gateway.dialects.routing import Router
from gateway.errors import ClientError, bad_request

TTL_S = 300.0          # how long a worker keeps one upstream's list for one tenant
MAX_LISTS = 1024       # (tenant, upstream) lists each worker keeps (LRU)
MAX_SEEN = 100         # models a worker remembers having served per (tenant, upstream)
ANTHROPIC_LIMIT = 20   # Anthropic's default page size (``limit``: 1 to 1000)
EPOCH = "1970-01-01T00:00:00Z"


@dataclass(frozen=True, slots=True)
class Listed:
    """One model an upstream listed: its id, and what the list shapes show of it."""

    id: str
    owner: str                     # the upstream's name (OpenAI ``owned_by``)
    created: int = 0               # OpenAI ``created`` (seconds)
    created_at: str = EPOCH        # Anthropic ``created_at``
    display_name: str = ""
    raw: dict[str, JSON] = field(default_factory=dict)  # Gemini's own entry, relayed as it came


def parse_list(list_key: str, upstream: str, body: bytes) -> list[Listed]:
    """An upstream's list answer -> its models (an answer of another shape lists none). ``list_key``: the key of
    its entries (``Dialect.list_key``): ``models`` holds Gemini's ``name`` entries, any other OpenAI's or
    Anthropic's ``id`` ones."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(data, dict):
        return []
    out: list[Listed] = []
    if list_key == "models":
        for m in _dicts(data.get("models")):
            name = m.get("name")
            if isinstance(name, str) and name:
                mid = name.removeprefix("models/")
                out.append(Listed(mid, upstream, display_name=str(m.get("displayName") or mid), raw=m))
        return out
    for m in _dicts(data.get("data")):
        found = m.get("id")
        if not isinstance(found, str) or not found:
            continue
        mid = found
        created = m.get("created")
        created_at = m.get("created_at")
        out.append(Listed(mid, upstream, created if isinstance(created, int) else 0,
                          created_at if isinstance(created_at, str) else EPOCH,
                          str(m.get("display_name") or mid)))
    return out


def route_models(router: Router, upstreams: Collection[str], listed: Iterable[Listed]) -> list[Listed]:
    """The models the configured routes name (a prefix ending in a letter or digit, which the table sends to its
    route's upstream, one of ``upstreams``) that ``listed`` does not hold already."""
    seen = {m.id for m in listed}
    out: list[Listed] = []
    for r in router.routes:
        if r.prefix[-1:].isalnum() and r.prefix not in seen and r.upstream in upstreams and \
                router.caps_for(r.prefix).upstream == r.upstream:
            seen.add(r.prefix)
            out.append(Listed(r.prefix, r.upstream))
    return out


def _dicts(value: Any) -> Iterable[dict[str, Any]]:
    return (v for v in value if isinstance(v, dict)) if isinstance(value, list) else ()


def openai_list(models: list[Listed]) -> dict[str, JSON]:
    return {"object": "list", "data": [_openai_entry(m) for m in models]}


def gemini_list(models: list[Listed]) -> dict[str, JSON]:
    return {"models": [_gemini_entry(m) for m in models]}


def _gemini_entry(m: Listed) -> dict[str, JSON]:
    return m.raw or {"name": f"models/{m.id}", "displayName": m.display_name}


def _openai_entry(m: Listed) -> dict[str, JSON]:
    return {"id": m.id, "object": "model", "created": m.created, "owned_by": m.owner}


def _anthropic_entry(m: Listed) -> dict[str, JSON]:
    return {"type": "model", "id": m.id, "display_name": m.display_name or m.id, "created_at": m.created_at}


def model_entry(dialect: str, m: Listed) -> dict[str, JSON]:
    """One model as the protocol's retrieve answers it: the entry its list shows."""
    return {"gemini": _gemini_entry, "anthropic": _anthropic_entry}.get(dialect, _openai_entry)(m)


def model_not_found(dialect: str, model_id: str) -> ClientError:
    """404 for a model the listing does not hold, in each API's words (docs/upstream-rules.md, "Model lookups")."""
    if dialect == "anthropic":
        return ClientError(404, f"model: {model_id}", "not_found_error")
    if dialect == "gemini":
        name = model_id if model_id.startswith("models/") else f"models/{model_id}"
        return ClientError(404, f"{name} is not found for API version v1beta, or is not supported", "not_found_error")
    return ClientError(404, f"The model `{model_id}` does not exist or you do not have access to it.",
                       "invalid_request_error", "model_not_found")


def anthropic_list(models: list[Listed], query: dict[str, str]) -> dict[str, JSON]:
    """One page: ``limit`` models after ``after_id`` (or before ``before_id``), as the Anthropic API pages."""
    raw_limit = query.get("limit", str(ANTHROPIC_LIMIT))
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 1000:
        raise bad_request("limit: Input should be an integer from 1 to 1000")
    limit = int(raw_limit)
    ids = [m.id for m in models]
    start, end = 0, len(models)
    if (after := query.get("after_id")) is not None:
        start = ids.index(after) + 1 if after in ids else len(models)
    elif (before := query.get("before_id")) is not None:
        end = ids.index(before) if before in ids else 0
        start = max(0, end - limit)
    page = models[start:end][:limit]
    data = [_anthropic_entry(m) for m in page]
    more = start + len(page) < end if "before_id" not in query else start > 0
    return {"data": data, "has_more": more, "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None}


class ModelLists:
    """A worker's upstream model lists, per (tenant, upstream), each kept ``ttl`` seconds (LRU, ``max_lists``)."""

    def __init__(self, ttl: float = TTL_S, max_lists: int = MAX_LISTS) -> None:
        self.ttl = ttl
        self.max_lists = max_lists
        self._lists: OrderedDict[tuple[str, str], tuple[float, list[Listed]]] = OrderedDict()
        self._seen: OrderedDict[tuple[str, str], dict[str, None]] = OrderedDict()  # (tenant, upstream) -> models

    def get(self, tenant: str, upstream: str) -> list[Listed] | None:
        entry = self._lists.get((tenant, upstream))
        if entry is None or entry[0] <= time.monotonic():
            return None
        self._lists.move_to_end((tenant, upstream))
        return entry[1]

    def put(self, tenant: str, upstream: str, models: list[Listed]) -> None:
        self._lists[(tenant, upstream)] = (time.monotonic() + self.ttl, models)
        self._lists.move_to_end((tenant, upstream))
        while len(self._lists) > self.max_lists:
            self._lists.popitem(last=False)

    def saw(self, tenant: str, upstream: str, model: str) -> None:
        """``upstream`` answered ``tenant``'s request for ``model``: listed from now on, also where the upstream
        offers no list of its own (the most recent ``MAX_SEEN`` per tenant and upstream)."""
        models = self._seen.setdefault((tenant, upstream), {})
        models.pop(model, None)
        models[model] = None
        if len(models) > MAX_SEEN:
            del models[next(iter(models))]
        self._seen.move_to_end((tenant, upstream))
        while len(self._seen) > self.max_lists:
            self._seen.popitem(last=False)

    def seen(self, tenant: str, upstream: str) -> list[str]:
        return list(self._seen.get((tenant, upstream), ()))

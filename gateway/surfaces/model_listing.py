"""Answering a model list (``GET /v1/models``, ``GET /v1beta/models``): the models the routing table can serve, in
the shape of the protocol the request speaks.

The path and headers say which shape (``surfaces.dialect_by_headers``): ``/v1beta/models`` is Gemini's; on
``/v1/models`` a request with ``anthropic-version`` or ``x-api-key`` (what the Anthropic SDK sends) gets Anthropic's
page, any other OpenAI's list. The lists come from the configured upstreams of that protocol (each asked with the
client's key, cached per tenant: ``gateway.surfaces.model_lists``) and the routes that name a model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from gateway.access import admission
from gateway.app.deps import Gateway
from gateway.dialects import registry
from gateway.dialects.canonical import JSON
from gateway.errors import ClientError, Dialect, GatewayError
from gateway.pipeline import identify
from gateway.surfaces.common import UPSTREAM_DIALECTS
from gateway.surfaces.model_lists import (
    Listed,
    anthropic_list,
    gemini_list,
    model_entry,
    model_not_found,
    openai_list,
    parse_list,
    route_models,
)
from gateway.surfaces.table import dialect_by_headers

log = logging.getLogger("thinkgate.endpoints")
LIST_TIMEOUT_S = 10.0


def _upstreams(gw: Gateway, dialect: str) -> list[tuple[str, str]]:
    """(upstream name, kind) of the configured upstreams the listing asks: those whose dialect entry is listed in
    the request's protocol (the client's key goes to those only)."""
    kinds = {kind: kind for kind in registry.BARE_ROUTES}  # the built-in upstreams are named after their kinds
    kinds.update({name: r.kind for name, r in gw.router.named_upstreams().items()})
    return [(name, kinds[name]) for name in gw.upstreams
            if name in kinds and registry.dialect(kinds[name]).listed_for == dialect]


async def _listed(gw: Gateway, tenant: str, name: str, kind: str, headers: dict[str, str],
                  grant: admission.Grant | None) -> list[Listed]:
    cached = gw.model_lists.get(tenant, name)
    if cached is not None:
        return cached
    dialect = UPSTREAM_DIALECTS[kind]
    models: list[Listed] = []
    if dialect.models is not None:
        path, query = dialect.models
        try:
            asked = admission.upstream_headers(headers, grant, name, gw)  # (a gateway key: thinkgate's credential)
            status, body = await gw.upstreams[name].get(path, dialect.headers(asked), query, LIST_TIMEOUT_S)
        except GatewayError as e:
            log.info("upstream %s: no model list (%s)", name, e.message)
            return []
        if status != 200:
            log.info("upstream %s: no model list (HTTP %d)", name, status)
            return []
        models = [m for m in parse_list(registry.dialect(kind).list_key, name, body)
                  if gw.router.caps_for(m.id).upstream == name]
    gw.model_lists.put(tenant, name, models)
    return models


def _dialect(path: str, headers: dict[str, str], query: Mapping[str, str], model_id: str | None) -> Dialect:
    """The protocol a listing or lookup answers in: ``/v1beta/...`` is Gemini's; on ``/v1/models`` Anthropic's or
    OpenAI's as the headers say; on ``/v1/models/{id}`` (also Gemini's v1 path) Anthropic's, OpenAI's, else Gemini's.
    A Gemini ``?key=`` is taken as its ``x-goog-api-key`` (``headers``)."""
    named = dialect_by_headers(headers, "&".join(f"{k}=" for k in query))
    if path.startswith("/v1beta/") or (model_id is not None and named in ("gemini", None)):
        key = query.get("key")
        if key and "x-goog-api-key" not in headers:
            headers["x-goog-api-key"] = key
        return "gemini"
    return "anthropic" if named == "anthropic" else "openai"


async def model_list(gw: Gateway, path: str, headers: Mapping[str, str], query: Mapping[str, str],
                     model_id: str | None = None, grant: admission.Grant | None = None) -> JSON:
    """The list body for a request (headers in any case) or, with ``model_id``, that model's entry as the list shows
    it (404 in the client's protocol when the list has none); no client key: a 401."""
    lowered = {k.lower(): v for k, v in headers.items()}
    dialect = _dialect(path, lowered, query, model_id)
    tenant = identify.tenant_of(gw.settings.secret, lowered)
    if tenant is None:
        raise ClientError(401, "an API key (x-api-key, x-goog-api-key or Authorization: Bearer) is required",
                          "authentication_error")
    asked = _upstreams(gw, dialect)
    lists = await asyncio.gather(*(_listed(gw, tenant, name, kind, lowered, grant) for name, kind in asked))
    models = [m for listed in lists for m in listed]
    models += route_models(gw.router, [name for name, _ in asked], models)
    listed_ids = {m.id for m in models}
    models += [Listed(mid, name) for name, _ in asked for mid in gw.model_lists.seen(tenant, name)
               if mid not in listed_ids and gw.router.caps_for(mid).upstream == name]
    if grant is not None:  # the models the key may use
        models = [m for m in models if grant.allows(m.id)]
    if model_id is not None:
        found = next((m for m in models if m.id == model_id.removeprefix("models/")), None)
        if found is None:
            raise model_not_found(dialect, model_id)
        return model_entry(dialect, found)
    if dialect == "gemini":
        return gemini_list(models)
    if dialect == "anthropic":
        return anthropic_list(models, dict(query))
    return openai_list(models)

"""``GET /v1/models`` and ``GET /v1beta/models``: the models the routing table can serve, in the client's list shape.

The path and headers say which shape (``surfaces.dialect_by_headers``): ``/v1beta/models`` is Gemini's; on
``/v1/models`` a request with ``anthropic-version`` or ``x-api-key`` (what the Anthropic SDK sends) gets Anthropic's
page, any other OpenAI's list. The lists come from the upstreams of that protocol and the routes that name a model
(``gateway.model_lists``).
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway import identity
from gateway.deps import Gateway
from gateway.dialects import UPSTREAM_DIALECTS
from gateway.endpoints.common import gateway_of
from gateway.errors import ClientError, GatewayError
from gateway.model_lists import (
    Listed,
    anthropic_list,
    gemini_list,
    model_entry,
    model_not_found,
    openai_list,
    parse_list,
    route_models,
)
from gateway.surfaces import dialect_by_headers

log = logging.getLogger("thinkgate.endpoints")
LIST_TIMEOUT_S = 10.0
# the upstream kinds each listing protocol asks (the client's key goes to those only)
_KINDS = {"anthropic": ("anthropic",), "gemini": ("gemini",), "openai": ("openai", "responses")}


def _upstreams(gw: Gateway, dialect: str) -> list[tuple[str, str]]:
    """(upstream name, kind) of the configured upstreams the listing asks."""
    kinds = {"anthropic": "anthropic", "gemini": "gemini", "openai": "openai"}
    kinds.update({name: r.kind for name, r in gw.router.named_upstreams().items()})
    return [(name, kinds[name]) for name in gw.upstreams if kinds.get(name) in _KINDS[dialect]]


async def _listed(gw: Gateway, tenant: str, name: str, kind: str, headers: dict[str, str]) -> list[Listed]:
    cached = gw.model_lists.get(tenant, name)
    if cached is not None:
        return cached
    dialect = UPSTREAM_DIALECTS[kind]
    models: list[Listed] = []
    if dialect.models is not None:
        path, query = dialect.models
        try:
            status, body = await gw.upstreams[name].get(path, dialect.headers(headers), query, LIST_TIMEOUT_S)
        except GatewayError as e:
            log.info("upstream %s: no model list (%s)", name, e.message)
            return []
        if status != 200:
            log.info("upstream %s: no model list (HTTP %d)", name, status)
            return []
        models = [m for m in parse_list(kind, name, body) if gw.router.caps_for(m.id).upstream == name]
    gw.model_lists.put(tenant, name, models)
    return models


def _dialect(request: HTTPRequest, headers: dict[str, str]) -> str:
    """The protocol a listing or lookup answers in: ``/v1beta/...`` is Gemini's (its ``?key=`` taken as the header);
    on ``/v1/models`` Anthropic's or OpenAI's as the headers say; on ``/v1/models/{id}`` (also Gemini's v1 path)
    Anthropic's, OpenAI's, else Gemini's."""
    named = dialect_by_headers(headers, request.url.query)
    if request.url.path.startswith("/v1beta/") or ("model_id" in request.path_params and named in ("gemini", None)):
        key = request.query_params.get("key")
        if key and "x-goog-api-key" not in headers:
            headers["x-goog-api-key"] = key
        return "gemini"
    return "anthropic" if named == "anthropic" else "openai"


async def list_models(request: HTTPRequest) -> Response:
    """The list (``GET /v1/models``, ``/v1beta/models``) or, with a model id in the path, that one model: the entry the
    list shows (``GET /v1/models/{id}``, ``/v1beta/models/{id}``: the SDKs' ``models.retrieve`` / ``models.get``),
    404 in the client's protocol when the list has none."""
    gw = gateway_of(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    dialect = _dialect(request, headers)
    tenant = identity.tenant_of(gw.settings.secret, headers)
    if tenant is None:
        raise ClientError(401, "an API key (x-api-key, x-goog-api-key or Authorization: Bearer) is required",
                          "authentication_error")
    asked = _upstreams(gw, dialect)
    lists = await asyncio.gather(*(_listed(gw, tenant, name, kind, headers) for name, kind in asked))
    models = [m for listed in lists for m in listed]
    models += route_models(gw.router, [name for name, _ in asked], models)
    if "model_id" in request.path_params:
        return _one(dialect, request.path_params["model_id"], models)
    if dialect == "gemini":
        body = gemini_list(models)
    elif dialect == "anthropic":
        body = anthropic_list(models, dict(request.query_params))
    else:
        body = openai_list(models)
    return Response(orjson.dumps(body), media_type="application/json")


def _one(dialect: str, model_id: str, models: list[Listed]) -> Response:
    found = next((m for m in models if m.id == model_id.removeprefix("models/")), None)
    if found is None:
        raise model_not_found(dialect, model_id)
    return Response(orjson.dumps(model_entry(dialect, found)), media_type="application/json")

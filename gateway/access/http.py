"""Operator endpoints behind ``GATEWAY_ADMIN_TOKEN``: ``/admin/keys`` (GET lists, POST creates),
``/admin/keys/{name}`` (PATCH updates, DELETE revokes), ``/admin/usage?days=N&key=NAME``; ``/metrics`` behind
``GATEWAY_METRICS_TOKEN`` when it is set."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway.access import admin, guard
from gateway.errors import GatewayError, bad_request
from gateway.ops import metrics_workers
from state.store import Store

if TYPE_CHECKING:
    from gateway.app.deps import Gateway


def gateway_of(request: HTTPRequest) -> Gateway:
    return request.app.state.gateway


def _store(request: HTTPRequest) -> Store:
    gw = gateway_of(request)
    guard.check(request.headers, gw.settings.admin_token, required=True)
    if gw.store is None:
        raise GatewayError(503, "gateway keys need the store (the state machine is off)", "api_error")
    return gw.store


async def _body(request: HTTPRequest) -> object:
    try:
        return orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise bad_request("the body is not JSON") from None


def _json(value: object, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


async def keys(request: HTTPRequest) -> Response:
    store = _store(request)
    if request.method == "POST":
        return _json(await admin.create(store, await _body(request)), 201)
    return _json({"keys": await admin.listed(store)})


async def key(request: HTTPRequest) -> Response:
    store, name = _store(request), request.path_params["name"]
    if request.method == "DELETE":
        return _json(await admin.revoke(store, name))
    return _json(await admin.update(store, name, await _body(request)))


async def usage(request: HTTPRequest) -> Response:
    days, name = request.query_params.get("days", "7"), request.query_params.get("key")
    return _json(await admin.usage(_store(request), int(days) if days.isdigit() else 0, name))


async def guarded_metrics(request: HTTPRequest) -> Response:
    guard.check(request.headers, gateway_of(request).settings.metrics_token, required=False)
    return await metrics_workers.metrics_endpoint(request)

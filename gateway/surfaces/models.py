"""``GET /v1/models`` and ``GET /v1beta/models``: the models the routing table can serve, in the client's list shape;
with a model id in the path (``GET /v1/models/{id}``, ``/v1beta/models/{id}``), that one model (which shape, and where
the lists come from: ``gateway.surfaces.model_listing``)."""

from __future__ import annotations

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway.access import admission
from gateway.surfaces.common import gateway_of
from gateway.surfaces.model_listing import model_list


async def list_models(request: HTTPRequest) -> Response:
    gw = gateway_of(request)
    grant = await admission.admit({k.lower(): v for k, v in request.headers.items()}, gw)
    try:
        body = await model_list(gw, request.url.path, request.headers, request.query_params,
                                request.path_params.get("model_id"), grant)
    finally:
        await admission.release(grant, None, gw)
    return Response(orjson.dumps(body), media_type="application/json")

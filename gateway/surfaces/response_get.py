"""OpenAI ``GET /v1/responses/{id}``: a recorded response, for its tenant only (``responses_state.read_response``)."""

from __future__ import annotations

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway.surfaces import responses_state
from gateway.surfaces.common import gateway_of


async def response_get(request: HTTPRequest) -> Response:
    body = await responses_state.read_response(gateway_of(request), request.path_params["response_id"],
                                               request.headers, request.query_params)
    return Response(orjson.dumps(body), media_type="application/json")

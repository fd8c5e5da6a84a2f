"""``GET /gateway/conversations/{scid}``: the caller's own conversation, exported."""

from __future__ import annotations

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from gateway.access import admission
from gateway.errors import ClientError, GatewayError, bad_request
from gateway.pipeline import identify
from gateway.surfaces.common import gateway_of
from gateway.surfaces.export import FORMATS, export_conversation
from state.keys import is_valid_scid
from state.store import StoreError


async def conversation_export(request: HTTPRequest) -> Response:
    """Tenant-scoped by the credential: another tenant's SCID is indistinguishable from an unknown one
    (404). ``?format=openai`` (default) or ``anthropic``; ``?include_signatures=true``.
    """
    gw = gateway_of(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    await admission.release(await admission.admit(headers, gw), None, gw)  # (a gateway key: valid, within limits)
    tenant = identify.tenant_of(gw.settings.secret, headers)
    if tenant is None:
        raise ClientError(401, "an API key (x-api-key or Authorization: Bearer) is required",
                          "authentication_error")
    fmt = next((f for f in FORMATS if f == request.query_params.get("format", "openai")), None)
    if fmt is None:
        raise bad_request(f"format: Input should be one of {', '.join(FORMATS)}")
    include = request.query_params.get("include_signatures", "false").lower() in ("true", "1", "yes")
    scid = request.path_params["scid"]
    conv = None
    if gw.store is not None and is_valid_scid(scid):
        try:
            conv = await gw.store.get_conversation(tenant, scid)
        except StoreError as e:
            raise GatewayError(503, "the conversation store is unavailable", "api_error") from e
    if conv is None:
        raise ClientError(404, f"conversation {scid} not found", "not_found_error")
    return Response(orjson.dumps(export_conversation(conv, fmt, include_signatures=include)),
                    media_type="application/json")

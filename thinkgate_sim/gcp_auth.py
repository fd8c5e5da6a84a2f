"""Google OAuth for the Vertex profiles: a token endpoint that takes a service account's signed JWT assertion (the
``urn:ietf:params:oauth:grant-type:jwt-bearer`` grant google-auth sends to the key file's ``token_uri``) and issues an
access token, and the bearer check of every Vertex request. The assertion's claims are checked (issuer, audience,
scope, expiry); its RSA signature is not (the simulator holds no public keys)."""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any
from urllib.parse import parse_qs

import orjson
from starlette.requests import Request
from starlette.responses import Response

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
LIFETIME_S = 3600
# Google's 401 for a missing or unknown token (the text Google APIs answer with, quoted in google-cloud issues)
UNAUTHENTICATED = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
                   "other valid authentication credential. See "
                   "https://developers.google.com/identity/sign-in/web/devconsole-project.")


class Tokens:
    def __init__(self) -> None:
        self.issued: dict[str, float] = {}  # token -> expiry (monotonic)
        self.grants = 0

    def valid(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        expiry = self.issued.get(token.strip()) if scheme.lower() == "bearer" else None
        return expiry is not None and expiry > time.monotonic()

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
        claims = _claims(form.get("assertion", ""))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" or claims is None:
            return _oauth_error("invalid_grant", "Invalid JWT: Token must be a short-lived token and in a "
                                                 "reasonable timeframe.")
        if SCOPE not in str(claims.get("scope", "")).split() or not claims.get("iss"):
            return _oauth_error("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        token = "ya29.sim." + secrets.token_hex(16)
        self.issued[token] = time.monotonic() + LIFETIME_S
        self.grants += 1
        return Response(orjson.dumps({"access_token": token, "expires_in": LIFETIME_S, "token_type": "Bearer"}),
                        200, media_type="application/json")


def _claims(jwt: str) -> dict[str, Any] | None:
    parts = jwt.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int) or claims["exp"] < time.time():
        return None
    return claims


def _oauth_error(code: str, text: str) -> Response:
    return Response(orjson.dumps({"error": code, "error_description": text}), 400, media_type="application/json")

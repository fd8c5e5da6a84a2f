"""SigV4 verification for the Bedrock profile, from AWS's specification (Signature Version 4 signing process): the
canonical request (method, the path as received encoded once more, the sorted query, the signed headers, the
body's SHA-256), the string to sign over the credential scope, and the HMAC key chain of the secret key. The
simulator's own implementation: the gateway signs with botocore, so a mistake on either side shows as a 403."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, quote

TEST_KEYS = {"AKIDTHINKGATESIM": "thinkgate-sim-secret-access-key"}  # the profile's test credentials
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
# AWS's texts (the common errors of every AWS API; https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html
# names them, the messages are those the services answer with)
MISSING = ("MissingAuthenticationTokenException", "Missing Authentication Token")
UNKNOWN_KEY = ("UnrecognizedClientException", "The security token included in the request is invalid.")
MISMATCH = ("InvalidSignatureException", "The request signature we calculated does not match the signature you "
            "provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for "
            "details.")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def verify(method: str, raw_path: str, query: str, headers: Mapping[str, str], body: bytes,
           keys: Mapping[str, str] = TEST_KEYS, service: str = "bedrock") -> tuple[str, str] | None:
    """None when the request is signed by one of ``keys`` for ``service``; else the (exception, message) AWS
    answers with (403)."""
    found = _AUTH.match(headers.get("authorization", ""))
    if found is None or "x-amz-date" not in headers:
        return MISSING
    key_id, day, region, svc, signed, signature = found.groups()
    secret = keys.get(key_id)
    if secret is None:
        return UNKNOWN_KEY
    names = signed.split(";")
    if "host" not in names or svc != service or not headers["x-amz-date"].startswith(day):
        return MISMATCH
    canonical_headers = "".join(f"{n}:{' '.join(headers.get(n, '').split())}\n" for n in names)
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
                               for k, v in sorted(parse_qsl(query, keep_blank_values=True)))
    canonical = "\n".join((method, quote(raw_path, safe="/~"), canonical_query, canonical_headers, signed,
                           hashlib.sha256(body).hexdigest()))
    scope = f"{day}/{region}/{svc}/aws4_request"
    to_sign = "\n".join(("AWS4-HMAC-SHA256", headers["x-amz-date"], scope,
                         hashlib.sha256(canonical.encode()).hexdigest()))
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret).encode(), day), region), svc), "aws4_request")
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(expected, signature) else MISMATCH

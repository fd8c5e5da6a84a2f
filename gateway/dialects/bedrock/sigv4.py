"""SigV4 for Bedrock with botocore's signer and credential chain (``thinkgate[aws]``): environment keys, the shared
config and credentials files, IRSA's web identity token, ECS and EC2 instance roles, refreshed by botocore as they
near expiry. botocore is the AWS SDK's own implementation, kept by AWS; signing is local (no request of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway.dialects.cloud import MissingExtra

SERVICE = "bedrock"  # the signing name of bedrock-runtime


class SigV4:
    def __init__(self, region: str) -> None:
        try:
            from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
            from botocore.session import Session  # type: ignore[import-untyped]
        except ImportError as e:
            raise MissingExtra("a bedrock route needs botocore: pip install 'thinkgate[aws]'") from e
        self.region = region
        self._session = Session()
        self._signer = SigV4Auth
        self._credentials: Any = None

    async def __call__(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        if self._credentials is None:  # (the chain may read files or ask an endpoint: off the loop, once)
            self._credentials = await asyncio.to_thread(self._session.get_credentials)
            if self._credentials is None:
                raise MissingExtra("no AWS credentials found (AWS_ACCESS_KEY_ID, a profile, IRSA or an instance role)")
        creds = self._credentials
        # temporary credentials (IRSA, instance roles) near their expiry are refreshed by botocore with a blocking call
        # to STS or the metadata endpoint: then off the loop; otherwise they are read as they are
        due = getattr(creds, "refresh_needed", None)
        frozen = (await asyncio.to_thread(creds.get_frozen_credentials) if due is not None and due()
                  else creds.get_frozen_credentials())
        return sign(frozen, self.region, method, url, headers, body, self._signer)


def sign(credentials: object, region: str, method: str, url: str, headers: Mapping[str, str], body: bytes,
         signer: type | None = None) -> dict[str, str]:
    """The SigV4 headers of one request (``Authorization``, ``X-Amz-Date``, a session's ``X-Amz-Security-Token``),
    over ``host`` and the ``content-type`` sent."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

    request = AWSRequest(method=method, url=url, data=body,
                         headers={"content-type": headers.get("content-type", "application/json")})
    (signer or SigV4Auth)(credentials, SERVICE, region).add_auth(request)
    return {k: v for k, v in request.headers.items() if k.lower() != "content-type"}

"""The OAuth bearer of Vertex requests from Google's application default credentials (google-auth,
``thinkgate[gcp]``): ``GOOGLE_APPLICATION_CREDENTIALS`` (a service-account key file), workload identity or the metadata
server, as every Google SDK finds them. One token per worker, refreshed before it expires (google-auth's ``valid``
allows for clock skew), one refresh at a time, off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway.dialects.cloud import MissingExtra

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class GoogleToken:
    def __init__(self) -> None:
        try:
            import google.auth
            import google.auth.transport.requests
        except ImportError as e:
            raise MissingExtra("a vertex route needs google-auth: pip install 'thinkgate[gcp]'") from e
        self._auth = google.auth
        self._transport = google.auth.transport.requests
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    def _refresh(self) -> None:
        if self._credentials is None:
            self._credentials, _ = self._auth.default(scopes=list(SCOPES))
        self._credentials.refresh(self._transport.Request())

    async def __call__(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        if self._credentials is None or not self._credentials.valid:
            async with self._lock:
                if self._credentials is None or not self._credentials.valid:
                    await asyncio.to_thread(self._refresh)
        return {"authorization": f"Bearer {self._credentials.token}"}

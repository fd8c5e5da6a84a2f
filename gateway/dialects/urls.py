"""Upstream base URLs as they may be shown and as they may be configured: pure, no I/O.

A base URL is shown (banner, ``Settings`` repr, error messages) without its user info and query, where a
credential could hide (``display_url``). It may not be *configured* with user info at all (``credentials_problem``):
thinkgate forwards each client's own key, and a second credential in the URL would be sent for every tenant, or
collide with the client's ``Authorization`` header (aiohttp refuses to combine the two). A query has nowhere to go
either: the endpoint path is appended to the base URL.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s,'\"]+", re.I)


def display_url(url: str) -> str:
    """A base URL as logs and error messages show it: scheme, host, port and path; user info and query (where a
    key could hide) left out."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else url.split("?", 1)[0]


def redact_urls(text: str) -> str:
    """``text`` with every URL in it as ``display_url`` shows it (``GATEWAY_ROUTES`` holds several)."""
    return _URL.sub(lambda m: display_url(m[0]), text)


def credentials_problem(url: str) -> str | None:
    """Why ``url`` cannot be an upstream base URL (None: it can): user info, a query or a fragment."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return ("carries credentials (user info before '@'); thinkgate forwards each client's own key: "
                "remove them from the URL")
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        return "has a query or fragment ('?', '#'); the endpoint path is appended to the base URL: remove it"
    return None

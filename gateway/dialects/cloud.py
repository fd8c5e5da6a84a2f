"""A cloud platform's route target: ``NAME@LOCATION`` in ``GATEWAY_ROUTES`` (``bedrock@us-east-1``,
``vertex@PROJECT/REGION``), the upstream it names, the dialect kind each model takes there, its base URL and the
credential that signs its requests (from the environment the cloud's own SDKs read, never from the client).

Each platform's subpackage (``gateway.dialects.bedrock``, ``gateway.dialects.vertex``) defines its targets; the
registry lists them. The credential libraries are optional extras (``thinkgate[aws]``, ``thinkgate[gcp]``), imported
when a route names the platform.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

# signs one request: (method, URL, headers, body) -> the headers to add (``Authorization`` and its kin)
Auth = Callable[[str, str, Mapping[str, str], bytes], Awaitable[dict[str, str]]]


class MissingExtra(RuntimeError):
    """A route names a platform whose credential library is not installed."""


@dataclass(frozen=True, slots=True)
class CloudTarget:
    name: str                                 # the route target and the upstream's name (its metrics label)
    kind_for: Callable[[str], str]            # model -> the dialect kind it is served as
    base_url: Callable[[str, str | None], str]  # (location, the operator's endpoint override) -> base URL
    problem: Callable[[str], str | None]      # what is wrong with a location (None: nothing)
    auth: Callable[[str], Auth]               # location -> the request signer
    endpoint_setting: str                     # the setting that overrides its endpoint (tests, private endpoints)

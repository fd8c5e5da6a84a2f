"""The TLS context of a ``rediss://`` client, for ``state.resp.RespNode``: the one redis-py would connect with.

redis-py's asyncio ``SSLConnection`` takes its ``ssl_*`` settings (keyword arguments, or the query of a
``rediss://`` URL: ``?ssl_ca_certs=/etc/redis/ca.pem&ssl_certfile=...``) and builds its context in
``RedisSSLContext.get``: ``ssl.create_default_context()`` (system trust anchors, hostname check, at least
TLS 1.2), then verify mode and hostname check (off whenever verification is off), verify flags added and
removed, client certificate chain (key, password), extra trust anchors (file, directory, PEM data), minimum
version, ciphers. ``client_context`` does the same steps in the same order with the same defaults
(``SSLConnection``'s own, read from its signature), so a node reached here trusts, presents and refuses
exactly what redis-py's connection to it would.

An ``ssl_*`` setting this module does not know (a newer redis-py's, or a misspelt one) makes it answer None:
that client stays on redis-py rather than connect with a context redis-py would not have built.
"""

from __future__ import annotations

import inspect
import ssl
from collections.abc import Mapping
from typing import Any

from redis.asyncio.connection import SSLConnection
from redis.exceptions import RedisError

# SSLConnection's parameters, in the order RedisSSLContext.get applies what they set.
MIRRORED = ("ssl_cert_reqs", "ssl_check_hostname", "ssl_include_verify_flags", "ssl_exclude_verify_flags",
            "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data",
            "ssl_min_version", "ssl_ciphers")
_DEFAULTS: dict[str, Any] = {name: p.default for name, p in inspect.signature(SSLConnection.__init__).parameters.items()
                             if name.startswith("ssl_")}
# what the installed redis-py's SSLConnection takes that this module does not set (empty for redis-py 5.0-8.1)
UNMIRRORED = frozenset(_DEFAULTS) - frozenset(MIRRORED)
_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def client_context(connection_kwargs: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The context redis-py's ``SSLConnection(**connection_kwargs)`` would connect with; None when a setting is
    one this module does not mirror (see module doc). An invalid one raises as redis-py would (``RedisError``,
    ``ssl.SSLError``, ``OSError`` for a missing file) when the client is built, not on the first request."""
    given = {k for k in connection_kwargs if k.startswith("ssl_")}
    if UNMIRRORED or not given <= frozenset(MIRRORED):
        return None
    opt = {name: connection_kwargs.get(name, _DEFAULTS.get(name)) for name in MIRRORED}
    cert_reqs = opt["ssl_cert_reqs"]
    if cert_reqs is None:
        cert_reqs = ssl.CERT_NONE
    elif isinstance(cert_reqs, str):
        if cert_reqs not in _CERT_REQS:
            raise RedisError(f"Invalid SSL Certificate Requirements Flag: {cert_reqs}")
        cert_reqs = _CERT_REQS[cert_reqs]
    context = ssl.create_default_context()
    context.check_hostname = bool(opt["ssl_check_hostname"]) and cert_reqs != ssl.CERT_NONE
    context.verify_mode = cert_reqs
    for flag in opt["ssl_include_verify_flags"] or ():
        context.verify_flags |= flag
    for flag in opt["ssl_exclude_verify_flags"] or ():
        context.verify_flags &= ~flag
    try:
        if opt["ssl_certfile"] or opt["ssl_keyfile"]:
            context.load_cert_chain(certfile=opt["ssl_certfile"], keyfile=opt["ssl_keyfile"],
                                    password=opt["ssl_password"])
        if opt["ssl_ca_certs"] or opt["ssl_ca_data"] or opt["ssl_ca_path"]:
            context.load_verify_locations(cafile=opt["ssl_ca_certs"], capath=opt["ssl_ca_path"],
                                          cadata=opt["ssl_ca_data"])
    except (OSError, ssl.SSLError) as e:  # a configuration error (a Secret key misspelt, a mount missing)
        named = ", ".join(k for k in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs", "ssl_ca_path") if opt[k])
        raise ValueError(f"cannot read the TLS files it names ({named}): {e.strerror or e}") from None
    if opt["ssl_min_version"] is not None:
        context.minimum_version = opt["ssl_min_version"]
    if opt["ssl_ciphers"] is not None:
        context.set_ciphers(opt["ssl_ciphers"])
    return context


__all__ = ["MIRRORED", "UNMIRRORED", "client_context"]

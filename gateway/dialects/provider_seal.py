"""Seals on the opaque reasoning values thinkgate relays to OpenAI chat clients.

An OpenAI-compatible upstream hands its client values it must get back untouched: OpenRouter's ``reasoning_details``
(a ``reasoning.text`` entry's ``signature`` over its exact text, a ``reasoning.encrypted`` entry's ``data``),
Copilot's ``reasoning_opaque``. With a record of the turn, repair restores them as relayed. Without one (the state
machine off, the records expired, the store down) thinkgate cannot tell an intact value from one a client trimmed,
re-encoded, truncated, blanked or moved to another turn, and a changed one is the upstream's 400 (``Invalid
signature in thinking block``). So every such value thinkgate relays is sealed for the tenant that received it: a
MAC over the exact value (an entry whole: a signature with the text it signs) and the origin that minted it, in an
extra key of the object the client returns (``thinkgate_seal``: in each opaque ``reasoning_details`` entry; beside
``reasoning_opaque`` in the message). The upstream's own values are never altered. Without a record, what opens is
as good as a record (``sanitize_compat``); what does not is degraded per ``GATEWAY_UNVERIFIABLE_THINKING``. The seal
never goes upstream (``unsealed``).

The key is derived from ``GATEWAY_SECRET`` (and ``GATEWAY_PREVIOUS_SECRET`` during a rotation: what it sealed still
opens); the tenant is in the MAC, so a value one tenant received does not open for another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.dialects.canonical import JSON

SEAL_KEY = "thinkgate_seal"
# (origin, a turn's message-level provider fields) -> the fields sealed for the client
Seal = Callable[[str, dict[str, JSON]], dict[str, JSON]]
_LABEL = b"thinkgate/chat/provider-seal/v1"


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def opaque_entry(d: JSON) -> bool:
    """A ``reasoning_details`` entry carrying a value only its upstream can check (the one definition: the seals and
    ``sanitize_compat`` ask it)."""
    return isinstance(d, dict) and (
        (d.get("type") == "reasoning.text" and isinstance(d.get("signature"), str) and bool(d["signature"]))
        or (d.get("type") == "reasoning.encrypted" and isinstance(d.get("data"), str) and bool(d["data"])))


def opaque_values(fields: dict[str, JSON]) -> list[str]:
    """The opaque values among a message's provider fields: each opaque entry's signature or data, and
    ``reasoning_opaque``."""
    out = [v] if isinstance(v := fields.get("reasoning_opaque"), str) and v else []
    details = fields.get("reasoning_details")
    for d in details if isinstance(details, list) else ():
        if opaque_entry(d) and isinstance(d, dict):
            out.append(str(d.get("signature") or d.get("data")))
    return out


def _without_seal(d: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in d.items() if k != SEAL_KEY}


@dataclass(frozen=True, slots=True)
class Seals:
    """One gateway's sealing keys (the current secret's first) for one tenant."""

    keys: tuple[bytes, ...]
    tenant: str

    def _mac(self, key: bytes, origin: str, bound: JSON) -> str:
        payload = orjson.dumps(bound, option=orjson.OPT_SORT_KEYS)
        raw = hmac.new(key, self.tenant.encode() + b"\0" + origin.encode() + b"\0" + payload,
                       hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def _opens(self, seal: JSON, origin: str, bound: JSON) -> bool:
        return isinstance(seal, str) and any(hmac.compare_digest(seal, self._mac(k, origin, bound)) for k in self.keys)

    def seal(self, origin: str, fields: dict[str, JSON]) -> dict[str, JSON]:
        """``fields`` (a turn's message-level provider fields, as the upstream gave them) with each opaque value
        sealed, for the client."""
        out = dict(fields)
        details = fields.get("reasoning_details")
        if isinstance(details, list):
            out["reasoning_details"] = [
                {**d, SEAL_KEY: self._mac(self.keys[0], origin, {"entry": _without_seal(d)})}
                if opaque_entry(d) and isinstance(d, dict) else d for d in details]
        opaque = fields.get("reasoning_opaque")
        if isinstance(opaque, str) and opaque:
            out[SEAL_KEY] = self._mac(self.keys[0], origin, {"opaque": opaque})
        return out

    def opens(self, origin: str, fields: dict[str, JSON]) -> bool:
        """Whether every opaque value among a client's ``fields`` is one this gateway relayed to this tenant, from
        ``origin``, exactly as relayed."""
        details = fields.get("reasoning_details")
        for d in details if isinstance(details, list) else ():
            if opaque_entry(d) and isinstance(d, dict) and not self._opens(
                    d.get(SEAL_KEY), origin, {"entry": _without_seal(d)}):
                return False
        opaque = fields.get("reasoning_opaque")
        if isinstance(opaque, str) and opaque and not self._opens(
                fields.get(SEAL_KEY), origin, {"opaque": opaque}):
            return False
        return True


NO_SEALS = Seals((), "")  # no value opens: every client opaque value is unverifiable (``sanitize.distrust``)


def seals_for(secret: str, previous: str | None, tenant: str) -> Seals:
    return Seals(tuple(_key(s) for s in (secret, previous) if s), tenant)


class Secrets(Protocol):
    @property
    def secret(self) -> str: ...
    @property
    def previous_secret(self) -> str | None: ...


def sealer(settings: Secrets, tenant: str | None) -> Seal | None:
    """What seals the values a tenant's client is handed (None: no tenant, nothing sealed)."""
    return seals_for(settings.secret, settings.previous_secret, tenant).seal if tenant is not None else None


def unsealed(fields: dict[str, JSON]) -> dict[str, JSON]:
    """``fields`` as the upstream gave them: thinkgate's seals taken out (they never go upstream)."""
    if SEAL_KEY not in fields and not any(isinstance(d, dict) and SEAL_KEY in d
                                          for d in fields.get("reasoning_details") or () if isinstance(d, dict)):
        return fields
    out = _without_seal(fields)
    details = fields.get("reasoning_details")
    if isinstance(details, list):
        out["reasoning_details"] = [_without_seal(d) if isinstance(d, dict) else d for d in details]
    return out

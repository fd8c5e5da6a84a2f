"""The sealed ``encrypted_content`` of the reasoning items thinkgate answers Responses clients with.

A reasoning item carries the canonical blocks an upstream needs back byte-exact (an Anthropic thinking block with
its signature, a redacted block, a Gemini thought, a block a ``thoughtSignature`` rides on), in their stored form
(``records.store_block``), versioned and authenticated for the tenant that received them:

    tg1.<base64url(zlib(JSON list of stored blocks))>.<base64url(HMAC-SHA256(key, tenant, payload)[:16])>

The key is derived from ``GATEWAY_SECRET`` (never the client's key, which is not kept); during a rotation content
sealed under ``GATEWAY_PREVIOUS_SECRET`` still opens. Content that another tenant received, that was altered, or
that another gateway or provider minted does not open (``Unseal`` answers None) and its item is dropped: the
turn's thinking then comes back from its record, or is degraded, never forged. The blocks are authenticated, not
encrypted: their thinking text is the client's to read anyway (the summary carries it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import zlib
from dataclasses import dataclass

import orjson

from gateway.protocols.canonical import JSON, Block
from gateway.records import load_block, store_block

VERSION = "tg1"
_LABEL = b"thinkgate/responses/reasoning-seal/v1"
_MAX_PAYLOAD = 8 << 20  # inflated bytes one item may unseal to


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def _mac(key: bytes, tenant: str, payload: bytes) -> bytes:
    return hmac.new(key, VERSION.encode() + b"\0" + tenant.encode() + b"\0" + payload, hashlib.sha256).digest()[:16]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals and opens reasoning content for one tenant (``""``: a request without a credential)."""

    tenant: str
    keys: tuple[bytes, ...]  # the current secret's first

    def seal(self, blocks: list[Block]) -> str:
        return self.seal_stored([store_block(b) for b in blocks])

    def seal_stored(self, blocks: list[dict[str, JSON]]) -> str:
        """Blocks in their stored form (a stream's accumulated block dicts are in it already)."""
        payload = zlib.compress(orjson.dumps(blocks))
        return f"{VERSION}.{_b64(payload)}.{_b64(_mac(self.keys[0], self.tenant, payload))}"

    def unseal(self, token: str) -> list[Block] | None:
        version, _, rest = token.partition(".")
        body, _, tag = rest.partition(".")
        if version != VERSION or not body or not tag:
            return None
        try:
            payload, mac = _unb64(body), _unb64(tag)
        except (binascii.Error, ValueError):
            return None
        if not any(hmac.compare_digest(mac, _mac(k, self.tenant, payload)) for k in self.keys):
            return None
        try:
            inflater = zlib.decompressobj()
            raw = inflater.decompress(payload, _MAX_PAYLOAD)
            blocks = orjson.loads(raw)
        except (zlib.error, orjson.JSONDecodeError):
            return None
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            return None
        return [load_block(b) for b in blocks]


def sealer(secret: str, tenant: str | None, previous_secret: str | None = None) -> Sealer:
    return Sealer(tenant or "", (_key(secret),) + ((_key(previous_secret),) if previous_secret else ()))

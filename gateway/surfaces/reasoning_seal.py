"""The sealed ``encrypted_content`` of the reasoning items thinkgate answers Responses clients with.

A reasoning item carries the canonical blocks an upstream needs back byte-exact (an Anthropic thinking block with
its signature, a redacted block, a Gemini thought, a block a ``thoughtSignature`` rides on), in their stored form
(``records.store_block``), versioned and authenticated for the tenant that received them:

    tg1.<base64url(zlib(JSON list of stored blocks))>.<base64url(HMAC-SHA256(key, tenant, payload)[:16])>

A turn's message-level reasoning fields (``ProviderFields``: OpenRouter ``reasoning_details``, Copilot
``reasoning_opaque`` / ``reasoning_text``, DeepSeek ``reasoning_content``, with the origin that minted them) do not fit
a list of blocks; content that carries them is ``tg2``, whose payload is a JSON object
``{"blocks": [...], "provider": {"origin", "fields"}}`` (``records.store_fields``), sealed the same way (the version is
in the MAC, so neither form opens as the other). Content without such fields is still minted ``tg1`` (a replica of the
previous release opens it during a rolling upgrade), and every ``tg1`` blob minted before opens as it did.

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
from typing import NamedTuple

import orjson

from gateway.dialects.canonical import Block, ProviderFields
from gateway.pipeline.repair.records import load_block, load_fields, store_block, store_fields

VERSION = "tg1"  # payload: a JSON list of stored blocks
FIELDS_VERSION = "tg2"  # payload: {"blocks": [...], "provider": {"origin", "fields"}}
_LABEL = b"thinkgate/responses/reasoning-seal/v1"
_MAX_PAYLOAD = 8 << 20  # inflated bytes one item may unseal to


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def _mac(key: bytes, version: str, tenant: str, payload: bytes) -> bytes:
    return hmac.new(key, version.encode() + b"\0" + tenant.encode() + b"\0" + payload, hashlib.sha256).digest()[:16]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Opened(NamedTuple):
    """What sealed content holds: blocks, and the message-level reasoning fields of their turn (``tg2`` only)."""

    blocks: list[Block]
    provider: ProviderFields | None = None


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals and opens reasoning content for one tenant (``""``: a request without a credential)."""

    tenant: str
    keys: tuple[bytes, ...]  # the current secret's first

    def seal(self, blocks: list[Block], provider: ProviderFields | None = None) -> str:
        """Blocks, and a turn's message-level fields (None: none), sealed in their stored form
        (``records.store_block``, ``records.store_fields``)."""
        stored = [store_block(b) for b in blocks]
        version, content = (FIELDS_VERSION, {"blocks": stored, "provider": store_fields(provider)}) if provider \
            else (VERSION, stored)
        payload = zlib.compress(orjson.dumps(content))
        return f"{version}.{_b64(payload)}.{_b64(_mac(self.keys[0], version, self.tenant, payload))}"

    def unseal(self, token: str) -> Opened | None:
        version, _, rest = token.partition(".")
        body, _, tag = rest.partition(".")
        if version not in (VERSION, FIELDS_VERSION) or not body or not tag:
            return None
        try:
            payload, mac = _unb64(body), _unb64(tag)
        except (binascii.Error, ValueError):
            return None
        if not any(hmac.compare_digest(mac, _mac(k, version, self.tenant, payload)) for k in self.keys):
            return None
        try:
            inflater = zlib.decompressobj()
            content = orjson.loads(inflater.decompress(payload, _MAX_PAYLOAD))
        except (zlib.error, orjson.JSONDecodeError):
            return None
        provider = None
        if version == FIELDS_VERSION:
            if not isinstance(content, dict) or (provider := load_fields(content.get("provider"))) is None:
                return None
            content = content.get("blocks")
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            return None
        return Opened([load_block(b) for b in content], provider)


def sealer(secret: str, tenant: str | None, previous_secret: str | None = None) -> Sealer:
    return Sealer(tenant or "", (_key(secret),) + ((_key(previous_secret),) if previous_secret else ()))

"""Gateway keys as clients hold them: ``tgk_<id>_<secret>``, a 12-hex-digit id (public: it names the key's record)
and 256 random bits. Only the secret's SHA-256 is stored; a presented key is hashed and the store compares the
hashes (``state.scripts.ADMIT``), so a wrong secret costs what a right one does."""

from __future__ import annotations

import hashlib
import re
import secrets

PREFIX = "tgk_"
_KEY_RE = re.compile(r"tgk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


def new_key() -> tuple[str, str, str]:
    """(key id, secret hash, the key as the client gets it: shown once, never stored)."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return key_id, secret_hash(secret), f"{PREFIX}{key_id}_{secret}"


def parse(credential: str) -> tuple[str, str] | None:
    """(key id, secret hash) of a gateway key; None: the credential is not one (a client's upstream key)."""
    if not credential.startswith(PREFIX):
        return None
    m = _KEY_RE.fullmatch(credential)
    return (m[1], secret_hash(m[2])) if m else ("", "")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()

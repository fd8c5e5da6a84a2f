"""Gateway keys as stored: the record of a key (its name, the hash of its secret, allowed models, limits, expiry,
revocation), and what the store's scripts answer about one (``state.scripts``: KEY_PUT, KEY_READ, ADMIT, RELEASE;
keys in ``state.keys``). A key's secret is never stored: only its SHA-256 (the secret is 256 random bits)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

FIELDS = ("name", "hash", "models", "rpm", "tpm", "concurrency", "budget_usd", "expires", "revoked", "created")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One gateway key. ``models``: comma-separated name patterns (``fnmatch``; empty: every model); ``rpm``,
    ``tpm``, ``concurrency``: 0 is no limit; ``expires``: ms since the epoch, 0 for never."""

    key_id: str
    name: str
    hash: str
    models: str = ""
    rpm: int = 0
    tpm: int = 0
    concurrency: int = 0
    budget_usd: str = ""
    expires: int = 0
    revoked: bool = False
    created: int = 0

    def fields(self) -> dict[str, str]:
        """The record as the store keeps it (every value a string)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "key_id"}
        return {k: ("1" if v else "0") if isinstance(v, bool) else str(v) for k, v in out.items()}

    @classmethod
    def parse(cls, key_id: str, raw: dict[str, str]) -> KeyRecord:
        def number(name: str) -> int:
            try:
                return int(raw.get(name) or 0)
            except ValueError:
                return 0
        return cls(key_id, raw.get("name", ""), raw.get("hash", ""), raw.get("models", ""), number("rpm"),
                   number("tpm"), number("concurrency"), raw.get("budget_usd", ""), number("expires"),
                   raw.get("revoked") == "1", number("created"))


@dataclass(frozen=True, slots=True)
class Admission:
    """What ADMIT answered: ``status`` ok, unknown, revoked, expired, rpm, tpm or concurrency; for ok, the key's
    name and models and whether a concurrency slot was taken; for a limit, how long to wait (ms)."""

    status: str
    name: str = ""
    models: str = ""
    held: bool = False
    retry_ms: int = 0

    @classmethod
    def parse(cls, reply: list[Any]) -> Admission:
        status = _text(reply[0]) if reply else "unknown"
        if status == "ok":
            return cls(status, _text(reply[1]), _text(reply[2]), bool(int(reply[3])))
        return cls(status, retry_ms=int(reply[1]) if len(reply) > 1 else 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pairs(flat: list[Any]) -> dict[str, str]:
    """A flat HGETALL reply as a dict of strings."""
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}

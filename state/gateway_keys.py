"""Gateway keys as stored: the record of a key (its name, the hash of its secret, allowed models, limits, expiry,
revocation), and what the store's scripts answer about one (``state.scripts``: KEY_PUT, KEY_READ, ADMIT, RELEASE;
keys in ``state.keys``). A key's secret is never stored: only its SHA-256 (the secret is 256 random bits)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

FIELDS = ("name", "hash", "models", "rpm", "tpm", "concurrency", "budget_usd", "budget_micros", "budget_period",
          "expires", "revoked", "created")
PERIODS = ("day", "week", "month")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One gateway key. ``models``: comma-separated name patterns (``fnmatch``; empty: every model); ``rpm``,
    ``tpm``, ``concurrency``: 0 is no limit; ``budget_micros`` (0: none) per ``budget_period`` (day, week or
    month, UTC); ``budget_usd`` as it was given; ``expires``: ms since the epoch, 0 for never."""

    key_id: str
    name: str
    hash: str
    models: str = ""
    rpm: int = 0
    tpm: int = 0
    concurrency: int = 0
    budget_usd: str = ""
    budget_micros: int = 0
    budget_period: str = "month"
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
                   number("tpm"), number("concurrency"), raw.get("budget_usd", ""), number("budget_micros"),
                   raw.get("budget_period") or "month", number("expires"), raw.get("revoked") == "1",
                   number("created"))


@dataclass(frozen=True, slots=True)
class Admission:
    """What ADMIT answered: ``status`` ok, unknown, revoked, expired, rpm, tpm, concurrency or budget; for ok, the
    key's name and models and whether a concurrency slot was taken; for a limit, how long to wait (ms) and the
    limit (0: not reported)."""

    status: str
    name: str = ""
    models: str = ""
    held: bool = False
    retry_ms: int = 0
    limit: int = 0

    @classmethod
    def parse(cls, reply: list[Any]) -> Admission:
        status = _text(reply[0]) if reply else "unknown"
        if len(reply) == 4:  # ok, or unknown parsed alike (a wrong secret is answered no sooner than a right one)
            name, models, held = _text(reply[1]), _text(reply[2]), bool(int(reply[3]))
            return cls(status, name, models, held) if status == "ok" else cls(status)
        return cls(status, retry_ms=int(reply[1]) if len(reply) > 1 else 0,
                   limit=int(reply[2]) if len(reply) > 2 else 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pairs(flat: list[Any]) -> dict[str, str]:
    """A flat HGETALL reply as a dict of strings."""
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


@dataclass(frozen=True, slots=True)
class Periods:
    """The UTC day, ISO week and month a moment falls in (the spend counters' names) and the ms until each ends."""

    day: str
    week: str
    month: str
    day_left_ms: int
    week_left_ms: int
    month_left_ms: int

    @classmethod
    def at(cls, now_ms: int) -> Periods:
        now = datetime.fromtimestamp(now_ms / 1000, UTC)
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        next_day = day + timedelta(days=1)
        next_week = day + timedelta(days=7 - day.weekday())
        next_month = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
        iso = now.isocalendar()

        def left(end: datetime) -> int:
            return max(1, int((end - now).total_seconds() * 1000))
        return cls(f"d{now:%Y%m%d}", f"w{iso.year}{iso.week:02d}", f"m{now:%Y%m}", left(next_day), left(next_week),
                   left(next_month))

"""The admin API over gateway keys (``/admin/keys``, behind ``GATEWAY_ADMIN_TOKEN``) and what ``thinkgate keys``
runs: create (the key is shown once, in the answer), list, update limits, revoke. Every action is one audit log line
(``thinkgate.audit``: the action, the key's name and id, never the key). Keys live in the store (Redis: every
replica sees a change at its next request; a revoked key is refused from then on)."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.access import admission
from gateway.errors import ClientError, bad_request
from state.gateway_keys import KeyRecord
from state.store import Store

audit = logging.getLogger("thinkgate.audit")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_PERIODS = {"day": 86_400_000, "week": 7 * 86_400_000, "month": 30 * 86_400_000}
LIMITS = ("models", "rpm", "tpm", "concurrency", "budget_usd", "expires_in_days")


def _limits(spec: dict[str, Any]) -> dict[str, Any]:
    """The limit fields of a create or update body, checked (a 400 names the first wrong one)."""
    out: dict[str, Any] = {}
    for name, value in spec.items():
        if name not in LIMITS:
            raise bad_request(f"{name}: unknown field (one of name, {', '.join(LIMITS)})")
        if name == "models":
            models = value if isinstance(value, list) else str(value).split(",")
            if not all(isinstance(m, str) and m.strip() and "," not in m for m in models):
                raise bad_request("models: a list of model name patterns")
            out["models"] = ",".join(m.strip() for m in models)
        elif name == "budget_usd":
            budget = re.fullmatch(r"(\d+(?:\.\d+)?)(?:/(day|week|month))?", str(value))
            if not budget:
                raise bad_request("budget_usd: an amount, optionally per day, week or month (50/month; 0: none)")
            out.update(budget_usd=str(value), budget_micros=round(float(budget[1]) * 1e6),
                       budget_period=budget[2] or "month")
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad_request(f"{name}: a whole number, 0 or more")
            if name == "expires_in_days":
                out["expires"] = int(time.time() * 1000) + value * 86_400_000 if value else 0
            else:
                out[name] = value
    return out


def shown(record: KeyRecord) -> dict[str, Any]:
    """A key's record as the API shows it: everything but the secret's hash."""
    out = asdict(record)
    del out["hash"]
    out["models"] = [m for m in record.models.split(",") if m]
    return out


async def create(store: Store, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(name := body.get("name"), str) or not NAME_RE.fullmatch(name):
        raise bad_request("name: 1-64 letters, digits and ._@- (starting with a letter or digit)")
    limits = _limits({k: v for k, v in body.items() if k != "name"})
    key_id, digest, key = admission.new_key()
    record = KeyRecord(key_id, name, digest, created=int(time.time() * 1000), **limits)
    if await store.key_put(record, create=True) == "exists":
        raise ClientError(409, f"a key named {name} exists", "invalid_request_error")
    audit.info("key created: %s (%s)", name, key_id)
    return {**shown(record), "key": key}


async def find(store: Store, name: str) -> KeyRecord:
    record = next((r for r in await store.key_records() if r.name == name), None)
    if record is None:
        raise ClientError(404, f"no key named {name[:64]}", "not_found_error")
    return record


async def update(store: Store, name: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the body is a JSON object of limits")
    record = replace(await find(store, name), **_limits(body))
    if await store.key_put(record, create=False) != "ok":
        raise ClientError(404, f"no key named {name[:64]}", "not_found_error")
    audit.info("key updated: %s (%s): %s", name, record.key_id, ", ".join(sorted(body)))
    return shown(record)


async def revoke(store: Store, name: str) -> dict[str, Any]:
    record = replace(await find(store, name), revoked=True)
    if await store.key_put(record, create=False) != "ok":
        raise ClientError(404, f"no key named {name[:64]}", "not_found_error")
    audit.info("key revoked: %s (%s)", name, record.key_id)
    return shown(record)


async def listed(store: Store) -> list[dict[str, Any]]:
    return [shown(r) for r in await store.key_records()]


async def usage(store: Store, days: int, name: str | None = None) -> dict[str, Any]:
    """Each key's usage of the last ``days`` UTC days (today included), by day and model: its tokens by kind and
    what they cost (``cost_usd``)."""
    if not 1 <= days <= 31:
        raise bad_request("days: 1 to 31")
    records = [r for r in await store.key_records() if name is None or r.name == name]
    today = datetime.now(UTC).date()
    wanted = [(today - timedelta(days=n)).strftime("%Y%m%d") for n in range(days)]
    found = await store.key_usage([r.key_id for r in records], wanted)
    out: dict[str, Any] = {}
    for r in records:
        by_day: dict[str, Any] = {}
        for day, fields in sorted(found.get(r.key_id, {}).items()):
            models: dict[str, dict[str, float]] = {}
            for field, n in fields.items():
                model, _, kind = field.rpartition(" ")
                models.setdefault(model, {})["cost_usd" if kind == "cost" else kind] = n / 1e6 if kind == "cost" else n
            by_day[f"{day[:4]}-{day[4:6]}-{day[6:]}"] = models
        out[r.name] = by_day
    return {"days": days, "usage": out}

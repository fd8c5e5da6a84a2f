"""The embedded in-process store (the default when no Redis URL is configured).

It runs the very same engine as ``RedisStore`` over a tiny Redis-like keyspace: strings, hashes and
lists with per-key expiry, and Python twins of the Lua scripts in ``state.scripts`` (same arguments,
same replies). Only one process sees it; replicas of the gateway need Redis.

TTL uses a monotonic clock (injectable for tests). Every key gets the same TTL and is moved to the end
of an ordered dict whenever its TTL is set, so the front always holds the next key to expire: expired
keys are swept from the front on every call in O(expired). ``max_keys`` bounds memory: past it, the
keys closest to expiry are evicted first (like Redis ``volatile-ttl``).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from state import keys, records
from state.convcache import DEFAULT_MAX_BYTES
from state.engine import NO_LIMITS, EngineStore, Eval, Exists, Op, SetEx, StorageLimits
from state.scripts import (
    ADMIT,
    FORK,
    GETEX_MANY,
    INDEX_PUT,
    KEY_PUT,
    KEY_READ,
    LOAD,
    RECORD,
    RELEASE,
    TENANT_BYTES,
    TENANT_TOTAL,
)
from state.store import StoreHealth


def _str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Keyspace:
    def __init__(self, clock: Callable[[], float], max_keys: int | None) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._data: OrderedDict[str, list[Any]] = OrderedDict()  # key -> [value, expires_at]

    def __len__(self) -> int:
        return len(self._data)

    def sweep(self) -> None:
        now = self._clock()
        while self._data:
            key, (_, expires_at) = next(iter(self._data.items()))
            if expires_at > now:
                break
            del self._data[key]
        if self._max_keys is not None:
            while len(self._data) > self._max_keys:
                self._data.popitem(last=False)

    def get(self, key: str) -> Any:
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._data[key]
            return None
        return entry[0]

    def put(self, key: str, value: Any, ttl: float | None = None) -> None:
        self._data[key] = [value, math.inf if ttl is None else self._clock() + ttl]
        self._data.move_to_end(key)

    def update(self, key: str, value: Any) -> None:
        """A live key's new value, its expiry unchanged."""
        self._data[key][0] = value

    def expire(self, key: str, ttl: float) -> None:
        if self.get(key) is not None:
            self._data[key][1] = self._clock() + ttl
            self._data.move_to_end(key)

    def delete(self, *names: str) -> None:
        for key in names:
            self._data.pop(key, None)


class MemoryStore(EngineStore):
    """In-process ``Store``; same semantics and contract as ``RedisStore``."""

    backend = "memory"

    def __init__(self, *, ttl_seconds: int = keys.DEFAULT_TTL_SECONDS,
                 max_turns: int = keys.DEFAULT_MAX_TURNS, max_fetch: int = 2,
                 max_keys: int | None = 1_000_000, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, load_cache_bytes: int = DEFAULT_MAX_BYTES,
                 decoded_turns: int = records.DEFAULT_TURN_CACHE_ENTRIES,
                 limits: StorageLimits = NO_LIMITS) -> None:
        super().__init__(ttl_seconds=ttl_seconds, max_turns=max_turns, max_fetch=max_fetch,
                         wall_clock=wall_clock, load_cache_bytes=load_cache_bytes, decoded_turns=decoded_turns,
                         limits=limits, clock=clock)
        self._ks = _Keyspace(clock, max_keys)
        self.round_trips = 0

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def health(self) -> StoreHealth:
        return StoreHealth(ok=True, backend=self.backend, circuit="closed", detail=f"{len(self._ks)} keys")

    async def _roundtrip(self, ops: Sequence[Op]) -> list[Any]:
        self.round_trips += 1
        self._ks.sweep()
        out: list[Any] = []
        for op in ops:
            if isinstance(op, SetEx):
                self._ks.put(op.key, op.value, op.ttl)
                out.append(True)
            elif isinstance(op, Exists):
                out.append(int(self._ks.get(op.key) is not None))
            else:
                out.append(self._eval(op))
        self._ks.sweep()
        return out

    def _eval(self, op: Eval) -> Any:
        if op.script is RECORD:
            return self._record_script(op.keys, op.args)
        if op.script is FORK:
            return self._fork_script(op.keys, op.args)
        if op.script is LOAD:
            return self._load_script(op.keys, op.args)
        if op.script is GETEX_MANY:
            return self._getex_many_script(op.keys, int(op.args[0]))
        if op.script is INDEX_PUT:
            return self._index_put_script(op.keys, op.args)
        if op.script is TENANT_TOTAL:
            found = self._ks.get(op.keys[0])
            return int(found) if found is not None else 0
        if op.script is TENANT_BYTES:
            key, amount, ttl = op.keys[0], int(op.args[0]), int(op.args[1])
            old = self._ks.get(key)
            if old is None:
                self._ks.put(key, amount, ttl)  # a new window
                return amount
            self._ks.update(key, old + amount)  # (its expiry unchanged)
            return old + amount
        if op.script is KEY_PUT:
            return self._key_put_script(op.keys, [_str(a) for a in op.args])
        if op.script is KEY_READ:
            names = self._ks.get(op.keys[0]) or {}
            return [[x for kv in names.items() for x in kv],
                    *([x for kv in (self._ks.get(k) or {}).items() for x in kv] for k in op.keys[1:])]
        if op.script is ADMIT:
            return self._admit_script(op.keys, _str(op.args[0]), [int(a) for a in op.args[1:]])
        if op.script is RELEASE:
            return self._release_script(op.keys, [_str(a) for a in op.args])
        raise ValueError(f"unknown script {op.script.name}")

    def _key_put_script(self, names: Sequence[str], args: list[str]) -> str:
        mode, name, key_id = args[:3]
        index = self._ks.get(names[0])
        index = dict(index) if index is not None else {}
        if mode == "create":
            if name in index:
                return "exists"
            index[name] = key_id
            self._ks.put(names[0], index)
        elif index.get(name) != key_id:
            return "missing"
        record = dict(self._ks.get(names[1]) or {})
        record.update(zip(args[3::2], args[4::2], strict=True))
        self._ks.put(names[1], record)
        return "ok"

    def _admit_script(self, names: Sequence[str], secret_hash: str, args: list[int]) -> list[Any]:
        """The ADMIT script's twin (``state.scripts``): a wrong secret goes the right one's way up to the first
        write."""
        now = args[0]
        rec = self._ks.get(names[0]) or {}
        wrong = rec.get("hash") != secret_hash
        verdict = self._admit_verdict(names, rec, now, args)
        if wrong:
            return ["unknown", "", "", 0]
        if isinstance(verdict, list):
            return verdict
        cc = int(rec.get("concurrency") or 0)
        if cc > 0:
            held = int(self._ks.get(names[2]) or 0) + 1
            if held > cc:
                return ["concurrency", 1000, cc]
            self._ks.put(names[2], held, 600)
        if verdict is not None:
            self._ks.put(names[1], round(verdict, 3), 60)
        return ["ok", rec.get("name", ""), rec.get("models", ""), int(cc > 0)]

    def _admit_verdict(self, names: Sequence[str], rec: dict[str, str], now: int,
                       args: list[int]) -> list[Any] | float | None:
        """ADMIT's reads: a refusal, or the rate's next theoretical arrival time to write (None: no rpm limit)."""
        if rec.get("revoked") == "1":
            return ["revoked"]
        expires = int(rec.get("expires") or 0)
        if expires > 0 and now >= expires:
            return ["expired"]
        budget = int(rec.get("budget_micros") or 0)
        at = {"day": 4, "week": 5}.get(rec.get("budget_period", ""), 6)
        if budget > 0 and int(self._ks.get(names[at]) or 0) >= budget:
            return ["budget", args[at - 3]]
        tpm = int(rec.get("tpm") or 0)
        if tpm > 0 and int(self._ks.get(names[3]) or 0) >= tpm:
            return ["tpm", 60000 - now % 60000, tpm]
        rpm = int(rec.get("rpm") or 0)
        if rpm <= 0:
            return None
        step = 60000 / rpm
        tat = max(float(self._ks.get(names[1]) or 0), now)
        if tat - now > 60000 - step:
            return ["rpm", math.ceil(tat - now - (60000 - step)), rpm]
        return tat + step

    def _release_script(self, names: Sequence[str], args: list[str]) -> int:
        held, tokens, cost = args[0] == "1", int(args[1]), int(args[2])
        if held:
            self._ks.put(names[0], max(0, int(self._ks.get(names[0]) or 0) - 1), 600)
        if tokens > 0:
            self._ks.put(names[1], int(self._ks.get(names[1]) or 0) + tokens, 120)
        if cost > 0:
            for name, keep in zip(names[2:5], (2 * 86400, 8 * 86400, 32 * 86400), strict=True):
                self._ks.put(name, int(self._ks.get(name) or 0) + cost, keep)
        if len(args) > 3:
            usage = dict(self._ks.get(names[5]) or {})
            for field, amount in zip(args[3::2], args[4::2], strict=True):
                usage[field] = str(int(usage.get(field, 0)) + int(amount))
            self._ks.put(names[5], usage, 40 * 86400)
        return 1

    def _touch(self, names: Sequence[str], ttl: int) -> None:
        for key in names:
            self._ks.expire(key, ttl)

    def _lists(self, names: Sequence[str]) -> tuple[list[Any], list[Any]]:
        turns, tids = self._ks.get(names[1]), self._ks.get(names[2])
        if turns is None:
            turns = []
            self._ks.put(names[1], turns)
        if tids is None:
            tids = []
            self._ks.put(names[2], tids)
        return turns, tids

    # Python twin of scripts.GETEX_MANY
    def _getex_many_script(self, names: Sequence[str], ttl: int) -> list[Any]:
        out = []
        for key in names:
            value = self._ks.get(key)
            if value is not None:
                self._ks.expire(key, ttl)
            out.append(value if isinstance(value, bytes) else None)
        return out

    # Python twin of scripts.INDEX_PUT
    def _index_put_script(self, names: Sequence[str], args: Sequence[Any]) -> int:
        ttl, marker, n = int(args[0]), args[1], 0
        for i, key in enumerate(names):
            value, ident = args[2 + 2 * i], args[3 + 2 * i]
            old = self._ks.get(key)
            if isinstance(old, bytes) and old != value and (old == marker or ident not in old):
                value = marker
                n += 1
            self._ks.put(key, value, ttl)
        return n

    # Python twin of scripts.LOAD
    def _load_script(self, names: Sequence[str], args: Sequence[Any]) -> Any:
        ttl, created, known, tid = args
        meta = self._ks.get(names[0])
        if meta is None:
            return None
        flat = [item for kv in meta.items() for item in kv]
        turns = self._ks.get(names[1]) or []
        index = 0
        if created != "" and known != "" and str(meta["created"]) == str(created):
            start, nxt, k = int(meta["start"]), int(meta["next"]), int(known)
            tids = self._ks.get(names[2]) or []
            if start < k <= nxt and k - 1 - nxt >= -len(tids) and tids[k - 1 - nxt] == tid:
                index = k - start
        self._touch(names, int(ttl))
        return [flat, list(turns[index:]), index]

    # Python twin of scripts.RECORD
    def _record_script(self, names: Sequence[str], args: Sequence[Any]) -> Any:
        tid, blob, expected, now, ttl, maxn, pair, fork = args
        meta = self._ks.get(names[0])
        created = 0
        if meta is None:
            created = 1
            start = nxt = 0 if expected == "" else int(expected)
            self._ks.delete(names[1], names[2])
            meta = {"created": now, "updated": now, "version": 0, "start": start, "next": nxt}
            self._ks.put(names[0], meta)
        start, nxt, version = int(meta["start"]), int(meta["next"]), int(meta["version"])
        turns, tids = self._lists(names)
        if expected == "":
            idx = next((i for i in range(len(tids) - 1, -1, -1) if tids[i] == tid), None)
            if idx is not None:
                self._touch(names, ttl)
                return [b"dup", start + idx, version, created]
            pos = nxt
        else:
            pos = int(expected)
            if pos < nxt or (fork == "1" and not created):
                held = tids[pos - start] if start <= pos and pos - start < len(tids) else None
                if held == tid:
                    self._touch(names, ttl)
                    return [b"dup", pos, version, created]
                if held == b"" and fork != "1":  # a gap received now (see scripts.RECORD)
                    turns[pos - start], tids[pos - start] = blob, tid
                    inc = max(int(now), int(meta["created"]) + 1)
                    version += 1
                    meta.update(updated=now, version=version, created=inc)
                    self._touch(names, ttl)
                    return [b"filled", pos, version, created, start, inc, nxt]
                n = max(pos - start, 0)
                self._touch(names, ttl)
                return [b"conflict", pos, version, created, start, list(turns[:n]), list(tids[:n])]
            if pos > nxt:
                if pos - nxt >= maxn:
                    turns.clear()
                    tids.clear()
                    start = pos
                else:
                    turns.extend([b""] * (pos - nxt))
                    tids.extend([b""] * (pos - nxt))
        turns.append(blob)
        tids.append(tid)
        if len(tids) > maxn:
            excess = len(tids) - maxn
            del turns[:excess], tids[:excess]
            start += excess
        version += 1
        meta.update(updated=now, version=version, start=start, next=pos + 1)
        if pair:
            meta["pair"] = pair
        self._touch(names, ttl)
        return [b"ok", pos, version, created, start, meta["created"]]

    # Python twin of scripts.FORK
    def _fork_script(self, names: Sequence[str], args: Sequence[Any]) -> Any:
        now, ttl, maxn, start, pair, parent, tid, blob, n = args[:9]
        n, start = int(n), int(start)
        blobs, tids_in = list(args[9:9 + n]), list(args[9 + n:9 + 2 * n])
        meta = self._ks.get(names[0])
        if meta is not None:
            tids = self._ks.get(names[2]) or []
            idx = next((i for i in range(len(tids) - 1, -1, -1) if tids[i] == tid), None)
            self._touch(names, ttl)
            pos = start + n if idx is None else int(meta["start"]) + idx
            return [b"dup", pos, int(meta["version"])]
        turns, tids = [*blobs, blob], [*tids_in, tid]
        pos = start + n
        if len(tids) > maxn:
            excess = len(tids) - maxn
            del turns[:excess], tids[:excess]
            start += excess
        meta = {"created": now, "updated": now, "version": 1, "start": start, "next": pos + 1,
                "parent": parent, "forked_at": pos}
        if pair:
            meta["pair"] = pair
        self._ks.put(names[0], meta)
        self._ks.put(names[1], turns)
        self._ks.put(names[2], tids)
        self._touch(names, ttl)
        return [b"ok", pos, 1]

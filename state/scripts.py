"""Lua scripts, as named constants. Each touches only KEYS/ARGV, and all KEYS of one call share a hash
tag on Redis Cluster: one conversation's ``(meta, turns, tids)`` (``state.keys.ConversationKeys``) or one index
bucket (on a single node one call takes a request's index keys of every bucket: ``EngineStore.one_slot_per_script``).

No ``cmsgpack``/``cjson`` inside Lua: values the scripts store are opaque bytes encoded in Python.
``state.memory_store`` implements exactly the same semantics in Python; the contract tests hold
both to them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LuaScript:
    name: str
    source: str
    sha: str = field(init=False)  # what EVALSHA names it by, computed once (used on every call)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


_TOUCH = """
local function touch(ttl)
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
end
"""

# RECORD: append one turn, idempotently.
# ARGV: turn_id, blob, expected_position ('' = append at the end), now_ms, ttl_s, max_turns,
#       pair blob ('' = keep the previous last verified pair), fork ('1' = the caller knows the client's
#       path left this conversation's: never append, unless the conversation does not exist yet)
# Reply: {'ok', position, version, created(0/1), start, meta's created}  (start after any trim: what a
#        worker that knew the conversation up to position needs to know it up to the new turn)
#        {'dup', position, version, created(0/1)}
#        {'conflict', position, version, created, start, {prefix blobs}, {prefix turn ids}}
#   'filled' = expected_position was a gap (never received): the turn fills it, the conversation's incarnation
#   ('created') moves on, reply {'filled', pos, version, 0, start, created, next};
#   'conflict' = another turn already holds expected_position (the client edited history), or fork was
#   asked for and this turn is not already at expected_position: nothing is written and the retained
#   prefix [start, expected_position) comes back so the caller can FORK.
RECORD = LuaScript("record", _TOUCH + """
local tid, blob, expected = ARGV[1], ARGV[2], ARGV[3]
local now, ttl, maxn = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local start, nxt, version, created = 0, 0, 0, 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  created = 1
  if expected ~= '' then start = tonumber(expected); nxt = start end
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'created', now, 'updated', now, 'version', 0, 'start', start, 'next', nxt)
else
  local m = redis.call('HMGET', KEYS[1], 'start', 'next', 'version')
  start, nxt, version = tonumber(m[1]), tonumber(m[2]), tonumber(m[3])
end
local pos
if expected == '' then
  local idx = redis.call('LPOS', KEYS[3], tid, 'RANK', -1)
  if idx then
    touch(ttl)
    return {'dup', start + idx, version, created}
  end
  pos = nxt
else
  pos = tonumber(expected)
  if pos < nxt or (ARGV[8] == '1' and created == 0) then
    local held = pos >= start and redis.call('LINDEX', KEYS[3], pos - start)
    if held == tid then
      touch(ttl)
      return {'dup', pos, version, created}
    end
    if held == '' and ARGV[8] ~= '1' then
      -- a gap (a position the store never received) received now, filled in place: history below the head
      -- changed, so the conversation becomes a new incarnation ('created' moves on) and every cached copy reloads
      redis.call('LSET', KEYS[2], pos - start, blob)
      redis.call('LSET', KEYS[3], pos - start, tid)
      local was = tonumber(redis.call('HGET', KEYS[1], 'created'))
      local inc = tonumber(now)
      if inc <= was then inc = was + 1 end
      version = version + 1
      redis.call('HSET', KEYS[1], 'updated', now, 'version', version, 'created', inc)
      touch(ttl)
      return {'filled', pos, version, created, start, inc, nxt}
    end
    local blobs, tids = {}, {}
    if pos > start then
      blobs = redis.call('LRANGE', KEYS[2], 0, pos - start - 1)
      tids = redis.call('LRANGE', KEYS[3], 0, pos - start - 1)
    end
    touch(ttl)
    return {'conflict', pos, version, created, start, blobs, tids}
  end
  if pos > nxt then
    if pos - nxt >= maxn then
      redis.call('DEL', KEYS[2], KEYS[3])
      start = pos
    else
      for _ = 1, pos - nxt do
        redis.call('RPUSH', KEYS[2], '')
        redis.call('RPUSH', KEYS[3], '')
      end
    end
  end
end
redis.call('RPUSH', KEYS[2], blob)
local len = redis.call('RPUSH', KEYS[3], tid)
if len > maxn then
  redis.call('LTRIM', KEYS[2], len - maxn, -1)
  redis.call('LTRIM', KEYS[3], len - maxn, -1)
  start = start + len - maxn
end
version = version + 1
redis.call('HSET', KEYS[1], 'updated', now, 'version', version, 'start', start, 'next', pos + 1)
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'pair', ARGV[7]) end
touch(ttl)
return {'ok', pos, version, created, start, redis.call('HGET', KEYS[1], 'created')}
""")

# FORK: create the fork of a conversation (new keys) = retained prefix + the new turn, idempotently.
# ARGV: now_ms, ttl_s, max_turns, start, pair blob ('' = none), parent scid, turn_id, blob, n,
#       then n prefix blobs, then n prefix turn ids
# Reply: {'ok'|'dup', position, version}
FORK = LuaScript("fork", _TOUCH + """
local now, ttl, maxn, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tid, blob, n = ARGV[7], ARGV[8], tonumber(ARGV[9])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local m = redis.call('HMGET', KEYS[1], 'start', 'version')
  local idx = redis.call('LPOS', KEYS[3], tid, 'RANK', -1)
  touch(ttl)
  local pos = start + n
  if idx then pos = tonumber(m[1]) + idx end
  return {'dup', pos, tonumber(m[2])}
end
redis.call('DEL', KEYS[2], KEYS[3])
local i = 1
while i <= n do
  local j = math.min(i + 999, n)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 9 + i, 9 + j))
  redis.call('RPUSH', KEYS[3], unpack(ARGV, 9 + n + i, 9 + n + j))
  i = j + 1
end
redis.call('RPUSH', KEYS[2], blob)
local len = redis.call('RPUSH', KEYS[3], tid)
local pos = start + n
if len > maxn then
  redis.call('LTRIM', KEYS[2], len - maxn, -1)
  redis.call('LTRIM', KEYS[3], len - maxn, -1)
  start = start + len - maxn
end
redis.call('HSET', KEYS[1], 'created', now, 'updated', now, 'version', 1, 'start', start,
  'next', pos + 1, 'parent', ARGV[6], 'forked_at', pos)
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'pair', ARGV[5]) end
touch(ttl)
return {'ok', pos, 1}
""")

# LOAD: read one conversation atomically (meta + turns) and refresh its TTL.
# ARGV: ttl_s, known created, known next, known turn id at next - 1 (the last three '' = nothing known;
#       see state.convcache: what the caller already holds of this conversation)
# Reply: nil when absent, else {flat meta hash, {turn blobs}, list index of the first blob returned}.
#   The blobs from list index (known next - start) on, when meta's created is the known one,
#   start < known next <= next and the tids list holds the known turn id at known next - 1 (turns at a
#   position never change within one created); else the whole list (index 0).
LOAD = LuaScript("load", _TOUCH + """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local meta = redis.call('HGETALL', KEYS[1])
local from, known = 0, tonumber(ARGV[3])
if known and ARGV[2] ~= '' then
  local m = redis.call('HMGET', KEYS[1], 'created', 'start', 'next')
  local start, nxt = tonumber(m[2]), tonumber(m[3])
  if m[1] == ARGV[2] and start and nxt and start < known and known <= nxt
      and redis.call('LINDEX', KEYS[3], known - 1 - nxt) == ARGV[4] then
    from = known - start
  end
end
local turns = redis.call('LRANGE', KEYS[2], from, -1)
touch(tonumber(ARGV[1]))
return {meta, turns, from}
""")

# GETEX_MANY: read index entries (of one hash tag on Redis Cluster) and refresh the TTL of those that exist
# (GETEX: Redis >= 6.2).
# KEYS: any number of index keys. ARGV: ttl_s.  Reply: {value or nil, ...} in KEYS order.
GETEX_MANY = LuaScript("getex_many", """
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('GETEX', key, 'EX', ARGV[1])
end
return out
""")

# INDEX_PUT: write index entries (of one hash tag on Redis Cluster), never letting an entry name two things. An entry
# that names something else already (another turn, another conversation) becomes the ambiguity marker, which
# every later write keeps until it expires: a lookup then finds no evidence instead of whichever write came
# last. ``ident`` says what the new value names: an old value containing it (plain substring) names the same
# thing (a location's packed turn id: the same turn re-pointed at its fork), as does an equal one.
# KEYS: any number of index keys. ARGV: ttl_s, marker, then value_1, ident_1, value_2, ident_2, ...
# Reply: how many entries are (now) ambiguous.
INDEX_PUT = LuaScript("index_put", """
local ttl, marker, n = ARGV[1], ARGV[2], 0
for i, key in ipairs(KEYS) do
  local value, ident = ARGV[2 * i + 1], ARGV[2 * i + 2]
  local old = redis.call('GET', key)
  if old and old ~= value and (old == marker or not string.find(old, ident, 1, true)) then
    value = marker
    n = n + 1
  end
  redis.call('SET', key, value, 'EX', ttl)
end
return n
""")

# TENANT_BYTES: add a record's bytes to the tenant's storage counter (its own slot: one key). The window starts with
# the first write after the counter expired and lasts ttl_s (the records' TTL), so the counter is what the tenant
# recorded in the current window.  ARGV: bytes, ttl_s.  Reply: the new total.
TENANT_BYTES = LuaScript("tenant_bytes", """
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('TTL', KEYS[1]) < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return total
""")

# TENANT_TOTAL: what the tenant stored in this window (0 when none), read only (a load reads it: nothing written).
TENANT_TOTAL = LuaScript("tenant_total", """
return tonumber(redis.call('GET', KEYS[1]) or '0')
""")

# KEY_PUT: create (a name not taken) or update (the name's own id) a gateway key's record.
# KEYS: names hash, record hash. ARGV: 'create' | 'update', name, id, then field, value, ...
# Reply: 'ok' | 'exists' (create: the name is taken) | 'missing' (update: no such key)
KEY_PUT = LuaScript("key_put", """
local current = redis.call('HGET', KEYS[1], ARGV[2])
if ARGV[1] == 'create' then
  if current then return 'exists' end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
elseif current ~= ARGV[3] then
  return 'missing'
end
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 'ok'
""")

# KEY_READ: the names hash (KEYS[1]) flat (name, id, ...), then each record hash named in KEYS[2..] flat.
KEY_READ = LuaScript("key_read", """
local out = {redis.call('HGETALL', KEYS[1])}
for i = 2, #KEYS do
  out[#out + 1] = redis.call('HGETALL', KEYS[i])
end
return out
""")

# ADMIT: one request under a gateway key, atomically: the key is known, its secret's hash matches, it is not
# revoked or expired; its tokens-per-minute window is not used up; its requests per minute (GCRA: a burst of up to
# rpm requests, then one per 60000/rpm ms) and requests in flight are within its limits (a slot is taken).
# The budget: what the key spent in its budget period (day, week or month: KEYS[5..7]) is below its budget.
# KEYS: record, rate, concurrency, tokens of the current minute, spend of this day, week, month.
# ARGV: secret hash, now (ms), ms until the end of this day, week, month.
# Reply: {'ok', name, models, 1 when a concurrency slot was taken} | {'unknown', '', '', 0} | {'revoked'} | {'expired'}
#        | {'rpm' | 'tpm' | 'concurrency' | 'budget', retry after (ms)[, the limit]}
ADMIT = LuaScript("admit", """
local r = redis.call('HMGET', KEYS[1], 'hash', 'revoked', 'expires', 'rpm', 'tpm', 'concurrency', 'name', 'models',
                     'budget_micros', 'budget_period')
-- a wrong secret goes the right one's way up to the first write and is answered then: no sooner, no later
local wrong = not r[1] or r[1] ~= ARGV[1]
local verdict = nil
if r[2] == '1' then verdict = {'revoked'} end
local now = tonumber(ARGV[2])
local expires = tonumber(r[3] or '0') or 0
if not verdict and expires > 0 and now >= expires then verdict = {'expired'} end
local budget = tonumber(r[9] or '0') or 0
if not verdict and budget > 0 then
  local at = ({day = 5, week = 6})[r[10]] or 7
  if (tonumber(redis.call('GET', KEYS[at]) or '0') or 0) >= budget then verdict = {'budget', tonumber(ARGV[at - 2])} end
end
local tpm = tonumber(r[5] or '0') or 0
if not verdict and tpm > 0 and (tonumber(redis.call('GET', KEYS[4]) or '0') or 0) >= tpm then
  verdict = {'tpm', 60000 - (now % 60000), tpm}
end
local rpm = tonumber(r[4] or '0') or 0
local tat = nil
if not verdict and rpm > 0 then
  local step = 60000 / rpm
  tat = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if tat < now then tat = now end
  if tat - now > 60000 - step then verdict = {'rpm', math.ceil(tat - now - (60000 - step)), rpm} end
  tat = tat + step
end
local cc = tonumber(r[6] or '0') or 0
if wrong then  -- reads where a right secret writes, about as long
  if not verdict and cc > 0 then redis.call('GET', KEYS[3]); redis.call('PTTL', KEYS[3]) end
  if not verdict and tat then  -- (a SET with an expiry costs about two reads)
    redis.call('PTTL', KEYS[2]); redis.call('GET', KEYS[2]); tat = string.format('%.3f', tat)
  end
  return {'unknown', '', '', 0}
end
if verdict then return verdict end
if cc > 0 then
  local n = redis.call('INCR', KEYS[3])
  redis.call('PEXPIRE', KEYS[3], 600000)
  if n > cc then
    redis.call('DECR', KEYS[3])
    return {'concurrency', 1000, cc}
  end
end
if tat then redis.call('SET', KEYS[2], string.format('%.3f', tat), 'PX', 60000) end
return {'ok', r[7] or '', r[8] or '', cc > 0 and 1 or 0}
""")

# RELEASE: after a request under a gateway key: its concurrency slot back (ARGV[1] '1' when it took one), the
# tokens its answer used (ARGV[2]) counted in the minute's window, its cost (ARGV[3], micro-dollars) added to the
# day's, week's and month's spend, and its usage to the day's (ARGV[4..]: field, amount, ...).
# KEYS: concurrency, tokens of the minute, spend of this day, week, month, usage of this day.
RELEASE = LuaScript("release", """
if ARGV[1] == '1' then
  if redis.call('DECR', KEYS[1]) < 0 then redis.call('SET', KEYS[1], '0', 'PX', 600000) end
end
local tokens = tonumber(ARGV[2]) or 0
if tokens > 0 then
  redis.call('INCRBY', KEYS[2], tokens)
  redis.call('PEXPIRE', KEYS[2], 120000)
end
local cost = tonumber(ARGV[3]) or 0
if cost > 0 then
  local keep = {2 * 86400000, 8 * 86400000, 32 * 86400000}
  for i = 3, 5 do
    redis.call('INCRBY', KEYS[i], cost)
    redis.call('PEXPIRE', KEYS[i], keep[i - 2])
  end
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[6], ARGV[i], ARGV[i + 1])
end
if #ARGV >= 4 then redis.call('PEXPIRE', KEYS[6], 40 * 86400000) end
return 1
""")

ALL_SCRIPTS: tuple[LuaScript, ...] = (RECORD, FORK, LOAD, GETEX_MANY, INDEX_PUT, TENANT_BYTES, TENANT_TOTAL,
                                      KEY_PUT, KEY_READ, ADMIT, RELEASE)

-- Shared by every script: the keys of one record, the server clock and small helpers.
local rk, sk, fk = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function s(n) return string.format('%.0f', n) end
local function num(field) return tonumber(redis.call('HGET', rk, field)) end
local function read() return {redis.call('HGETALL', rk), redis.call('LRANGE', sk, 0, -1)} end
local function held(fence)
  return redis.call('HGET', rk, 'state') == 'in_progress' and redis.call('HGET', rk, 'fence') == fence
end
-- The next fence under the key: one more than any fence the counter or the record holds,
-- and, for a new record (`seed`), at least the clock in microseconds, so that a key whose
-- record and counter were lost (a restart without persistence, a failover to a lagging
-- replica, a flush) still never hands out a fence issued before. Microseconds, not the
-- milliseconds `now` counts: a flush and a new claim can follow the first claim within the
-- same millisecond, never within the same microsecond (scripts run one at a time, each for
-- longer than that). Exact in Lua's doubles until 2255. The counter is kept without expiry
-- while the record lives (SET clears any TTL).
local function next_fence(seed)
  local f = (tonumber(redis.call('GET', fk) or '0') or 0) + 1
  local current = (num('fence') or 0) + 1
  if current > f then f = current end
  local micros = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if seed and micros > f then f = micros end
  redis.call('SET', fk, s(f))
  return f
end
local function settle_expiry(expires_at, grace, retention)
  redis.call('PEXPIREAT', rk, s(expires_at + grace))
  redis.call('PEXPIREAT', sk, s(expires_at + grace))
  redis.call('PEXPIREAT', fk, s(expires_at + grace + retention))
end
-- An Unknown record is deleted by Redis once the store's Unknown retention has passed, so a
-- flood of ambiguous failures cannot fill a server that may not evict.
local function unknown_expiry(retention, fence_retention)
  redis.call('PEXPIREAT', rk, s(now + retention))
  redis.call('PEXPIREAT', sk, s(now + retention))
  redis.call('PEXPIREAT', fk, s(now + retention + fence_retention))
end
-- Settle the record Completed with `outcome` under a new fence, expiring after `ttl` ms (an
-- operator's resolve, a verify hook's settlement): any holder is fenced out.
local function settle_with(outcome, ttl, grace, retention)
  local f = next_fence(false)
  local expires_at = now + tonumber(ttl)
  redis.call('HSET', rk, 'fence', s(f), 'state', 'completed', 'outcome', outcome,
    'expires_at', s(expires_at), 'updated_at', s(now))
  redis.call('HDEL', rk, 'lease_until', 'since', 'last_error')
  settle_expiry(expires_at, tonumber(grace), tonumber(retention))
end

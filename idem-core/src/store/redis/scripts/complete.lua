-- ARGV: fence, outcome JSON, ttl ms, grace ms, fence retention ms.
if not held(ARGV[1]) then return {'fenced'} end
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', rk, 'state', 'completed', 'outcome', ARGV[2], 'expires_at', s(expires_at),
  'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until')
settle_expiry(expires_at, tonumber(ARGV[4]), tonumber(ARGV[5]))
return {'ok'}

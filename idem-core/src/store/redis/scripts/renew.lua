-- ARGV: fence, lease ms.
if not held(ARGV[1]) or (num('lease_until') or 0) <= now then return {'fenced'} end
local until_ms = now + tonumber(ARGV[2])
redis.call('HSET', rk, 'lease_until', s(until_ms), 'updated_at', s(now))
return {'ok', s(until_ms)}

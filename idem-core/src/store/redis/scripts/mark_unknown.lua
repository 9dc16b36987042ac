-- ARGV: fence, error, Unknown retention ms, fence retention ms.
if not held(ARGV[1]) then return {'fenced'} end
redis.call('HSET', rk, 'state', 'unknown', 'since', s(now), 'last_error', ARGV[2],
  'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until')
unknown_expiry(tonumber(ARGV[3]), tonumber(ARGV[4]))
return {'ok'}

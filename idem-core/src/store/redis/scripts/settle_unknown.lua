-- ARGV: fence, outcome JSON (empty: release), ttl ms, grace ms, fence retention ms.
if redis.call('HGET', rk, 'state') ~= 'unknown' or redis.call('HGET', rk, 'fence') ~= ARGV[1] then
  return {'unchanged'}
end
if ARGV[2] == '' then
  redis.call('DEL', rk, sk)
  redis.call('PEXPIRE', fk, ARGV[5])
  return {'ok'}
end
local f = next_fence(false)
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', rk, 'fence', s(f), 'state', 'completed', 'outcome', ARGV[2],
  'expires_at', s(expires_at), 'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until', 'since', 'last_error')
settle_expiry(expires_at, tonumber(ARGV[4]), tonumber(ARGV[5]))
return {'ok'}

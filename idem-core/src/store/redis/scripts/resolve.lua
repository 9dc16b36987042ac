-- ARGV: outcome JSON, ttl ms, grace ms, fence retention ms.
local state = redis.call('HGET', rk, 'state')
if state == false then return {'not_found'} end
if state == 'completed' then return {'wrong_state', state} end
local f = next_fence(false)
local expires_at = now + tonumber(ARGV[2])
redis.call('HSET', rk, 'fence', s(f), 'state', 'completed', 'outcome', ARGV[1],
  'expires_at', s(expires_at), 'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until', 'since', 'last_error')
settle_expiry(expires_at, tonumber(ARGV[3]), tonumber(ARGV[4]))
return {'ok', read()}

-- ARGV: fence, step name, step value.
if not held(ARGV[1]) then return {'fenced'} end
local field = 'step:' .. ARGV[2]
if redis.call('HEXISTS', rk, field) == 0 then
  redis.call('RPUSH', sk, ARGV[2])
end
redis.call('HSET', rk, field, ARGV[3], 'updated_at', s(now))
return {'ok'}

-- ARGV: outcome JSON, ttl ms, grace ms, fence retention ms.
local state = redis.call('HGET', rk, 'state')
if state == false then return {'not_found'} end
if state == 'completed' then return {'wrong_state', state} end
settle_with(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return {'ok', read()}

-- ARGV: fence retention ms.
local state = redis.call('HGET', rk, 'state')
if state == false then return {'not_found'} end
if state == 'completed' then return {'wrong_state', state} end
redis.call('DEL', rk, sk)
redis.call('PEXPIRE', fk, ARGV[1])
return {'ok'}

-- ARGV: fence, fence retention ms.
if not held(ARGV[1]) then return {'unchanged'} end
redis.call('DEL', rk, sk)
redis.call('PEXPIRE', fk, ARGV[2])
return {'ok'}

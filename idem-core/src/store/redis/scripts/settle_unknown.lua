-- ARGV: fence, outcome JSON (empty: release), ttl ms, grace ms, fence retention ms.
if redis.call('HGET', rk, 'state') ~= 'unknown' or redis.call('HGET', rk, 'fence') ~= ARGV[1] then
  return {'unchanged'}
end
if ARGV[2] == '' then
  redis.call('DEL', rk, sk)
  redis.call('PEXPIRE', fk, ARGV[5])
  return {'ok'}
end
settle_with(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return {'ok'}

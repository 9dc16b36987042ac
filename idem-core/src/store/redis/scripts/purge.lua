-- ARGV: Unknown retention ms, fence retention ms, tenant given (`1`/`0`), tenant. Deletes the
-- record if `machine::is_purgeable` says so: completed and past its expiry, or Unknown for
-- longer than the retention; of the tenant, if one is given.
if ARGV[3] == '1' and (redis.call('HGET', rk, 'tenant') or '') ~= ARGV[4] then
  return {'unchanged'}
end
local state = redis.call('HGET', rk, 'state')
local due = (state == 'completed' and (num('expires_at') or 0) <= now)
  or (state == 'unknown' and (num('since') or 0) + tonumber(ARGV[1]) <= now)
if not due then return {'unchanged'} end
redis.call('DEL', rk, sk)
-- A completed record's counter expires already; an Unknown one's outlives it by the retention.
if state == 'unknown' then redis.call('PEXPIRE', fk, ARGV[2]) end
return {'ok'}

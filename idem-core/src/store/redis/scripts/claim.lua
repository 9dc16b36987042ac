-- ARGV: key, tool, fingerprint, lease ms, orphan policy, has arguments (`1`/`0`), arguments,
-- tenant, Unknown retention ms, fence retention ms, and the `last_error` of an orphan turned
-- Unknown (`record::ORPHANED`: the text is Rust's, so that it is written in one place only),
-- has a contract (`1`/`0`), the contract's JSON.
local lease = tonumber(ARGV[4])
local state = redis.call('HGET', rk, 'state')
if state == false and redis.call('EXISTS', rk) == 1 then
  return {'existing', read()}
end
local live = state ~= false
if state == 'completed' and (num('expires_at') or 0) <= now then
  live = false
end
if not live then
  local f = next_fence(true)
  redis.call('DEL', rk, sk)
  redis.call('HSET', rk, 'key', ARGV[1], 'tool', ARGV[2], 'tenant', ARGV[8], 'fp', ARGV[3],
    'fence', s(f),
    'state', 'in_progress', 'lease_until', s(now + lease), 'created_at', s(now),
    'updated_at', s(now))
  if ARGV[6] == '1' then
    redis.call('HSET', rk, 'args', ARGV[7])
  end
  if ARGV[12] == '1' then
    redis.call('HSET', rk, 'contract', ARGV[13])
  end
  return {'acquired', s(f), '0', read()}
end
if redis.call('HGET', rk, 'fp') ~= ARGV[3] then
  return {'existing', read()}
end
if state == 'in_progress' and (num('lease_until') or 0) <= now then
  -- The stricter of the claim's policy and the one the record was made under
  -- (`Contract::takes_over`: only the orphan of an idempotent_write, or of a tool that
  -- compensates, is taken over).
  local policy = ARGV[5]
  local made = redis.call('HGET', rk, 'contract')
  if made then
    local ok, contract = pcall(cjson.decode, made)
    if not ok or type(contract) ~= 'table'
      or (contract.class ~= 'idempotent_write' and contract.compensates ~= true) then
      policy = 'mark_unknown'
    end
  end
  if policy == 'take_over' then
    local f = next_fence(false)
    redis.call('HSET', rk, 'fence', s(f), 'lease_until', s(now + lease), 'updated_at', s(now))
    return {'acquired', s(f), '1', read()}
  end
  redis.call('HSET', rk, 'state', 'unknown', 'since', s(now),
    'last_error', ARGV[11],
    'updated_at', s(now))
  redis.call('HDEL', rk, 'lease_until')
  unknown_expiry(tonumber(ARGV[9]), tonumber(ARGV[10]))
  return {'marked_unknown', read()}
end
return {'existing', read()}

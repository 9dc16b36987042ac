-- KEYS: the pending approval under a record key, the index of record keys with one. ARGV: an
-- entry expected (`1`/`0`), the expected text, the new text, the record key. Puts the new text
-- if the entry is exactly the expected text (absent when none is expected); else changes
-- nothing. Runs without the prelude: it touches no record.
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current ~= ARGV[2] then return {'unchanged'} end
elseif current ~= false then
  return {'unchanged'}
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[4])
return {'ok'}

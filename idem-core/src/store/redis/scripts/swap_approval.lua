-- KEYS: the pending approval under a record key. ARGV: an entry expected (`1`/`0`), the
-- expected text, the new text. Puts the new text if the entry is exactly the expected text
-- (absent when none is expected); else changes nothing. Runs without the prelude: it touches
-- no record. The record key is added to the index of approvals before, by its own command:
-- the index is in another slot.
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current ~= ARGV[2] then return {'unchanged'} end
elseif current ~= false then
  return {'unchanged'}
end
redis.call('SET', KEYS[1], ARGV[3])
return {'ok'}

-- KEYS: a budget's string. ARGV: a text expected (`1`/`0`), the expected text, the new text,
-- how long to keep it (milliseconds, at least 1). Puts the new text, expiring that long from
-- now on the server's clock, if the text there is exactly the expected one (absent when none
-- is expected: an expired text is absent); else changes nothing. Runs without the prelude: it
-- touches no record.
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current ~= ARGV[2] then return {'unchanged'} end
elseif current ~= false then
  return {'unchanged'}
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return {'ok'}

-- KEYS: the pending approval under a record key, the index of record keys with one. ARGV: the
-- expected text, the record key. Deletes the entry (and its index member) if it is exactly
-- the expected text; else changes nothing. Runs without the prelude: it touches no record.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'unchanged'} end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return {'ok'}

-- KEYS: the pending approval under a record key. ARGV: the expected text. Deletes the entry if
-- it is exactly the expected text; else changes nothing. Runs without the prelude: it touches
-- no record. The record key leaves the index of approvals after, by its own command: the
-- index is in another slot.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'unchanged'} end
redis.call('DEL', KEYS[1])
return {'ok'}

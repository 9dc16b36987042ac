-- KEYS: a record's hash and its steps. Returns the server's `TIME`, the hash (`HGETALL`) and
-- the steps (`LRANGE`): one record read atomically on the node that owns its slot. For a
-- cluster, where a `MULTI` answered `MOVED` is not sent on to the new primary and a script
-- is. Runs without the prelude and writes nothing.
return {redis.call('TIME'), redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}

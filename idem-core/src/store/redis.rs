//! A Redis store, for fleets of workers on many hosts.
//!
//! Every state change is one Lua script run with `EVALSHA`, so each decision of the record
//! state machine ([`machine`]) is atomic on the server. Lease and
//! expiry decisions read the server's clock (`TIME` inside the script), never the client's.
//!
//! # Key layout
//!
//! A record under [`RecordKey`] `K`, in a store created with prefix `P`, is three keys that
//! share the cluster hash tag `{K}`, so one record always lives in one slot:
//!
//! | key | type | holds | expiry |
//! |---|---|---|---|
//! | `P:{K}:rec` | hash | `key`, `tool`, `fp` (fingerprint, hex), `fence`, `state` (`in_progress`, `completed`, `unknown`), `lease_until`, `outcome` (the [`Outcome`] as JSON), `expires_at`, `since`, `last_error`, `args`, `created_at`, `updated_at`, and one `step:<name>` field per journaled step | none while InProgress or Unknown; at `expires_at` + [`EVICTION_GRACE`] once Completed |
//! | `P:{K}:steps` | list | journaled step names, in order | as the record |
//! | `P:{K}:fence` | string | the last fence issued under `K` | none while the record lives; the fence retention (default [`DEFAULT_FENCE_RETENTION`]) after the record expires or is released |
//!
//! Timestamps are milliseconds since the Unix epoch on the server's clock, as decimal
//! strings. The fence counter outlives its record so that a key claimed again after its
//! record expired, was evicted or was released gets a fence greater than any fence issued
//! before: a holder that stalled through all of that is still refused.
//!
//! InProgress and Unknown records never expire on their own: an Unknown record is kept until
//! an operator resolves or releases it. Completed records carry a Redis TTL a little past
//! their `expires_at`, so Redis evicts them and storage stays bounded; until then they are
//! reported absent by [`Store::get`] and removed by [`Store::purge_expired`].
//!
//! The prefix may not contain `{` or `}`, which would move the hash tag.
//!
//! # Operator operations
//!
//! [`Store::list`] and [`Store::purge_expired`] walk the prefix with `SCAN`: they cost
//! O(keyspace) of the Redis database, not O(matching records). Run them from an operator tool
//! or a periodic job, not on the request path.
//!
//! Durations are clamped to [`MAX_DURATION`] so the millisecond arithmetic of the scripts
//! (Lua numbers are doubles) stays exact.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, RedisResult, Script, Value};

use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine;
use crate::store::{Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, ListFilter, Store, StoreError};

/// How long after a completed record's `expires_at` Redis evicts it. Until then the record is
/// still in Redis but reported absent.
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// How long a key's fence counter is kept after its record expired or was released.
pub const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest lease, TTL or retention the store honours (about 31,000 years); longer ones
/// are clamped to it.
pub const MAX_DURATION: Duration = Duration::from_millis(1_000_000_000_000_000);

/// How long [`RedisStore::connect`] may take, retries included, before it gives up.
const CONNECT_BUDGET: Duration = Duration::from_secs(10);
/// One connection attempt.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// One command; a 1 MiB outcome on a busy server must fit in it. A connection on which a
/// command timed out is replaced (see [`Connection`]).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection attempts after a dropped connection.
const RECONNECT_RETRIES: usize = 2;
/// Keys asked for per `SCAN` step.
const SCAN_COUNT: usize = 500;

/// Shared by every script: the keys of one record, the server clock and small helpers.
const PRELUDE: &str = r#"
local rk, sk, fk = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function s(n) return string.format('%.0f', n) end
local function num(field) return tonumber(redis.call('HGET', rk, field)) end
local function read() return {redis.call('HGETALL', rk), redis.call('LRANGE', sk, 0, -1)} end
local function held(fence)
  return redis.call('HGET', rk, 'state') == 'in_progress' and redis.call('HGET', rk, 'fence') == fence
end
local function next_fence()
  local f = redis.call('INCR', fk)
  local current = tonumber(redis.call('HGET', rk, 'fence') or '0') or 0
  if f <= current then
    f = current + 1
    redis.call('SET', fk, s(f))
  end
  redis.call('PERSIST', fk)
  return f
end
local function settle_expiry(expires_at, grace, retention)
  redis.call('PEXPIREAT', rk, s(expires_at + grace))
  redis.call('PEXPIREAT', sk, s(expires_at + grace))
  redis.call('PEXPIREAT', fk, s(expires_at + grace + retention))
end
"#;

/// ARGV: key, tool, fingerprint, lease ms, orphan policy, has arguments (`1`/`0`), arguments.
const CLAIM: &str = r#"
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
  local f = next_fence()
  redis.call('DEL', rk, sk)
  redis.call('HSET', rk, 'key', ARGV[1], 'tool', ARGV[2], 'fp', ARGV[3], 'fence', s(f),
    'state', 'in_progress', 'lease_until', s(now + lease), 'created_at', s(now),
    'updated_at', s(now))
  if ARGV[6] == '1' then
    redis.call('HSET', rk, 'args', ARGV[7])
  end
  return {'acquired', s(f), '0', read()}
end
if redis.call('HGET', rk, 'fp') ~= ARGV[3] then
  return {'existing', read()}
end
if state == 'in_progress' and (num('lease_until') or 0) <= now then
  if ARGV[5] == 'take_over' then
    local f = next_fence()
    redis.call('HSET', rk, 'fence', s(f), 'lease_until', s(now + lease), 'updated_at', s(now))
    return {'acquired', s(f), '1', read()}
  end
  redis.call('HSET', rk, 'state', 'unknown', 'since', s(now),
    'last_error', "the holder's lease expired before it recorded an outcome",
    'updated_at', s(now))
  redis.call('HDEL', rk, 'lease_until')
  return {'existing', read()}
end
return {'existing', read()}
"#;

/// ARGV: fence, outcome JSON, ttl ms, grace ms, fence retention ms.
const COMPLETE: &str = r#"
if not held(ARGV[1]) then return {'fenced'} end
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', rk, 'state', 'completed', 'outcome', ARGV[2], 'expires_at', s(expires_at),
  'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until')
settle_expiry(expires_at, tonumber(ARGV[4]), tonumber(ARGV[5]))
return {'ok'}
"#;

/// ARGV: fence, fence retention ms.
const RELEASE: &str = r#"
if not held(ARGV[1]) then return {'unchanged'} end
redis.call('DEL', rk, sk)
redis.call('PEXPIRE', fk, ARGV[2])
return {'ok'}
"#;

/// ARGV: fence, lease ms.
const RENEW: &str = r#"
if not held(ARGV[1]) or (num('lease_until') or 0) <= now then return {'fenced'} end
local until_ms = now + tonumber(ARGV[2])
redis.call('HSET', rk, 'lease_until', s(until_ms), 'updated_at', s(now))
return {'ok', s(until_ms)}
"#;

/// ARGV: fence, step name, step value.
const JOURNAL: &str = r#"
if not held(ARGV[1]) then return {'fenced'} end
local field = 'step:' .. ARGV[2]
if redis.call('HEXISTS', rk, field) == 0 then
  redis.call('RPUSH', sk, ARGV[2])
end
redis.call('HSET', rk, field, ARGV[3], 'updated_at', s(now))
return {'ok'}
"#;

/// ARGV: fence, error.
const MARK_UNKNOWN: &str = r#"
if not held(ARGV[1]) then return {'fenced'} end
redis.call('HSET', rk, 'state', 'unknown', 'since', s(now), 'last_error', ARGV[2],
  'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until')
return {'ok'}
"#;

/// ARGV: outcome JSON, ttl ms, grace ms, fence retention ms.
const RESOLVE: &str = r#"
local state = redis.call('HGET', rk, 'state')
if state == false then return {'not_found'} end
if state == 'completed' then return {'wrong_state', state} end
local f = next_fence()
local expires_at = now + tonumber(ARGV[2])
redis.call('HSET', rk, 'fence', s(f), 'state', 'completed', 'outcome', ARGV[1],
  'expires_at', s(expires_at), 'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until', 'since', 'last_error')
settle_expiry(expires_at, tonumber(ARGV[3]), tonumber(ARGV[4]))
return {'ok', read()}
"#;

/// ARGV: fence retention ms.
const FORCE_RELEASE: &str = r#"
local state = redis.call('HGET', rk, 'state')
if state == false then return {'not_found'} end
if state == 'completed' then return {'wrong_state', state} end
redis.call('DEL', rk, sk)
redis.call('PEXPIRE', fk, ARGV[1])
return {'ok'}
"#;

/// ARGV: fence, outcome JSON (empty: release), ttl ms, grace ms, fence retention ms.
const SETTLE_UNKNOWN: &str = r#"
if redis.call('HGET', rk, 'state') ~= 'unknown' or redis.call('HGET', rk, 'fence') ~= ARGV[1] then
  return {'unchanged'}
end
if ARGV[2] == '' then
  redis.call('DEL', rk, sk)
  redis.call('PEXPIRE', fk, ARGV[5])
  return {'ok'}
end
local f = next_fence()
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', rk, 'fence', s(f), 'state', 'completed', 'outcome', ARGV[2],
  'expires_at', s(expires_at), 'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until', 'since', 'last_error')
settle_expiry(expires_at, tonumber(ARGV[4]), tonumber(ARGV[5]))
return {'ok'}
"#;

/// No ARGV. Deletes the record if it is completed and past its expiry.
const PURGE: &str = r#"
if redis.call('HGET', rk, 'state') == 'completed' and (num('expires_at') or 0) <= now then
  redis.call('DEL', rk, sk)
  return {'ok'}
end
return {'unchanged'}
"#;

/// The state-changing scripts, hashed once per store.
struct Scripts {
    claim: Script,
    complete: Script,
    release: Script,
    renew: Script,
    journal: Script,
    mark_unknown: Script,
    resolve: Script,
    force_release: Script,
    settle_unknown: Script,
    purge: Script,
}

impl Scripts {
    fn new() -> Self {
        let script = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Scripts {
            claim: script(CLAIM),
            complete: script(COMPLETE),
            release: script(RELEASE),
            renew: script(RENEW),
            journal: script(JOURNAL),
            mark_unknown: script(MARK_UNKNOWN),
            resolve: script(RESOLVE),
            force_release: script(FORCE_RELEASE),
            settle_unknown: script(SETTLE_UNKNOWN),
            purge: script(PURGE),
        }
    }

    fn all(&self) -> [&Script; 10] {
        [
            &self.claim,
            &self.complete,
            &self.release,
            &self.renew,
            &self.journal,
            &self.mark_unknown,
            &self.resolve,
            &self.force_release,
            &self.settle_unknown,
            &self.purge,
        ]
    }
}

/// The Redis keys of one record.
struct RecordKeys {
    rec: String,
    steps: String,
    fence: String,
}

impl RecordKeys {
    fn new(prefix: &str, key: &RecordKey) -> Self {
        Self::from_base(format!("{prefix}:{{{}}}", key.as_str()))
    }

    /// From the name of a record hash found by `SCAN`.
    fn from_rec(rec: &str) -> Option<Self> {
        rec.strip_suffix(":rec")
            .map(|base| Self::from_base(base.to_owned()))
    }

    fn from_base(base: String) -> Self {
        RecordKeys {
            rec: format!("{base}:rec"),
            steps: format!("{base}:steps"),
            fence: format!("{base}:fence"),
        }
    }
}

/// A [`Store`] on Redis, shared by any number of workers on any number of hosts.
///
/// Cloning is cheap: clones share one multiplexed connection, which reconnects on its own
/// after the server went away, and which a store made by [`connect`](RedisStore::connect)
/// replaces after a command timed out on it. See the [module documentation](self) for the key
/// layout.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem_core::store::{Store, redis::RedisStore};
///
/// # async fn run() -> Result<(), idem_core::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/", "billing").await?;
/// let store: Arc<dyn Store> = Arc::new(store.with_max_outcome_bytes(256 * 1024));
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conn: Arc<Connection>,
    prefix: String,
    scripts: Arc<Scripts>,
    max_outcome_bytes: usize,
    fence_retention: Duration,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("max_outcome_bytes", &self.max_outcome_bytes)
            .field("fence_retention", &self.fence_retention)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connect to the server at `url` (`redis://host:port/db`, `rediss://` for TLS if the
    /// crate was built with TLS) and load the scripts. Every key the store writes starts with
    /// `prefix` followed by `:`.
    ///
    /// Fails with [`StoreError::Unavailable`] when the URL is invalid, the prefix contains `{`
    /// or `}`, or the server does not answer within about ten seconds.
    ///
    /// ```no_run
    /// use idem_core::store::redis::RedisStore;
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "myapp:idem").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        check_prefix(prefix)?;
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {e}")))?;
        let conn = tokio::time::timeout(
            CONNECT_BUDGET,
            ConnectionManager::new_with_config(client.clone(), manager_config()),
        )
        .await
        .map_err(|_| {
            StoreError::Unavailable(format!(
                "no answer from Redis within {}s",
                CONNECT_BUDGET.as_secs()
            ))
        })?
        .map_err(unavailable)?;
        let store = Self::over(Connection::new(conn, Some(client)), prefix);
        let (_, mut conn) = store.conn.manager();
        for script in store.scripts.all() {
            script.load_async(&mut conn).await.map_err(unavailable)?;
        }
        Ok(store)
    }

    /// A store over a connection the caller configured (timeouts, retries). Scripts are
    /// loaded on first use. Fails only when the prefix contains `{` or `}`.
    ///
    /// The manager reconnects on its own after a dropped connection, but not after a command
    /// timed out on a connection that stays open and silent, and this store cannot build
    /// another manager like the caller's: give it a response timeout, and prefer
    /// [`connect`](RedisStore::connect), which replaces a connection after a timeout.
    ///
    /// ```no_run
    /// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
    /// use idem_core::store::redis::RedisStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = ConnectionManager::new_with_config(client, ConnectionManagerConfig::new()).await?;
    /// let store = RedisStore::from_manager(conn, "myapp:idem")?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_manager(conn: ConnectionManager, prefix: &str) -> Result<Self, StoreError> {
        check_prefix(prefix)?;
        Ok(Self::over(Connection::new(conn, None), prefix))
    }

    /// A store with default limits over `conn`; the prefix is checked already.
    fn over(conn: Connection, prefix: &str) -> Self {
        RedisStore {
            conn: Arc::new(conn),
            prefix: prefix.to_owned(),
            scripts: Arc::new(Scripts::new()),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            fence_retention: DEFAULT_FENCE_RETENTION,
        }
    }

    /// Limit the size of one recorded outcome (default
    /// [`DEFAULT_MAX_OUTCOME_BYTES`]).
    ///
    /// ```no_run
    /// # use idem_core::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app")
    ///     .await?
    ///     .with_max_outcome_bytes(64 * 1024);
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_max_outcome_bytes(mut self, limit: usize) -> Self {
        self.max_outcome_bytes = limit;
        self
    }

    /// How long a key's fence counter outlives its record (default
    /// [`DEFAULT_FENCE_RETENTION`]). A holder that stalls longer than the record's TTL plus
    /// this retention could meet a new record carrying its old fence; keep it longer than any
    /// pause a worker can survive.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use idem_core::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app")
    ///     .await?
    ///     .with_fence_retention(Duration::from_secs(30 * 24 * 3600));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// The prefix every key of this store starts with.
    ///
    /// ```no_run
    /// # use idem_core::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app").await?;
    /// assert_eq!(store.prefix(), "app");
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn keys(&self, key: &RecordKey) -> RecordKeys {
        RecordKeys::new(&self.prefix, key)
    }

    /// Run a script against one record and split its reply into a status and the rest.
    async fn run(
        &self,
        script: &Script,
        key: &RecordKey,
        args: &[&[u8]],
    ) -> Result<(String, Vec<Value>), StoreError> {
        let keys = self.keys(key);
        let mut invocation = script.key(&keys.rec);
        invocation.key(&keys.steps).key(&keys.fence);
        for arg in args {
            invocation.arg(*arg);
        }
        let invocation = &invocation;
        // A state-changing script: sent again only if it certainly never reached the server.
        let reply: Value = self
            .call(Resend::IfNeverSent, move |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        let Value::Array(mut items) = reply else {
            return Err(corrupt(key, format!("unexpected script reply {reply:?}")));
        };
        if items.is_empty() {
            return Err(corrupt(key, "empty script reply"));
        }
        let status =
            text(&items.remove(0)).ok_or_else(|| corrupt(key, "script reply without a status"))?;
        Ok((status, items))
    }

    /// Read records atomically, with the server time of the read.
    async fn read(
        &self,
        keys: &[(RecordKeys, RecordKey)],
    ) -> Result<(Timestamp, Vec<Option<Record>>), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("TIME");
        for (k, _) in keys {
            pipe.cmd("HGETALL").arg(&k.rec);
            pipe.cmd("LRANGE").arg(&k.steps).arg(0).arg(-1);
        }
        let pipe = &pipe;
        let values: Vec<Value> = self
            .call(Resend::AfterDrop, move |mut conn| async move {
                pipe.query_async(&mut conn).await
            })
            .await?;
        let mut values = values.into_iter();
        let now = values
            .next()
            .as_ref()
            .and_then(server_time)
            .ok_or_else(|| StoreError::Unavailable("Redis TIME gave no time".into()))?;
        let mut records = Vec::with_capacity(keys.len());
        for (_, key) in keys {
            let (Some(hash), Some(steps)) = (values.next(), values.next()) else {
                return Err(corrupt(key, "short reply to a record read"));
            };
            records.push(decode_record(key, &hash, &steps)?);
        }
        Ok((now, records))
    }

    /// One `SCAN` step over this store's record hashes.
    async fn scan(&self, cursor: u64) -> Result<(u64, Vec<String>), StoreError> {
        let pattern = format!("{}:{{*}}:rec", glob_escape(&self.prefix));
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let scan = &scan;
        self.call(Resend::AfterDrop, move |mut conn| async move {
            scan.query_async(&mut conn).await
        })
        .await
    }

    /// Run `operation` on the current connection. If it fails because the connection is
    /// gone, run it once more, on the connection the manager is already making, when that is
    /// safe (see [`Resend`]); a command that timed out is never sent again. Either way a
    /// timed-out connection is replaced for the operations that follow.
    ///
    /// Why once: the manager reconnects after the first failure (with its own bounded
    /// retries and connection timeout), so a second attempt waits for that reconnection. A
    /// long outage leaves the manager holding the `Connection refused` of its last failed
    /// reconnection; without the second attempt the first operation once the server is back
    /// would fail on that stale error.
    async fn call<T, F, Fut>(&self, resend: Resend, operation: F) -> Result<T, StoreError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = self.conn.manager();
        let error = match operation(conn).await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        self.conn.failed(generation, &error);
        if !resend.allows(&error) {
            return Err(unavailable(error));
        }
        let (generation, conn) = self.conn.manager();
        operation(conn).await.map_err(|e| {
            self.conn.failed(generation, &e);
            unavailable(e)
        })
    }

    fn retention_ms(&self) -> u64 {
        millis(self.fence_retention)
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let key = &request.key;
        let lease = millis(request.lease).to_string();
        let policy = match request.orphans {
            OrphanPolicy::TakeOver => "take_over",
            OrphanPolicy::MarkUnknown => "mark_unknown",
        };
        let (has_args, args) = match &request.arguments {
            Some(a) => ("1", a.as_str()),
            None => ("0", ""),
        };
        let fingerprint = request.fingerprint.to_hex();
        let (status, rest) = self
            .run(
                &self.scripts.claim,
                key,
                &[
                    key.as_str().as_bytes(),
                    request.tool.as_bytes(),
                    fingerprint.as_bytes(),
                    lease.as_bytes(),
                    policy.as_bytes(),
                    has_args.as_bytes(),
                    args.as_bytes(),
                ],
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("acquired", [fence, takeover, record]) => {
                let fence = text(fence)
                    .and_then(|f| f.parse::<Fence>().ok())
                    .ok_or_else(|| corrupt(key, "claim returned no fence"))?;
                let record = decode_reply_record(key, record)?
                    .ok_or_else(|| corrupt(key, "claimed record is missing"))?;
                Ok(Claim::Acquired {
                    fence,
                    steps: record.steps,
                    takeover: text(takeover).as_deref() == Some("1"),
                })
            }
            ("existing", [record]) => decode_reply_record(key, record)?
                .map(Claim::Existing)
                .ok_or_else(|| corrupt(key, "existing record is missing")),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let outcome = machine::encode_outcome(key, outcome, self.max_outcome_bytes)?;
        let (status, _) = self
            .run(
                &self.scripts.complete,
                key,
                &[
                    fence.to_string().as_bytes(),
                    outcome.as_bytes(),
                    millis(ttl).to_string().as_bytes(),
                    millis(EVICTION_GRACE).to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(()),
            "fenced" => Err(fenced(key, fence)),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.release,
                key,
                &[
                    fence.to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(true),
            "unchanged" => Ok(false),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let (status, rest) = self
            .run(
                &self.scripts.renew,
                key,
                &[
                    fence.to_string().as_bytes(),
                    millis(lease).to_string().as_bytes(),
                ],
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("ok", [until]) => text(until)
                .and_then(|u| u.parse().ok())
                .map(Timestamp)
                .ok_or_else(|| corrupt(key, "renew returned no lease end")),
            ("fenced", _) => Err(fenced(key, fence)),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.journal,
                key,
                &[
                    fence.to_string().as_bytes(),
                    step.as_bytes(),
                    value.as_bytes(),
                ],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(()),
            "fenced" => Err(fenced(key, fence)),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.mark_unknown,
                key,
                &[fence.to_string().as_bytes(), error.as_bytes()],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(()),
            "fenced" => Err(fenced(key, fence)),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let (now, mut records) = self.read(&[(self.keys(key), key.clone())]).await?;
        Ok(records.pop().flatten().filter(|r| machine::is_live(r, now)))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, names) = self.scan(cursor).await?;
            let keys: Vec<(RecordKeys, RecordKey)> = names
                .iter()
                .filter_map(|name| {
                    RecordKeys::from_rec(name).map(|k| (k, RecordKey::from_stored(name.as_str())))
                })
                .collect();
            if !keys.is_empty() {
                let (now, records) = self.read(&keys).await?;
                out.extend(records.into_iter().flatten().filter(|r| {
                    let wanted = match filter.state {
                        Some(kind) => r.state.kind() == kind,
                        None => r.state.kind() != StateKind::Completed,
                    };
                    wanted && machine::is_live(r, now)
                }));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // SCAN may return a key more than once.
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.key.cmp(&b.key))
        });
        out.dedup_by(|a, b| a.key == b.key);
        out.truncate(filter.limit);
        Ok(out)
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        let outcome = machine::encode_settled(key, outcome, self.max_outcome_bytes)?;
        let (status, rest) = self
            .run(
                &self.scripts.resolve,
                key,
                &[
                    outcome.as_bytes(),
                    millis(ttl).to_string().as_bytes(),
                    millis(EVICTION_GRACE).to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("ok", [record]) => decode_reply_record(key, record)?
                .ok_or_else(|| corrupt(key, "resolved record is missing")),
            ("not_found", _) => Err(StoreError::NotFound(key.clone())),
            ("wrong_state", _) => Err(settled(key, "resolve")),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let encoded = match outcome {
            Some(o) => machine::encode_settled(key, o, self.max_outcome_bytes)?,
            None => String::new(),
        };
        let (status, _) = self
            .run(
                &self.scripts.settle_unknown,
                key,
                &[
                    fence.to_string().as_bytes(),
                    encoded.as_bytes(),
                    millis(ttl).to_string().as_bytes(),
                    millis(EVICTION_GRACE).to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(true),
            "unchanged" => Ok(false),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.force_release,
                key,
                &[self.retention_ms().to_string().as_bytes()],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(true),
            "not_found" => Err(StoreError::NotFound(key.clone())),
            "wrong_state" => Err(settled(key, "release")),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let mut purged = 0;
        let mut cursor = 0;
        while purged < limit {
            let (next, names) = self.scan(cursor).await?;
            let keys: Vec<(RecordKeys, RecordKey)> = names
                .iter()
                .filter_map(|name| {
                    RecordKeys::from_rec(name).map(|k| (k, RecordKey::from_stored(name.as_str())))
                })
                .collect();
            if !keys.is_empty() {
                // Read first so only candidates cost a script call; the script decides again.
                let (now, records) = self.read(&keys).await?;
                for record in records.into_iter().flatten() {
                    if purged >= limit {
                        break;
                    }
                    let expired = matches!(record.state, RecordState::Completed { .. })
                        && !machine::is_live(&record, now);
                    if !expired {
                        continue;
                    }
                    let (status, _) = self.run(&self.scripts.purge, &record.key, &[]).await?;
                    if status == "ok" {
                        purged += 1;
                    }
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(purged)
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let time: Value = self
            .call(Resend::AfterDrop, |mut conn| async move {
                redis::cmd("TIME").query_async(&mut conn).await
            })
            .await?;
        server_time(&time).ok_or_else(|| StoreError::Unavailable("Redis TIME gave no time".into()))
    }
}

/// The manager every connection of a store made by [`RedisStore::connect`] comes from.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
}

/// The store's connection manager, and a fresh one after a command timed out.
///
/// The manager reconnects by itself only when its connection drops. A connection that stays
/// open but answers nothing (a hung server, a flow dropped by a firewall without a reset)
/// makes each command wait for the response timeout and fail, for as long as the socket
/// stays open. So after a timeout the store replaces the manager with a new one that connects
/// on first use; operations still in flight on the old one finish or time out on it, and it
/// is closed when the last of them lets go.
struct Connection {
    current: Mutex<Current>,
    /// How to make a new manager; `None` for a manager the caller built
    /// ([`RedisStore::from_manager`]), which is kept.
    client: Option<redis::Client>,
}

struct Current {
    /// Counts replacements, so the many operations that time out on one silent connection
    /// replace it once.
    generation: u64,
    manager: ConnectionManager,
}

impl Connection {
    fn new(manager: ConnectionManager, client: Option<redis::Client>) -> Self {
        Connection {
            current: Mutex::new(Current {
                generation: 0,
                manager,
            }),
            client,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        // `Current` is updated only once a new manager exists, so it is consistent even if a
        // thread panicked while holding the lock.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current manager (a cheap handle on it) and its generation.
    fn manager(&self) -> (u64, ConnectionManager) {
        let current = self.lock();
        (current.generation, current.manager.clone())
    }

    /// An operation on the manager of `generation` failed with `error`: replace that manager
    /// if the error is a timeout and it has not been replaced already.
    fn failed(&self, generation: u64, error: &RedisError) {
        let Some(client) = &self.client else {
            return;
        };
        if !error.is_timeout() {
            return;
        }
        let mut current = self.lock();
        if current.generation != generation {
            return;
        }
        // Connects lazily: nothing waits on the server under the lock. It fails only on a
        // configuration the first manager was built with already.
        if let Ok(manager) =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config())
        {
            current.manager = manager;
            current.generation += 1;
        }
    }
}

/// When an operation whose connection failed may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// Only when the command certainly never reached the server: the connection to it was
    /// refused, so no byte of the command was written to any socket (a refusal can only come
    /// from a connection attempt, never from a connection that carried a command). Used for
    /// the state-changing scripts: running one twice is not harmless in general (a second
    /// `claim` would find the caller's own record and report it as someone else's; a second
    /// `complete`, `mark_unknown` or `settle_unknown` would find the record already settled
    /// and report the holder fenced).
    IfNeverSent,
    /// Also after the connection dropped with the command possibly sent: for reads (`TIME`,
    /// `SCAN`, a `MULTI` of `HGETALL`/`LRANGE`), which change nothing when run twice.
    AfterDrop,
}

impl Resend {
    fn allows(self, error: &RedisError) -> bool {
        error.is_connection_refusal()
            || (self == Resend::AfterDrop && !error.is_timeout() && error.is_connection_dropped())
    }
}

fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.contains(['{', '}']) {
        return Err(StoreError::Unavailable(format!(
            "invalid Redis key prefix {prefix:?}: it may not contain `{{` or `}}`, which would \
             move the cluster hash tag"
        )));
    }
    Ok(())
}

/// Milliseconds, clamped to [`MAX_DURATION`].
fn millis(d: Duration) -> u64 {
    u64::try_from(d.min(MAX_DURATION).as_millis()).unwrap_or(u64::MAX)
}

/// Escape the glob characters of `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Every Redis error means the store could not do the work: writes fail closed on it.
fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn corrupt(key: &RecordKey, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        key: key.clone(),
        reason: reason.into(),
    }
}

fn fenced(key: &RecordKey, fence: Fence) -> StoreError {
    StoreError::Fenced {
        key: key.clone(),
        fence,
    }
}

fn settled(key: &RecordKey, action: &'static str) -> StoreError {
    StoreError::WrongState {
        key: key.clone(),
        state: StateKind::Completed,
        action,
        needs: "an InProgress or Unknown record",
    }
}

fn unexpected(key: &RecordKey, status: &str) -> StoreError {
    corrupt(key, format!("unexpected script status {status:?}"))
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::Int(i) => Some(i.to_string()),
        other => bytes(other).and_then(|b| String::from_utf8(b.to_vec()).ok()),
    }
}

/// `TIME` replies seconds and microseconds.
fn server_time(v: &Value) -> Option<Timestamp> {
    let Value::Array(parts) = v else {
        return None;
    };
    let [secs, micros] = parts.as_slice() else {
        return None;
    };
    let secs: u64 = text(secs)?.parse().ok()?;
    let micros: u64 = text(micros)?.parse().ok()?;
    Some(Timestamp(
        secs.checked_mul(1000)?.checked_add(micros / 1000)?,
    ))
}

/// A record a script returned as `{HGETALL, LRANGE}`.
fn decode_reply_record(key: &RecordKey, v: &Value) -> Result<Option<Record>, StoreError> {
    match v {
        Value::Array(parts) => match parts.as_slice() {
            [hash, steps] => decode_record(key, hash, steps),
            _ => Err(corrupt(key, "a record reply has two parts")),
        },
        _ => Err(corrupt(key, format!("unexpected record reply {v:?}"))),
    }
}

/// Build a record from its hash and its step list; an empty hash is no record.
fn decode_record(
    key: &RecordKey,
    hash: &Value,
    steps: &Value,
) -> Result<Option<Record>, StoreError> {
    let pairs: Vec<(&Value, &Value)> = match hash {
        Value::Array(flat) => {
            if flat.len() % 2 != 0 {
                return Err(corrupt(key, "odd number of hash items"));
            }
            flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect()
        }
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        Value::Nil => Vec::new(),
        other => return Err(corrupt(key, format!("record is not a hash: {other:?}"))),
    };
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut fields = HashMap::with_capacity(pairs.len());
    for (k, v) in pairs {
        let (Some(k), Some(v)) = (text(k), text(v)) else {
            return Err(corrupt(key, "a record field is not UTF-8 text"));
        };
        fields.insert(k, v);
    }
    // Report errors under the key the record names, when it names one.
    let stored_key = fields
        .get("key")
        .map(|k| RecordKey::from_stored(k.as_str()))
        .ok_or_else(|| corrupt(key, "missing field `key`"))?;
    let key = &stored_key;
    let field = |name: &str| {
        fields
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| corrupt(key, format!("missing field `{name}`")))
    };
    let number = |name: &str| {
        field(name)?
            .parse::<u64>()
            .map_err(|_| corrupt(key, format!("field `{name}` is not a number")))
    };
    let time = |name: &str| number(name).map(Timestamp);
    let state = match field("state")? {
        "in_progress" => RecordState::InProgress {
            lease_until: time("lease_until")?,
        },
        "completed" => RecordState::Completed {
            outcome: serde_json::from_str(field("outcome")?)
                .map_err(|e| corrupt(key, format!("outcome does not decode: {e}")))?,
            expires_at: time("expires_at")?,
        },
        "unknown" => RecordState::Unknown {
            since: time("since")?,
            last_error: field("last_error")?.to_owned(),
        },
        other => return Err(corrupt(key, format!("unknown state {other:?}"))),
    };
    let names = match steps {
        Value::Array(names) => names.as_slice(),
        Value::Nil => &[],
        other => return Err(corrupt(key, format!("steps are not a list: {other:?}"))),
    };
    let mut journal = Vec::with_capacity(names.len());
    for name in names {
        let step = text(name).ok_or_else(|| corrupt(key, "a step name is not UTF-8 text"))?;
        let value = field(&format!("step:{step}"))?.to_owned();
        journal.push(JournalEntry { step, value });
    }
    Ok(Some(Record {
        key: stored_key.clone(),
        tool: field("tool")?.to_owned(),
        fingerprint: Fingerprint::from_hex(field("fp")?)
            .ok_or_else(|| corrupt(key, "fingerprint is not 64 hex digits"))?,
        fence: number("fence")?,
        state,
        steps: journal,
        arguments: fields.get("args").cloned(),
        created_at: time("created_at")?,
        updated_at: time("updated_at")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keys_share_one_hash_tag() {
        let k = RecordKeys::new("app", &RecordKey::from_stored("abc"));
        assert_eq!(k.rec, "app:{abc}:rec");
        assert_eq!(k.steps, "app:{abc}:steps");
        assert_eq!(k.fence, "app:{abc}:fence");
        let back = RecordKeys::from_rec(&k.rec).expect("a record hash name");
        assert_eq!(back.fence, k.fence);
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(check_prefix("a{b}").is_err());
        assert!(check_prefix("app:idem").is_ok());
    }

    #[test]
    fn scan_patterns_escape_globs() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn durations_are_clamped_to_exact_doubles() {
        assert_eq!(millis(Duration::MAX), 1_000_000_000_000_000);
        assert!(millis(Duration::MAX) * 3 < 1 << 53);
    }
}

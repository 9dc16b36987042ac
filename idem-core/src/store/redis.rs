//! A Redis store, for fleets of workers on many hosts.
//!
//! Every state change is one Lua script run with `EVALSHA`, so each decision of the record
//! state machine ([`machine`]) is atomic on the server. Lease and
//! expiry decisions read the server's clock (`TIME` inside the script), never the client's.
//!
//! # The server must never evict
//!
//! Under any `maxmemory-policy` but `noeviction`, Redis deletes keys when memory runs short:
//! `allkeys-*` deletes InProgress records (a second worker acquires a key while the first
//! still runs), `volatile-*` deletes completed records and fence counters, which carry a TTL
//! (a duplicate runs the call again). So [`RedisStore::connect`] reads the policy with
//! `CONFIG GET maxmemory-policy` and refuses any other, saying how to fix it (`CONFIG SET
//! maxmemory-policy noeviction`, in redis.conf too, or in a managed service's parameter
//! group). Managed services that refuse `CONFIG GET` are refused as well, unless the operator
//! asserts the policy with [`RedisOptions::assume_noeviction`]. The check runs at connect
//! time only: a policy changed later goes unnoticed.
//!
//! A server that may not evict fails writes once it is full (`OOM command not allowed`):
//! claims fail with [`StoreError::Unavailable`] and nothing executes, which is safe but an
//! outage. What keeps memory bounded: completed records expire at their TTL; Unknown records
//! expire after the store's Unknown retention ([`RedisStore::with_unknown_retention`],
//! default [`DEFAULT_UNKNOWN_RETENTION`]) or sooner by [`Store::purge_expired`]; fence
//! counters expire after the fence retention once their record is gone. An InProgress
//! record whose worker died stays until its key is claimed again (taken over, or turned
//! Unknown) or an operator releases it: [`Store::list`] shows them. Give the server headroom
//! and alert on its memory.
//!
//! # Key layout
//!
//! A record under [`RecordKey`] `K`, in a store created with prefix `P`, is three keys that
//! share the cluster hash tag `{K}`, so one record always lives in one slot:
//!
//! | key | type | holds | expiry |
//! |---|---|---|---|
//! | `P:{K}:rec` | hash | `key`, `tool`, `tenant`, `fp` (fingerprint, hex), `fence`, `state` (`in_progress`, `completed`, `unknown`), `lease_until`, `outcome` (the [`Outcome`] as JSON), `expires_at`, `since`, `last_error`, `args`, `created_at`, `updated_at`, and one `step:<name>` field per journaled step | none while InProgress; the Unknown retention after it became Unknown; at `expires_at` + [`EVICTION_GRACE`] once Completed |
//! | `P:{K}:steps` | list | journaled step names, in order | as the record |
//! | `P:{K}:fence` | string | the last fence issued under `K` | none while the record is InProgress; the fence retention (default [`DEFAULT_FENCE_RETENTION`]) after the record expires, is purged or is released |
//!
//! Timestamps are milliseconds since the Unix epoch on the server's clock, as decimal
//! strings. A record written before tenants were kept has no `tenant` field and reads back
//! with an empty tenant.
//!
//! Completed records are reported absent by [`Store::get`] once past `expires_at`, and
//! removed by Redis a little later or by [`Store::purge_expired`], which also removes
//! Unknown records older than its [`PurgeFilter::unknown_retention`] (never InProgress ones).
//!
//! The prefix may not contain `{` or `}`, which would move the hash tag.
//!
//! # Fences
//!
//! A key with no record gets, as its fence, the server's `TIME` in milliseconds, or one more
//! than the key's fence counter or the record's fence if either is greater (as
//! [`machine::first_fence`] does for the other stores); a take-over, a resolve or a
//! settlement adds 1. The counter outlives its record, so a key released and claimed again
//! in the same millisecond still moves on. Because a take-over needs an expired lease, a key
//! gains at most one fence per millisecond of leases: a fence is at most the clock when it
//! was issued, plus the few that a release, a resolve or a zero lease add within one
//! millisecond.
//!
//! So when the data is lost (a restart without persistence, a failover to a replica that
//! lagged, a `FLUSHALL`), the next claim of a key gets a fence greater than any fence
//! issued before the loss, and a holder that was running then is refused (`Fenced`) when it
//! tries to record its outcome, renew or journal. This holds as long as the clock of the
//! server that issues the new fence is not behind the moment the old fence was issued:
//! after a failover, a new primary whose clock is behind the old one's by more than the
//! failover took, or a clock stepped back, could issue an old fence again. Keep the
//! servers' clocks synchronised (NTP skew is milliseconds; a failover takes seconds).
//!
//! Fences protect the record, not the world: they stop a stale holder from overwriting a
//! newer outcome, not from applying its effect. What a lost record costs is below.
//!
//! # Persistence
//!
//! What a crash or a restart loses depends on the server's configuration, not on idem:
//!
//! | configuration | acknowledged writes lost |
//! |---|---|
//! | no persistence (`save ""`, `appendonly no`) | everything, on any restart |
//! | RDB snapshots only (`save <seconds> <changes>`) | everything since the last snapshot, typically minutes |
//! | AOF, `appendfsync everysec` (the usual setting) | up to about one second (two on a slow disk) when the host crashes or loses power; usually none when only the Redis process dies, since the writes reached the OS already |
//! | AOF, `appendfsync always` | none once acknowledged, on a disk that honours `fsync`; every write waits for the disk |
//!
//! Also beware a primary without persistence that a supervisor restarts: it comes back
//! empty and its replicas copy the empty data set, so they lose everything too.
//!
//! # Replication
//!
//! Redis replicates asynchronously: the primary acknowledges a write before any replica has
//! it, and a failover (Sentinel, Cluster, a managed service) to a replica that had not
//! received it loses it, `appendfsync always` on the primary notwithstanding.
//! [`RedisOptions::wait_for_replicas`] sends `WAIT numreplicas timeout` after each state
//! change (in the same pipeline, on the same connection) and fails the operation with
//! [`StoreError::Unavailable`], saying how many replicas acknowledged, when fewer than asked
//! did so in time. What that does and does not give:
//!
//! - A write reported done is in the memory of that many replicas; a failover to one of them
//!   keeps it. Not on their disks (`WAITAOF`, Redis 7.2, would wait for that; it is not
//!   used), and a failover may still pick a replica that missed it: `WAIT` makes a loss
//!   less likely, it does not make Redis strongly consistent.
//! - A write the replicas did not acknowledge is not undone: it stands on the primary and is
//!   lost only if the primary fails over before it replicates. The error says so, and what
//!   follows for each operation: an unconfirmed **claim** is given back at once (a new
//!   record is released; a take-over keeps the earlier journal and gets an expired lease) so
//!   the caller, told it holds nothing, leaves nothing held and runs nothing; an unconfirmed
//!   **complete** leaves the outcome recorded on the primary, and the dispatcher reports a
//!   store error for a call whose effect happened (treat it as ambiguous, never as done); an
//!   unconfirmed renew, journal, mark-Unknown, release, resolve, settlement or purge stands
//!   on the primary and fails likewise. A script that changed nothing (a fenced holder, a
//!   duplicate finding a record) is not failed for the replicas' sake.
//! - `WAIT` blocks the connection it is sent on, and a store has one multiplexed
//!   connection: while replicas lag, every operation of the store queues behind the waits.
//!   Keep the timeout short (tens to hundreds of milliseconds); it must be shorter than the
//!   5 s response timeout.
//! - `min-replicas-to-write` on the primary is complementary: it refuses writes (and so
//!   claims: nothing runs) while fewer replicas are connected.
//!
//! # What a loss costs
//!
//! Whatever is lost, by eviction (refused above), a restart or a failover:
//!
//! - a **Completed** record: a duplicate of the call runs it again. An `idempotent_write`
//!   passes the provider the same downstream key, so a provider that deduplicates by it
//!   applies the effect once; a `non_idempotent_write` or `irreversible` call applies its
//!   effect a second time;
//! - an **InProgress** record: a second worker acquires the key while the first still runs.
//!   Both execute; the first is fenced when it records, renews or journals, so the record
//!   keeps the second's outcome, but its effect may already be applied;
//! - an **Unknown** record: the call can run again, which Unknown exists to prevent;
//! - a **fence counter** alone: nothing, since fences restart from the clock.
//!
//! For calls that must never run twice, use AOF with `appendfsync always`, replicas with
//! [`RedisOptions::wait_for_replicas`], and a downstream that deduplicates by
//! the idempotency key; or a store whose commit is durable (SQLite on one host, PostgreSQL
//! with synchronous replication).
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
use redis::{ErrorKind, RedisError, RedisResult, Script, ServerErrorKind, Value};

use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine;
use crate::store::{
    Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, DEFAULT_UNKNOWN_RETENTION, ListFilter,
    PurgeFilter, Store, StoreError,
};

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
-- The next fence under the key: one more than any fence the counter or the record holds,
-- and, for a new record (`seed`), at least the clock in ms, so that a key whose record and
-- counter were lost (a restart without persistence, a failover to a lagging replica, a flush)
-- still never hands out a fence issued before. The counter is kept without expiry while the
-- record lives (SET clears any TTL).
local function next_fence(seed)
  local f = (tonumber(redis.call('GET', fk) or '0') or 0) + 1
  local current = (num('fence') or 0) + 1
  if current > f then f = current end
  if seed and now > f then f = now end
  redis.call('SET', fk, s(f))
  return f
end
local function settle_expiry(expires_at, grace, retention)
  redis.call('PEXPIREAT', rk, s(expires_at + grace))
  redis.call('PEXPIREAT', sk, s(expires_at + grace))
  redis.call('PEXPIREAT', fk, s(expires_at + grace + retention))
end
-- An Unknown record is deleted by Redis once the store's Unknown retention has passed, so a
-- flood of ambiguous failures cannot fill a server that may not evict.
local function unknown_expiry(retention, fence_retention)
  redis.call('PEXPIREAT', rk, s(now + retention))
  redis.call('PEXPIREAT', sk, s(now + retention))
  redis.call('PEXPIREAT', fk, s(now + retention + fence_retention))
end
"#;

/// ARGV: key, tool, fingerprint, lease ms, orphan policy, has arguments (`1`/`0`), arguments,
/// tenant, Unknown retention ms, fence retention ms.
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
  local f = next_fence(true)
  redis.call('DEL', rk, sk)
  redis.call('HSET', rk, 'key', ARGV[1], 'tool', ARGV[2], 'tenant', ARGV[8], 'fp', ARGV[3],
    'fence', s(f),
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
    local f = next_fence(false)
    redis.call('HSET', rk, 'fence', s(f), 'lease_until', s(now + lease), 'updated_at', s(now))
    return {'acquired', s(f), '1', read()}
  end
  redis.call('HSET', rk, 'state', 'unknown', 'since', s(now),
    'last_error', "the holder's lease expired before it recorded an outcome",
    'updated_at', s(now))
  redis.call('HDEL', rk, 'lease_until')
  unknown_expiry(tonumber(ARGV[9]), tonumber(ARGV[10]))
  return {'marked_unknown', read()}
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

/// ARGV: fence, error, Unknown retention ms, fence retention ms.
const MARK_UNKNOWN: &str = r#"
if not held(ARGV[1]) then return {'fenced'} end
redis.call('HSET', rk, 'state', 'unknown', 'since', s(now), 'last_error', ARGV[2],
  'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until')
unknown_expiry(tonumber(ARGV[3]), tonumber(ARGV[4]))
return {'ok'}
"#;

/// ARGV: outcome JSON, ttl ms, grace ms, fence retention ms.
const RESOLVE: &str = r#"
local state = redis.call('HGET', rk, 'state')
if state == false then return {'not_found'} end
if state == 'completed' then return {'wrong_state', state} end
local f = next_fence(false)
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
local f = next_fence(false)
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', rk, 'fence', s(f), 'state', 'completed', 'outcome', ARGV[2],
  'expires_at', s(expires_at), 'updated_at', s(now))
redis.call('HDEL', rk, 'lease_until', 'since', 'last_error')
settle_expiry(expires_at, tonumber(ARGV[4]), tonumber(ARGV[5]))
return {'ok'}
"#;

/// ARGV: Unknown retention ms, fence retention ms, tenant given (`1`/`0`), tenant. Deletes the
/// record if [`machine::is_purgeable`] says so: completed and past its expiry, or Unknown for
/// longer than the retention; of the tenant, if one is given.
const PURGE: &str = r#"
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

/// How a [`RedisStore`] treats the server it connects to: what it may assume about the
/// server's eviction policy, and whether each write waits for replicas. The default checks
/// the policy and does not wait.
///
/// ```
/// use std::time::Duration;
/// use idem_core::store::redis::RedisOptions;
///
/// // A managed service that forbids `CONFIG GET`, with `maxmemory-policy noeviction` set in
/// // its parameter group, and one replica that must hold every write before it counts.
/// let options = RedisOptions::new()
///     .assume_noeviction()
///     .wait_for_replicas(1, Duration::from_millis(250));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    assume_noeviction: bool,
    replicas: Option<ReplicaAcks>,
}

impl RedisOptions {
    /// Check the eviction policy, do not wait for replicas.
    ///
    /// ```
    /// let options = idem_core::store::redis::RedisOptions::new();
    /// # let _ = options;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Do not ask the server for its `maxmemory-policy`: the operator asserts it is
    /// `noeviction`. For managed services that refuse `CONFIG GET` (set the policy in the
    /// service's parameter group). An evicting server then deletes records and fence counters
    /// under memory pressure, and calls run twice: see the [module documentation](self).
    ///
    /// ```
    /// let options = idem_core::store::redis::RedisOptions::new().assume_noeviction();
    /// # let _ = options;
    /// ```
    pub fn assume_noeviction(mut self) -> Self {
        self.assume_noeviction = true;
        self
    }

    /// After every state change, send `WAIT replicas timeout` and require that many replicas
    /// to acknowledge the write within `timeout`; when fewer do, the operation fails with
    /// [`StoreError::Unavailable`] saying how many did (the write stays on the primary: see
    /// [Replication](self#replication)). `replicas` 0 turns waiting off. `timeout` is
    /// raised to 1 ms (`WAIT` with 0 would block forever) and must be shorter than the
    /// connection's response timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = idem_core::store::redis::RedisOptions::new()
    ///     .wait_for_replicas(2, Duration::from_millis(100));
    /// # let _ = options;
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some(ReplicaAcks {
            replicas,
            timeout: timeout.max(Duration::from_millis(1)),
        });
        self
    }
}

/// How many replicas must acknowledge each write, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplicaAcks {
    replicas: u32,
    timeout: Duration,
}

/// A write the primary made but fewer replicas than required acknowledged.
#[derive(Debug, Clone, Copy)]
struct Unconfirmed {
    acked: i64,
    acks: ReplicaAcks,
}

impl Unconfirmed {
    /// The error for `what` (e.g. "the outcome") under `key`, and what follows from it.
    fn error(&self, key: &RecordKey, what: &str, consequence: &str) -> StoreError {
        let wanted = self.acks.replicas;
        StoreError::Unavailable(format!(
            "{what} for key {key} was written on the Redis primary, but only {} of {wanted} \
             replica{} acknowledged it within {} ms (WAIT): {consequence}",
            self.acked,
            if wanted == 1 { "" } else { "s" },
            millis(self.acks.timeout),
        ))
    }
}

/// A [`Store`] on Redis, shared by any number of workers on any number of hosts.
///
/// Cloning is cheap: clones share one multiplexed connection, which reconnects on its own
/// after the server went away, and which a store made by [`connect`](RedisStore::connect)
/// replaces after a command timed out on it. See the [module documentation](self) for the key
/// layout, what the server must be configured with, and what persistence and replication
/// guarantee.
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
    unknown_retention: Duration,
    replicas: Option<ReplicaAcks>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("max_outcome_bytes", &self.max_outcome_bytes)
            .field("fence_retention", &self.fence_retention)
            .field("unknown_retention", &self.unknown_retention)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connect to the server at `url` (`redis://host:port/db`, `rediss://` for TLS if the
    /// crate was built with TLS), check that it never evicts keys, and load the scripts.
    /// Every key the store writes starts with `prefix` followed by `:`. The same as
    /// [`connect_with`](RedisStore::connect_with) and [`RedisOptions::new`].
    ///
    /// Fails with [`StoreError::Unavailable`] when the URL is invalid, the prefix contains `{`
    /// or `}`, the server does not answer within about ten seconds, its `maxmemory-policy` is
    /// not `noeviction`, or it refuses to tell (see [`RedisOptions::assume_noeviction`]).
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
        Self::connect_with(url, prefix, RedisOptions::new()).await
    }

    /// [`connect`](RedisStore::connect) with options: a policy the operator asserts, replicas
    /// to wait for.
    ///
    /// Fails as `connect` does, and when the replica timeout is not shorter than the
    /// connection's response timeout (5 s).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use idem_core::store::redis::{RedisOptions, RedisStore};
    ///
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let options = RedisOptions::new().wait_for_replicas(1, Duration::from_millis(250));
    /// let store = RedisStore::connect_with("redis://127.0.0.1:6379/", "app", options).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with(
        url: &str,
        prefix: &str,
        options: RedisOptions,
    ) -> Result<Self, StoreError> {
        check_prefix(prefix)?;
        if let Some(acks) = options.replicas
            && acks.timeout >= RESPONSE_TIMEOUT
        {
            return Err(StoreError::Unavailable(format!(
                "the replica timeout of {} ms is not shorter than the {} s response timeout: \
                 every write that waited for it would time out instead",
                millis(acks.timeout),
                RESPONSE_TIMEOUT.as_secs()
            )));
        }
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
        let store = Self::over(Connection::new(conn, Some(client)), prefix, &options);
        if !options.assume_noeviction {
            store.check_eviction_policy().await?;
        }
        let (_, mut conn) = store.conn.manager();
        for script in store.scripts.all() {
            script.load_async(&mut conn).await.map_err(unavailable)?;
        }
        Ok(store)
    }

    /// A store over a connection the caller configured (timeouts, retries), after checking
    /// that the server never evicts keys. Scripts are loaded on first use. The same as
    /// [`from_manager_with`](RedisStore::from_manager_with) and [`RedisOptions::new`].
    ///
    /// Fails when the prefix contains `{` or `}`, or the server's `maxmemory-policy` is not
    /// `noeviction` or cannot be read.
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
    /// let store = RedisStore::from_manager(conn, "myapp:idem").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_manager(conn: ConnectionManager, prefix: &str) -> Result<Self, StoreError> {
        Self::from_manager_with(conn, prefix, RedisOptions::new()).await
    }

    /// [`from_manager`](RedisStore::from_manager) with options. A replica timeout must be
    /// shorter than the response timeout the manager was configured with.
    ///
    /// ```no_run
    /// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
    /// use idem_core::store::redis::{RedisOptions, RedisStore};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = ConnectionManager::new_with_config(client, ConnectionManagerConfig::new()).await?;
    /// let options = RedisOptions::new().assume_noeviction();
    /// let store = RedisStore::from_manager_with(conn, "myapp:idem", options).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_manager_with(
        conn: ConnectionManager,
        prefix: &str,
        options: RedisOptions,
    ) -> Result<Self, StoreError> {
        check_prefix(prefix)?;
        let store = Self::over(Connection::new(conn, None), prefix, &options);
        if !options.assume_noeviction {
            store.check_eviction_policy().await?;
        }
        Ok(store)
    }

    /// A store with default limits over `conn`; the prefix is checked already.
    fn over(conn: Connection, prefix: &str, options: &RedisOptions) -> Self {
        RedisStore {
            conn: Arc::new(conn),
            prefix: prefix.to_owned(),
            scripts: Arc::new(Scripts::new()),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            fence_retention: DEFAULT_FENCE_RETENTION,
            unknown_retention: DEFAULT_UNKNOWN_RETENTION,
            replicas: options.replicas,
        }
    }

    /// Refuse a server that may evict keys: eviction deletes InProgress records (a second
    /// worker acquires a key while the first still runs), completed records and fence
    /// counters (a call runs again, a stale holder's fence is handed out again).
    async fn check_eviction_policy(&self) -> Result<(), StoreError> {
        let reply: RedisResult<Value> = {
            let (generation, mut conn) = self.conn.manager();
            let reply = redis::cmd("CONFIG")
                .arg("GET")
                .arg("maxmemory-policy")
                .query_async(&mut conn)
                .await;
            if let Err(e) = &reply {
                self.conn.failed(generation, e);
            }
            reply
        };
        let reply = match reply {
            Ok(v) => v,
            Err(e) if refused(&e) => return Err(policy_unknown(&e.to_string())),
            Err(e) => return Err(unavailable(e)),
        };
        match config_value(&reply, "maxmemory-policy") {
            Some(policy) if policy == "noeviction" => Ok(()),
            Some(policy) => Err(StoreError::Unavailable(format!(
                "Redis may evict keys: its maxmemory-policy is `{policy}`, and an evicted \
                 record lets a second worker run a call that is still running, or run a \
                 completed one again. Set it to `noeviction`: `CONFIG SET maxmemory-policy \
                 noeviction` (and `maxmemory-policy noeviction` in redis.conf so a restart \
                 keeps it), or in the managed service's parameter group"
            ))),
            None => Err(policy_unknown("the reply named no such setting")),
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

    /// How long Redis keeps an Unknown record before deleting it by itself (default
    /// [`DEFAULT_UNKNOWN_RETENTION`], counted from when it became Unknown). A server that may
    /// not evict must not fill up with records nobody settles; [`Store::purge_expired`] with a
    /// shorter [`PurgeFilter::unknown_retention`] deletes them sooner, but not later than this.
    /// Once an Unknown record is gone a duplicate of its call runs again: keep it longer than
    /// verification and operators need.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use idem_core::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem_core::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app")
    ///     .await?
    ///     .with_unknown_retention(Duration::from_secs(7 * 24 * 3600));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_unknown_retention(mut self, retention: Duration) -> Self {
        self.unknown_retention = retention;
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

    /// Run a script against one record and split its reply into a status and the rest. When
    /// the store waits for replicas and the script wrote (`ok`, `acquired`,
    /// `marked_unknown`) but too few acknowledged, fail: `what` names the write in the error.
    async fn run(
        &self,
        script: &Script,
        key: &RecordKey,
        what: &str,
        args: &[&[u8]],
    ) -> Result<(String, Vec<Value>), StoreError> {
        let (status, rest, unconfirmed) = self.exec(script, key, args, true).await?;
        match unconfirmed {
            Some(u) if wrote(&status) => Err(u.error(
                key,
                what,
                "it stands there, and is lost if the primary fails over before it replicates (report it \
                 as ambiguous, never as done)",
            )),
            _ => Ok((status, rest)),
        }
    }

    /// Run a script; with `wait`, and replicas to wait for, `WAIT` in the same pipeline
    /// (`WAIT` counts the writes of the connection it is sent on, so it may not go on a
    /// connection the manager made after the script's). Also returns whether the replicas
    /// fell short, whatever the script did.
    async fn exec(
        &self,
        script: &Script,
        key: &RecordKey,
        args: &[&[u8]],
        wait: bool,
    ) -> Result<(String, Vec<Value>, Option<Unconfirmed>), StoreError> {
        let keys = self.keys(key);
        let mut invocation = script.key(&keys.rec);
        invocation.key(&keys.steps).key(&keys.fence);
        for arg in args {
            invocation.arg(*arg);
        }
        let invocation = &invocation;
        let acks = self.replicas.filter(|_| wait);
        // A state-changing script: sent again only if it certainly never reached the server.
        let (reply, acked): (Value, Option<i64>) = match acks {
            None => {
                let reply = self
                    .call(Resend::IfNeverSent, move |mut conn| async move {
                        invocation.invoke_async(&mut conn).await
                    })
                    .await?;
                (reply, None)
            }
            Some(acks) => {
                let mut pipe = redis::pipe();
                pipe.invoke_script(invocation)
                    .cmd("WAIT")
                    .arg(acks.replicas)
                    .arg(millis(acks.timeout));
                let pipe = &pipe;
                let (reply, acked) = self
                    .call(Resend::IfNeverSent, move |mut conn| async move {
                        match pipe.query_async(&mut conn).await {
                            // The script did not run: load it and send both again.
                            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                                script.load_async(&mut conn).await?;
                                pipe.query_async(&mut conn).await
                            }
                            other => other,
                        }
                    })
                    .await?;
                (reply, Some(acked))
            }
        };
        let unconfirmed = acks.zip(acked).and_then(|(acks, acked)| {
            (acked < i64::from(acks.replicas)).then_some(Unconfirmed { acked, acks })
        });
        let Value::Array(mut items) = reply else {
            return Err(corrupt(key, format!("unexpected script reply {reply:?}")));
        };
        if items.is_empty() {
            return Err(corrupt(key, "empty script reply"));
        }
        let status =
            text(&items.remove(0)).ok_or_else(|| corrupt(key, "script reply without a status"))?;
        Ok((status, items, unconfirmed))
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

    /// One `SCAN` step over this store's record hashes: the next cursor, and the keys of the
    /// records found.
    async fn scan(&self, cursor: u64) -> Result<(u64, Vec<(RecordKeys, RecordKey)>), StoreError> {
        let pattern = format!("{}:{{*}}:rec", glob_escape(&self.prefix));
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let scan = &scan;
        let (next, names): (u64, Vec<String>) = self
            .call(Resend::AfterDrop, move |mut conn| async move {
                scan.query_async(&mut conn).await
            })
            .await?;
        let keys = names
            .iter()
            .filter_map(|name| {
                RecordKeys::from_rec(name).map(|k| (k, RecordKey::from_stored(name.as_str())))
            })
            .collect();
        Ok((next, keys))
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

    fn unknown_retention_ms(&self) -> u64 {
        millis(self.unknown_retention)
    }

    /// Undo a claim the replicas did not acknowledge, so that a worker told it holds nothing
    /// does not leave the key held until its lease ends (and, under `MarkUnknown`, turned
    /// Unknown for a call that never ran). A new record is released; a take-over keeps the
    /// earlier holder's journal and gets an expired lease, as the orphan it took over had.
    /// Neither waits for replicas. Returns the error to report.
    async fn give_back(
        &self,
        key: &RecordKey,
        fence: Fence,
        takeover: bool,
        unconfirmed: &Unconfirmed,
    ) -> StoreError {
        let undone = if takeover {
            self.exec(
                &self.scripts.renew,
                key,
                &[fence.to_string().as_bytes(), b"0"],
                false,
            )
            .await
        } else {
            let retention = self.retention_ms().to_string();
            self.exec(
                &self.scripts.release,
                key,
                &[fence.to_string().as_bytes(), retention.as_bytes()],
                false,
            )
            .await
        };
        let consequence = match undone {
            Ok((status, ..)) if status == "ok" => {
                "so it was given back: nothing holds the key".to_owned()
            }
            Ok((status, ..)) => format!("giving the claim back found it {status}"),
            Err(e) => format!(
                "giving the claim back failed ({e}): the key stays held until the lease ends"
            ),
        };
        unconfirmed.error(key, "the claim", &consequence)
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
        let (status, rest, unconfirmed) = self
            .exec(
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
                    request.tenant.as_bytes(),
                    self.unknown_retention_ms().to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
                true,
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("acquired", [fence, takeover, record]) => {
                let fence = text(fence)
                    .and_then(|f| f.parse::<Fence>().ok())
                    .ok_or_else(|| corrupt(key, "claim returned no fence"))?;
                let takeover = text(takeover).as_deref() == Some("1");
                if let Some(u) = unconfirmed {
                    return Err(self.give_back(key, fence, takeover, &u).await);
                }
                let record = decode_reply_record(key, record)?
                    .ok_or_else(|| corrupt(key, "claimed record is missing"))?;
                Ok(Claim::Acquired {
                    fence,
                    steps: record.steps,
                    takeover,
                })
            }
            ("existing" | "marked_unknown", [record]) => {
                if let Some(u) = unconfirmed.filter(|_| status == "marked_unknown") {
                    return Err(u.error(
                        key,
                        "the orphan turned Unknown",
                        "it stands there, and is lost if the primary fails over before it \
                         replicates",
                    ));
                }
                decode_reply_record(key, record)?
                    .map(Claim::Existing)
                    .ok_or_else(|| corrupt(key, "existing record is missing"))
            }
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
                "the outcome",
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
                "the release",
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
                "the renewed lease",
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
                "the journaled step",
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
                "the Unknown state",
                &[
                    fence.to_string().as_bytes(),
                    error.as_bytes(),
                    self.unknown_retention_ms().to_string().as_bytes(),
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

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let (now, mut records) = self.read(&[(self.keys(key), key.clone())]).await?;
        Ok(records.pop().flatten().filter(|r| machine::is_live(r, now)))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, keys) = self.scan(cursor).await?;
            if !keys.is_empty() {
                let (now, records) = self.read(&keys).await?;
                out.extend(records.into_iter().flatten().filter(|r| {
                    let wanted = match filter.state {
                        Some(kind) => r.state.kind() == kind,
                        None => r.state.kind() != StateKind::Completed,
                    };
                    wanted
                        && filter.tenant.as_ref().is_none_or(|t| *t == r.tenant)
                        && machine::is_live(r, now)
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
                "the resolved outcome",
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
                "the settlement",
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
                "the release",
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

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        let retention = millis(filter.unknown_retention).to_string();
        let fence_retention = self.retention_ms().to_string();
        let (has_tenant, tenant) = match &filter.tenant {
            Some(t) => ("1", t.as_str()),
            None => ("0", ""),
        };
        let mut purged = 0;
        let mut cursor = 0;
        while purged < filter.limit {
            let (next, keys) = self.scan(cursor).await?;
            if !keys.is_empty() {
                // Read first so only candidates cost a script call; the script decides again.
                let (now, records) = self.read(&keys).await?;
                for record in records.into_iter().flatten() {
                    if purged >= filter.limit {
                        break;
                    }
                    if !machine::is_purgeable(&record, filter, now) {
                        continue;
                    }
                    let (status, _) = self
                        .run(
                            &self.scripts.purge,
                            &record.key,
                            "the purge",
                            &[
                                retention.as_bytes(),
                                fence_retention.as_bytes(),
                                has_tenant.as_bytes(),
                                tenant.as_bytes(),
                            ],
                        )
                        .await?;
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

/// Whether the server answered a command with a refusal (unknown or renamed command, no ACL
/// permission) rather than failing to answer.
fn refused(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm)
            | ErrorKind::Extension
    )
}

/// The server would not say what its eviction policy is.
fn policy_unknown(why: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "cannot read Redis's maxmemory-policy (CONFIG GET maxmemory-policy: {why}). idem needs \
         `noeviction`: an evicted record lets a second worker run a call that is still \
         running, or run a completed one again. If the server is a managed service that \
         forbids CONFIG and its parameter group sets maxmemory-policy to noeviction, connect \
         with `RedisOptions::new().assume_noeviction()`"
    ))
}

/// The value of `name` in a `CONFIG GET` reply (a flat array in RESP2, a map in RESP3).
fn config_value(reply: &Value, name: &str) -> Option<String> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(flat) => flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).is_some_and(|k| k.eq_ignore_ascii_case(name)))
        .and_then(|(_, v)| text(v))
}

/// Whether a script's status says it changed the record (what replicas must acknowledge).
fn wrote(status: &str) -> bool {
    matches!(status, "ok" | "acquired" | "marked_unknown")
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
        // Records written before tenants were kept have none.
        tenant: fields.get("tenant").cloned().unwrap_or_default(),
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

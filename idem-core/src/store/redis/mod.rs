//! A Redis store, for fleets of workers on many hosts.
//!
//! Every state change is one Lua script run with `EVALSHA`, so each decision of the record
//! state machine ([`machine`](crate::store::machine)) is atomic on the server. Lease and
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
//! | `P:{K}:rec` | hash | `key`, `tool`, `tenant`, `fp` (fingerprint, hex), `fence`, `state` (`in_progress`, `completed`, `unknown`), `lease_until`, `outcome` (the [`Outcome`] as JSON), `expires_at`, `since`, `last_error`, `args`, `created_at`, `updated_at`, `contract` (the [`Contract`](crate::contract::Contract) the record was made under, as JSON; absent in records from before contracts), and one `step:<name>` field per journaled step | none while InProgress; the Unknown retention after it became Unknown; at `expires_at` + [`EVICTION_GRACE`] once Completed |
//! | `P:{K}:steps` | list | journaled step names, in order | as the record |
//! | `P:{K}:fence` | string | the last fence issued under `K` | none while the record is InProgress; the fence retention (default [`DEFAULT_FENCE_RETENTION`]) after the record expires, is purged or is released |
//!
//! Pending approvals ([`approvals`](crate::store::approvals)) are the string `P:{K}:approval`
//! (the [`PendingApproval`](crate::store::approvals::PendingApproval) as JSON, in the record's
//! slot) and the set `P:approvals` of the record keys that have one, which lists them. Neither
//! expires. The set is one key for the whole store, in no record's slot, so no script touches
//! it and an entry: a record key is added to the set by its own command before the swap that
//! writes its entry and again after it (a removal between the two may have taken it out), and
//! taken out after the entry is deleted (and put back if a new entry came meanwhile). A process
//! that dies between a swap and the second add can leave an entry unindexed until its next
//! swap. The listing skips a member without an entry
//! (a swap that failed or lost its race, a removal under way).
//!
//! A budget ([`Store::swap_budget`]) is the string `P:budget:<D>`, `D` the SHA-256 of its
//! scope in hex: one key per scope whatever the scope holds (no scope text in a key name, none
//! that could move a hash tag), so its compare-and-swap is one script on one key
//! (`swap_budget.lua`), in a cluster too. It carries its TTL (`PX`, the server's clock) and is
//! gone once it expires.
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
//! A key with no record gets, as its fence, the server's `TIME` in microseconds, or one more
//! than the key's fence counter or the record's fence if either is greater (as
//! [`machine::first_fence`](crate::store::machine::first_fence) does in milliseconds for the
//! other stores); a take-over, a resolve or a settlement adds 1. Microseconds because after
//! a flush a new claim may come within the millisecond of the lost one, and must still get a
//! greater fence; scripts run one at a time, each for longer than a microsecond. The counter
//! outlives its record, so a key released and claimed again in the same microsecond still
//! moves on. A fence is at most the clock in microseconds when it was issued, plus the few
//! that a release, a resolve or a zero lease add within one microsecond.
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
//!   unconfirmed renew, journal, mark-Unknown, release, resolve, settlement, purge or swap of
//!   a pending approval stands on the primary and fails likewise. A script that changed
//!   nothing (a fenced holder, a duplicate finding a record, a swap that found another
//!   entry) is not failed for the replicas' sake.
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
//! or a periodic job, not on the request path. Each page of a paged listing
//! ([`ListFilter::after`](crate::store::ListFilter::after)) walks the whole prefix again:
//! page with a large limit (a recovery pass reads a page of
//! `RecoveryOptions::limit` records at a time).
//!
//! # Redis Cluster
//!
//! [`RedisStore::connect_cluster`] talks to a Redis Cluster through redis-rs's cluster
//! client. The key layout is the same, so records read back the same in either mode. What
//! holds there:
//!
//! - **One record, one slot.** A record's keys and its pending approval share the hash tag
//!   `{K}`, so they live in one slot, on one primary. Every script touches only them and runs
//!   atomically on that primary: each decision of the state machine is as atomic as on one
//!   server. Reads of several records are never sent as one command: each record is read on
//!   its own, by a read-only script (its hash, its steps and the `TIME` of its primary,
//!   atomically: a `MULTI` answered `MOVED` is not sent on by the client, a script is), a few at
//!   once. The index of pending approvals is the one key outside any record's slot, written
//!   by its own commands (see the key layout).
//! - **Redirects and failover are the client's.** `MOVED` and `ASK` (a slot migrating) are
//!   followed; after a primary fails over, the client refreshes its slot map and sends the
//!   request to the new primary, within the 5 s response timeout that bounds a request and
//!   its retries. The client also re-sends a request after its connection to a node dropped,
//!   which the single-server store never does for a state change: a script whose reply was
//!   lost may run twice. That runs no call twice (a second claim finds the first's record and
//!   reports it held; a second complete finds it settled), but the caller may be told of a
//!   failure (`InProgress`, `Fenced`) for a write that was made.
//! - **A failover loses what replication had not carried**, as under "Replication" above:
//!   the primary acknowledged, the replica never got it. The fences hold as described
//!   ("Fences"), given synchronised clocks: the new primary issues fences from its own clock.
//! - **`WAIT` is per primary.** [`RedisOptions::wait_for_replicas`] sends `WAIT` in the same
//!   pipeline as the script, routed with it to the primary that owns the record, on the same
//!   connection: it counts that primary's replicas acknowledging that write. The index of
//!   pending approvals, on another primary, is not waited for.
//! - **Every primary answers for itself.** The eviction check asks each primary for its
//!   `maxmemory-policy` at connect time (a primary added later is not asked). The operator
//!   listings and the purge `SCAN` every primary in turn (the client's slot map at the start
//!   of the walk) and read each record on its primary: O(keyspace of the whole cluster), one
//!   round trip per record found. A failover during a walk fails it; run it again.
//!
//! Durations are clamped to [`MAX_DURATION`] so the millisecond arithmetic of the scripts
//! (Lua numbers are doubles) stays exact.//!
//! # The folder
//!
//! `scripts/` holds one Lua file per state change (`scripts.rs` loads them), `keys.rs` the key
//! layout, `connection.rs` the connection (to one server or to a cluster) and its replacement
//! after a timeout, `cluster.rs` the cluster client and what runs on every primary, `replicas.rs`
//! the waits for replicas, `codec.rs` replies to values and records, `commands.rs` how one
//! operation reaches the server, and `store.rs` the [`Store`] impl.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

mod cluster;
mod cluster_connect;
mod codec;
mod commands;
mod connection;
mod keys;
mod replicas;
mod scripts;
mod store;

pub use codec::MAX_DURATION;

/// One connection attempt.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// One command; a 1 MiB outcome on a busy server must fit in it. A connection on which a
/// command timed out is replaced (see `connection.rs`).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

use connection::{
    Conn, Connection, Maker, check_replica_timeout, manager_config, unavailable, within_budget,
};
use keys::check_prefix;
use replicas::ReplicaAcks;
use scripts::Scripts;

#[cfg(doc)]
use crate::key::RecordKey;
#[cfg(doc)]
use crate::record::Outcome;
use crate::store::layer::{Layer, Limited, Limits};
use crate::store::{DEFAULT_UNKNOWN_RETENTION, StoreError};
#[cfg(doc)]
use crate::store::{PurgeFilter, Store};

/// still in Redis but reported absent.
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// How long a key's fence counter is kept after its record expired or was released.
pub const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a [`RedisStore`] treats the server it connects to: what it may assume about the
/// server's eviction policy, and whether each write waits for replicas. The default checks
/// the policy and does not wait.
///
/// ```
/// use std::time::Duration;
/// use idem::store::redis::RedisOptions;
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
    /// let options = idem::store::redis::RedisOptions::new();
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
    /// let options = idem::store::redis::RedisOptions::new().assume_noeviction();
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
    /// let options = idem::store::redis::RedisOptions::new()
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

/// A [`Store`] on Redis, shared by any number of workers on any number of hosts: a
/// [`RedisBackend`] behind the store [`Limits`].
///
/// Cloning is cheap: clones share one multiplexed connection (one per node of a cluster),
/// which reconnects on its own after the server went away, and which a store made by
/// [`connect`](RedisStore::connect) or [`connect_cluster`](RedisStore::connect_cluster)
/// replaces after a command timed out on it. See the [module documentation](self) for the key
/// layout, what the server must be configured with, and what persistence and replication
/// guarantee.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem::store::{Store, redis::RedisStore};
///
/// # async fn run() -> Result<(), idem::store::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/", "billing").await?;
/// let store: Arc<dyn Store> = Arc::new(store.with_max_outcome_bytes(256 * 1024));
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
pub type RedisStore = Limited<RedisBackend>;

/// The connection, scripts and settings of a [`RedisStore`], without its [`Limits`]: what the
/// layer wraps.
#[derive(Clone)]
pub struct RedisBackend {
    conn: Arc<Connection>,
    prefix: String,
    scripts: Arc<Scripts>,
    fence_retention: Duration,
    unknown_retention: Duration,
    replicas: Option<ReplicaAcks>,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("prefix", &self.prefix)
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
    /// use idem::store::redis::RedisStore;
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
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
    /// use idem::store::redis::{RedisOptions, RedisStore};
    ///
    /// # async fn run() -> Result<(), idem::store::StoreError> {
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
        check_replica_timeout(&options)?;
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {e}")))?;
        let conn = within_budget(ConnectionManager::new_with_config(
            client.clone(),
            manager_config(),
        ))
        .await?;
        let conn = Connection::new(Conn::Server(conn), Some(Maker::Server(client)));
        Self::over(conn, prefix, &options).ready(&options).await
    }

    /// Check the eviction policy (unless the options assume it) and load the scripts.
    async fn ready(self, options: &RedisOptions) -> Result<Self, StoreError> {
        if !options.assume_noeviction {
            self.inner.conn.check_eviction_policy().await?;
        }
        let (_, mut conn) = self.inner.conn.manager();
        for script in self.inner.scripts.all() {
            script.load_async(&mut conn).await.map_err(unavailable)?;
        }
        Ok(self)
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
    /// use idem::store::redis::RedisStore;
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
    /// use idem::store::redis::{RedisOptions, RedisStore};
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
        let store = Self::over(Connection::new(Conn::Server(conn), None), prefix, &options);
        if !options.assume_noeviction {
            store.inner.conn.check_eviction_policy().await?;
        }
        Ok(store)
    }

    /// A store with default limits over `conn`; the prefix is checked already.
    fn over(conn: Connection, prefix: &str, options: &RedisOptions) -> Self {
        let backend = RedisBackend {
            conn: Arc::new(conn),
            prefix: prefix.to_owned(),
            scripts: Arc::new(Scripts::new()),
            fence_retention: DEFAULT_FENCE_RETENTION,
            unknown_retention: DEFAULT_UNKNOWN_RETENTION,
            replicas: options.replicas,
        };
        Limits::default().layer(backend)
    }

    /// How long a key's fence counter outlives its record (default
    /// [`DEFAULT_FENCE_RETENTION`]). A holder that stalls longer than the record's TTL plus
    /// this retention could meet a new record carrying its old fence; keep it longer than any
    /// pause a worker can survive.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use idem::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app")
    ///     .await?
    ///     .with_fence_retention(Duration::from_secs(30 * 24 * 3600));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_fence_retention(mut self, retention: Duration) -> Self {
        self.inner.fence_retention = retention;
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
    /// # use idem::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app")
    ///     .await?
    ///     .with_unknown_retention(Duration::from_secs(7 * 24 * 3600));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_unknown_retention(mut self, retention: Duration) -> Self {
        self.inner.unknown_retention = retention;
        self
    }

    /// The prefix every key of this store starts with.
    ///
    /// ```no_run
    /// # use idem::store::redis::RedisStore;
    /// # async fn run() -> Result<(), idem::store::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "app").await?;
    /// assert_eq!(store.prefix(), "app");
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }
}

//! The embedded durable store: one SQLite file, shared safely by several processes on a host.
//!
//! Every state change runs inside `BEGIN IMMEDIATE` ... `COMMIT`: the store reads the row,
//! applies the same [`machine`] function the memory store applies, and writes what that
//! function says. `BEGIN IMMEDIATE` takes the database's write lock *before* the read, so two
//! connections (two processes) can never both decide on the same row, and SQLite makes
//! exactly the decisions the memory store makes.
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous = FULL` ([`Synchronous::Full`], the
//! default): every commit syncs the WAL to disk before the operation returns, so a recorded
//! claim or outcome survives a crash of the process, of the operating system, and a power
//! loss. That costs one `fsync` per state change (two per dispatch: the claim and the outcome).
//!
//! [`SqliteStore::with_synchronous`]`(`[`Synchronous::Normal`]`)` opts into SQLite's faster
//! setting for WAL mode: commits are appended to the WAL without a sync, which happens only
//! at checkpoints. A crash of the process loses nothing (the WAL is in the operating system's
//! page cache), but a power loss or an operating-system crash may roll back the last
//! transactions before it. The file is never corrupted; what is lost is records: a forgotten
//! outcome or claim means a retry finds no record and **runs the call again**, which for a
//! non-idempotent or irreversible tool is the duplicate effect this store exists to prevent.
//! Choose it only where losing the last moments of records on power loss is acceptable (a
//! disposable host, tools that are idempotent downstream anyway).
//!
//! The setting belongs to a connection, not to the file: it covers the one connection a
//! [`SqliteStore`] opens, which runs every operation and every checkpoint of that store.
//! Another process on the same file makes its own commits as durable as its own store says.
//! (`synchronous = FULL` is as durable as the disk's flush: a disk or a virtual machine that
//! acknowledges a flush it has not done can still lose writes.)
//!
//! # Several processes
//!
//! Each [`SqliteStore`] holds one connection for its operations. Writers wait for each other
//! up to a busy timeout of 5 s (on the blocking pool, see below), then the store retries a few
//! times before it reports [`StoreError::Unavailable`]; readers never wait for writers in WAL
//! mode. WAL relies on shared memory, so every process must run on the same host: do not put
//! the file on a network file system.
//!
//! # Where operations run
//!
//! rusqlite is synchronous. A write at `synchronous = FULL` (the default) waits for the disk
//! at its commit, which does not belong on an async thread: every write runs on tokio's
//! blocking pool, where it waits up to the busy timeout for other connections' locks. The
//! round trip through the pool (tens of microseconds) is small beside the `fsync`.
//!
//! Reads ([`Store::get`], [`Store::list`]) never sync, and at [`Synchronous::Normal`] neither
//! do writes: such an operation runs **inline, on the task that awaits it**, when it can start
//! at once: this store's connection is free and SQLite grants the lock without waiting. For
//! that attempt SQLite's busy handler is off, so SQLite never sleeps on another connection's
//! lock on the async thread: it reports busy at once instead. What then runs inline is one
//! short transaction: a lookup by key, one or two row writes appended to the WAL (the
//! operating system's page cache: at `synchronous = NORMAL` a commit does not `fsync`), and at
//! most two expired records evicted; tens of microseconds, or as long as the kernel takes to
//! accept a small write. Handing such an operation to a thread instead would cost more than
//! the operation itself: a round trip through tokio's blocking pool is itself tens of
//! microseconds. (SQLite may still retry briefly on its own when it races another connection
//! for the WAL's shared index; those retries are microseconds, not the busy timeout.)
//!
//! An operation that may run inline goes to the blocking pool instead, where it waits up to
//! the busy timeout as described above, when:
//! - another task of this process is using the connection;
//! - another connection (another process, another store on the same file) holds the write
//!   lock, or SQLite reports the database busy or locked for any other reason. The inline
//!   attempt then changed nothing (its transaction rolled back) and the pooled one starts
//!   afresh, reading the row again: the result is the one the pooled operation alone would
//!   have given;
//! - a checkpoint of this store is queued or running (see below);
//! - it is this store's first write after a checkpoint it ran (that write may restart the WAL
//!   from its beginning, which syncs the WAL's header: an `fsync`, kept off the async thread;
//!   when another process checkpointed, the restart, once per checkpoint, may fall to an
//!   inline write of this store);
//! - the store was built with [`SqliteStore::with_blocking_pool`] (every operation on the
//!   pool, reads included).
//!
//! Whichever way it runs, an operation is one transaction that finishes or rolls back; a
//! caller dropping its future cannot cut it in half.
//!
//! # Checkpoints
//!
//! SQLite's automatic checkpoint would copy the WAL back into the database file, with its
//! `fsync`s, inside whichever commit crosses its threshold: on the async thread. This store
//! turns it off for its connection and instead, once 1000 pages (SQLite's own threshold) went
//! into the WAL since the last checkpoint, as counted by a WAL hook at each of its commits,
//! runs `PRAGMA wal_checkpoint(PASSIVE)` on the blocking pool. The checkpoint holds the store's
//! connection while it runs (milliseconds): from the moment it is queued, operations stand
//! aside and wait for it on the pool, not on the async thread, so an async thread that finds
//! the connection free again and again cannot keep it waiting (an application that keeps
//! tokio's blocking pool full delays these operations until a thread is free). Holding the
//! connection, it catches up with the end of the WAL; a passive checkpoint never waits for
//! another connection, and what it could not copy (another process's reader still needed it)
//! the next one copies. Once a checkpoint has copied everything, the next write starts the WAL
//! over from its beginning, so for one process the WAL file stays about 1000 pages, not the
//! whole history. That restart needs a moment when no other connection is inside a transaction:
//! while several processes write without pause it may not come, and the WAL file grows until
//! it does (SQLite's own automatic checkpoints behave the same; measured with two processes
//! writing flat out for 8 s: about 100–200 MB here, 500 MB with SQLite's automatic
//! checkpoints). The file is reused, not grown further, once a restart succeeds.
//! When the last connection to the file closes, SQLite checkpoints and removes the WAL.
//!
//! # Clock and retention
//!
//! Lease and expiry decisions use the system clock ([`Timestamp::now`]), which all processes
//! on one host share. Each claim evicts up to two expired completed records, so the table
//! stays bounded without a janitor; [`Store::purge_expired`] evicts in larger batches, and
//! deletes Unknown records past the retention it is given.
//!
//! # Tenants
//!
//! Each record keeps the tenant of the claim that created it. Listing and purging by tenant
//! filter the rows the `(state, expires_at)` index finds (the records needing attention, the
//! expired ones): there is no index by tenant, which every claim and completion would pay
//! for. A file written before tenants (schema version 1) gains the column, empty for its
//! records, the first time a store opens it; an older idem then refuses the file.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, Row, TransactionBehavior, params};

use crate::canonical::Fingerprint;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine::{self, Write};
use crate::store::{
    Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, ListFilter, PurgeFilter, Store, StoreError,
};

/// The version of the schema this code reads and writes, kept in `PRAGMA user_version`.
/// Version 2 added the `tenant` column; [`migrate`] brings a version 1 file up to date.
const SCHEMA_VERSION: i64 = 2;

/// How long a connection waits for another connection's write lock before SQLite reports
/// `SQLITE_BUSY`: only ever on the blocking pool. An inline attempt does not wait at all.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times an operation is tried when SQLite still reports busy after the timeout.
/// SQLite returns `SQLITE_BUSY` without waiting in a few cases (a WAL being recovered by
/// another connection, a journal-mode change), which the busy timeout alone does not cover.
const BUSY_ATTEMPTS: u32 = 4;

/// The pause between attempts, multiplied by the attempt number.
const BUSY_BACKOFF: Duration = Duration::from_millis(50);

/// After how many pages written to the WAL the store checkpoints it: SQLite's own default
/// threshold for its automatic checkpoint, so the WAL stays about 4 MB (at 4 KiB pages).
const CHECKPOINT_PAGES: u32 = 1000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_records (
    key         TEXT PRIMARY KEY NOT NULL,
    tool        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    fence       INTEGER NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
    lease_until INTEGER,
    expires_at  INTEGER,
    since       INTEGER,
    last_error  TEXT,
    outcome     TEXT,
    steps       TEXT NOT NULL,
    arguments   TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    tenant      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idem_records_state_expires ON idem_records (state, expires_at);
";

/// What version 2 added to a version 1 table (where the column comes last, as in [`SCHEMA`]).
const ADD_TENANT: &str = "ALTER TABLE idem_records ADD COLUMN tenant TEXT NOT NULL DEFAULT ''";

/// The columns of a record, in the order [`decode`] reads them and [`put`] binds them.
macro_rules! columns {
    () => {
        "key, tool, fingerprint, fence, state, lease_until, expires_at, since, last_error, \
         outcome, steps, arguments, created_at, updated_at, tenant"
    };
}

const SELECT_ONE: &str = concat!("SELECT ", columns!(), " FROM idem_records WHERE key = ?1");

const UPSERT: &str = concat!(
    "INSERT INTO idem_records (",
    columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
     ON CONFLICT (key) DO UPDATE SET \
     tool = excluded.tool, fingerprint = excluded.fingerprint, fence = excluded.fence, \
     state = excluded.state, lease_until = excluded.lease_until, \
     expires_at = excluded.expires_at, since = excluded.since, \
     last_error = excluded.last_error, outcome = excluded.outcome, steps = excluded.steps, \
     arguments = excluded.arguments, created_at = excluded.created_at, \
     updated_at = excluded.updated_at, tenant = excluded.tenant"
);

/// The journal of a record with no steps, as JSON (`serde_json` writes an empty list so).
const NO_STEPS: &str = "[]";

const DELETE_ONE: &str = "DELETE FROM idem_records WHERE key = ?1";

/// Evict up to two expired completed records (see [`evict_on_claim`]). Every record is created
/// by a claim, so evicting more than one per claim keeps the backlog of expired records bounded.
///
/// The limit is a literal on purpose: SQLite plans a `LIMIT ?` with the value bound to it, so
/// it compiles the statement again whenever that parameter's binding changes, and rusqlite's
/// statement cache clears the bindings of every statement it takes back: a bound limit would
/// be compiled on every claim. Nothing else in this statement feeds the plan (the table has
/// no `ANALYZE` statistics), so it is compiled once per connection.
const EVICT_ON_CLAIM: &str = "DELETE FROM idem_records WHERE key IN (\
     SELECT key FROM idem_records WHERE state = 'completed' AND expires_at <= ?1 LIMIT 2)";

/// Delete up to `?4` records [`machine::is_purgeable`] describes: completed ones expired at
/// `?1`, Unknown ones since `?2` or earlier (the clock less the retention), of tenant `?3`
/// unless it is null. [`Store::purge_expired`], run by operators in batches whose size they
/// choose (compiled again when the size changes; it is not hot).
const PURGE_EXPIRED: &str = "DELETE FROM idem_records WHERE key IN (\
     SELECT key FROM idem_records \
     WHERE ((state = 'completed' AND expires_at <= ?1) OR (state = 'unknown' AND since <= ?2)) \
     AND (?3 IS NULL OR tenant = ?3) LIMIT ?4)";

const LIST_ATTENTION: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM idem_records WHERE state IN ('in_progress', 'unknown') \
     AND (?2 IS NULL OR tenant = ?2) ORDER BY created_at, key LIMIT ?1"
);

const LIST_STATE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM idem_records WHERE state = ?1 AND (state <> 'completed' OR expires_at > ?2) \
     AND (?4 IS NULL OR tenant = ?4) ORDER BY created_at, key LIMIT ?3"
);

/// When a commit of a [`SqliteStore`] is durable: SQLite's `synchronous` setting, in WAL mode.
///
/// ```
/// use idem_core::store::sqlite::Synchronous;
///
/// assert_eq!(Synchronous::default(), Synchronous::Full);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Synchronous {
    /// `synchronous = FULL`, the default: every commit syncs the WAL, so a recorded claim or
    /// outcome survives a power loss or an operating-system crash. One `fsync` per state
    /// change; writes run on tokio's blocking pool.
    #[default]
    Full,
    /// `synchronous = NORMAL`: commits are not synced, only checkpoints are. A crash of the
    /// process loses nothing, but **a power loss or an operating-system crash may lose the
    /// last transactions**, and a call whose record was lost runs again when retried: a
    /// non-idempotent call could apply its effect twice. Faster; writes may run inline.
    Normal,
}

impl Synchronous {
    /// The value of `PRAGMA synchronous`.
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// A durable [`Store`] in one SQLite file (bundled SQLite, no system library needed).
///
/// Open it once per process and share it behind an `Arc`; several processes on one host may
/// open the same file. See the [module documentation](self) for durability and locking.
///
/// ```
/// use std::time::Duration;
/// use idem_core::store::sqlite::SqliteStore;
/// use idem_core::store::{Claim, ClaimRequest, Store};
/// use idem_core::{Fingerprint, KeyMaterial, LogicalKey, OrphanPolicy, Outcome, RecordState};
/// use serde_json::json;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// # runtime.block_on(async {
/// let path = std::env::temp_dir().join(format!("idem-doc-store-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path)?;
///
/// let material = KeyMaterial::Explicit { key: "order-42".into() };
/// let key = LogicalKey::new("shop", "tenant-a", "charge", material).record_key();
/// let request = ClaimRequest {
///     key: key.clone(),
///     tool: "charge".into(),
///     tenant: "tenant-a".into(),
///     fingerprint: Fingerprint::of(&json!({"amount": 10})),
///     lease: Duration::from_secs(30),
///     orphans: OrphanPolicy::MarkUnknown,
///     arguments: None,
/// };
/// if let Claim::Acquired { fence, .. } = store.claim(&request).await? {
///     // ... perform the effect, then record what it returned:
///     let outcome = Outcome::success(&json!({"charged": true}));
///     store.complete(&key, fence, &outcome, Duration::from_secs(3600)).await?;
/// }
/// let record = store.get(&key).await?;
/// assert!(matches!(record.map(|r| r.state), Some(RecordState::Completed { .. })));
/// # drop(store);
/// # for suffix in ["", "-wal", "-shm"] {
/// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
/// # }
/// # Ok::<(), idem_core::StoreError>(())
/// # })?;
/// # Ok(())
/// # }
/// ```
pub struct SqliteStore {
    db: Arc<Database>,
    max_outcome_bytes: usize,
    synchronous: Synchronous,
    /// Every operation on the blocking pool ([`SqliteStore::with_blocking_pool`]).
    pool_only: bool,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.db.path)
            .field("synchronous", &self.synchronous)
            .field("inline_reads", &self.inline_reads())
            .field("inline_writes", &self.inline_writes())
            .field("max_outcome_bytes", &self.max_outcome_bytes)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Open the database at `path`, creating the file and the schema if they do not exist
    /// (idempotent: any number of processes may open the same file, at the same time).
    ///
    /// Opening blocks the calling thread briefly: do it at start-up. A path that cannot be
    /// opened (a missing directory, no permission, a file that is not a SQLite database, a
    /// schema written by a newer idem) is reported as [`StoreError::Unavailable`] naming the
    /// path.
    ///
    /// ```
    /// use idem_core::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-open-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert_eq!(store.path(), path.as_path());
    ///
    /// let missing = std::env::temp_dir().join("idem-no-such-directory").join("idem.db");
    /// assert!(SqliteStore::open(&missing).is_err_and(|e| e.is_unavailable()));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem_core::StoreError>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot open SQLite database {}: {e}",
                path.display()
            ))
        })?;
        let db = Database {
            session: Mutex::new(Session { conn, waits: false }),
            path,
            pages: Arc::new(AtomicU32::new(0)),
            checkpointing: AtomicBool::new(false),
            restart_pending: AtomicBool::new(false),
            #[cfg(test)]
            counts: tests::Counts::default(),
        };
        db.read(|conn, _| {
            let mode: String =
                conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(
                    path = %db.path.display(),
                    journal_mode = %mode,
                    "SQLite refused WAL mode; writers will block readers"
                );
            }
            conn.pragma_update(None, "synchronous", Synchronous::Full.pragma())?;
            // Checkpoints run on the blocking pool instead (see the module documentation).
            conn.pragma_update(None, "wal_autocheckpoint", 0)?;
            Ok(())
        })?;
        // Registered after `wal_autocheckpoint`, which would replace it.
        db.lock()
            .conn
            .wal_hook(Some(count_wal_pages(Arc::clone(&db.pages))))
            .map_err(|e| db.failed(e))?;
        db.write(|tx, _| migrate(tx, &db.path))?;
        Ok(SqliteStore {
            db: Arc::new(db),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            synchronous: Synchronous::Full,
            pool_only: false,
        })
    }

    /// Limit the size of one recorded outcome (default
    /// [`DEFAULT_MAX_OUTCOME_BYTES`]); larger outcomes are refused with
    /// [`StoreError::TooLarge`].
    ///
    /// ```
    /// use idem_core::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-limit-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_max_outcome_bytes(64 * 1024);
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem_core::StoreError>(())
    /// ```
    pub fn with_max_outcome_bytes(mut self, limit: usize) -> Self {
        self.max_outcome_bytes = limit;
        self
    }

    /// Choose when a commit is durable (default [`Synchronous::Full`]: at once, on disk).
    ///
    /// [`Synchronous::Normal`] is faster (no `fsync` per commit, and writes then run inline
    /// on the awaiting task, see the [module documentation](self)) but **a power loss or an
    /// operating-system crash may lose the last transactions**: a call whose claim or outcome
    /// was lost runs again when it is retried, so a non-idempotent or irreversible tool could
    /// apply its effect twice. A crash of the process alone loses nothing at either setting.
    ///
    /// ```
    /// use idem_core::store::sqlite::{SqliteStore, Synchronous};
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-normal-{}.db", std::process::id()));
    /// // Records of the last moments before a power loss may be lost: see above.
    /// let store = SqliteStore::open(&path)?.with_synchronous(Synchronous::Normal)?;
    /// assert!(format!("{store:?}").contains("synchronous: Normal"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem_core::StoreError>(())
    /// ```
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Result<Self, StoreError> {
        // The store's one connection serves every operation and every checkpoint.
        self.db.read(|conn, _| {
            conn.pragma_update(None, "synchronous", synchronous.pragma())?;
            Ok(())
        })?;
        self.synchronous = synchronous;
        Ok(self)
    }

    /// Run every operation on tokio's blocking pool, never inline on the awaiting task.
    ///
    /// By default a read (and, at [`Synchronous::Normal`], a write) that can start at once
    /// runs inline (see the [module documentation](self)): its transaction takes tens of
    /// microseconds, less than the hand-off to another thread. Choose the pool when even that
    /// must not run on the async thread: a runtime with strict latency budgets per poll, or a
    /// file on a disk slow enough that reads or writes to the page cache stall.
    ///
    /// ```
    /// use idem_core::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-pool-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_blocking_pool();
    /// assert!(format!("{store:?}").contains("inline_reads: false"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem_core::StoreError>(())
    /// ```
    pub fn with_blocking_pool(mut self) -> Self {
        self.pool_only = true;
        self
    }

    /// The database file.
    ///
    /// ```
    /// use idem_core::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-path-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert!(store.path().exists());
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem_core::StoreError>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.db.path
    }

    /// Whether reads may run inline: they never sync.
    fn inline_reads(&self) -> bool {
        !self.pool_only
    }

    /// Whether writes may run inline: not at `synchronous = FULL`, whose commits `fsync`.
    fn inline_writes(&self) -> bool {
        !self.pool_only && self.synchronous == Synchronous::Normal
    }

    /// Run the transaction `here` inline if it can start at once, otherwise the transaction
    /// `detach()` builds (the same one, owning its inputs) on the blocking pool. Borrowed
    /// inputs are copied only when the operation does go to the pool.
    async fn write<T, F>(
        &self,
        here: impl FnMut(&Connection, Timestamp) -> Result<T, Failure> + Send,
        detach: impl FnOnce() -> F + Send,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Connection, Timestamp) -> Result<T, Failure> + Send + 'static,
    {
        let inline = if self.inline_writes() {
            self.db.try_write_here(here)
        } else {
            None
        };
        let result = match inline {
            Some(result) => result,
            None => {
                let op = detach();
                self.pooled(move |db| db.write(op)).await
            }
        };
        if self.db.checkpoint_due() {
            let reserved = CheckpointReservation(Arc::clone(&self.db));
            // Not awaited: the caller's write is done; the checkpoint only keeps the WAL short.
            drop(tokio::task::spawn_blocking(move || reserved.0.checkpoint()));
        }
        result
    }

    /// [`SqliteStore::write`] for a read outside a transaction.
    async fn read<T, F>(
        &self,
        here: impl FnMut(&Connection, Timestamp) -> Result<T, Failure> + Send,
        detach: impl FnOnce() -> F + Send,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Connection, Timestamp) -> Result<T, Failure> + Send + 'static,
    {
        let inline = if self.inline_reads() {
            self.db.try_read_here(here)
        } else {
            None
        };
        match inline {
            Some(result) => result,
            None => {
                let op = detach();
                self.pooled(move |db| db.read(op)).await
            }
        }
    }

    /// Run `op` on a blocking thread. If the caller's future is dropped, the operation still
    /// finishes (or rolls back) as one transaction; an orphaned claim is then settled by its
    /// lease, like any other.
    async fn pooled<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || op(&db))
            .await
            .map_err(|e| StoreError::Unavailable(format!("SQLite worker thread failed: {e}")))?
    }
}

/// Set up the schema, bring a version 1 file up to date, or check that the file holds a
/// schema this code understands. Runs inside `BEGIN IMMEDIATE`, so processes opening the file
/// at once take turns and the later ones find it done.
fn migrate(conn: &Connection, path: &Path) -> Result<(), Failure> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    match version {
        SCHEMA_VERSION => Ok(()),
        0 | 1 => {
            conn.execute_batch(SCHEMA)?;
            // A version 1 table (or one made by hand before `user_version` was set).
            let has_tenant: bool = conn.query_row(
                "SELECT count(*) > 0 FROM pragma_table_info('idem_records') WHERE name = 'tenant'",
                [],
                |row| row.get(0),
            )?;
            if !has_tenant {
                conn.execute_batch(ADD_TENANT)?;
            }
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            Ok(())
        }
        other => Err(Failure::Store(StoreError::Unavailable(format!(
            "SQLite database {} has idem schema version {other}; this version of idem \
             understands version {SCHEMA_VERSION} (upgrade idem, or use another file)",
            path.display()
        )))),
    }
}

/// The file, the connection that serves operations, and the checkpoint bookkeeping.
struct Database {
    session: Mutex<Session>,
    path: PathBuf,
    /// Pages written to the WAL since the last checkpoint started, by any connection, as seen
    /// at this connection's commits (kept by [`count_wal_pages`]).
    pages: Arc<AtomicU32>,
    /// A checkpoint is queued or running (at most one is).
    checkpointing: AtomicBool,
    /// The last checkpoint copied the whole WAL: the next write may start the WAL over, which
    /// syncs its header, so it goes to the blocking pool.
    restart_pending: AtomicBool,
    #[cfg(test)]
    counts: tests::Counts,
}

/// The one checkpoint [`Database::checkpoint_due`] reserved; dropping it (run or not: a
/// runtime shutting down drops queued blocking tasks) lets the next one be reserved.
struct CheckpointReservation(Arc<Database>);

impl Drop for CheckpointReservation {
    fn drop(&mut self) {
        self.0.checkpointing.store(false, Ordering::Release);
    }
}

/// The connection and the busy handling it is set to.
struct Session {
    conn: Connection,
    /// Whether SQLite waits (up to [`BUSY_TIMEOUT`]) for another connection's lock, or reports
    /// busy at once. Changed only when the other kind of attempt comes along.
    waits: bool,
}

impl Session {
    fn set_waits(&mut self, waits: bool) -> Result<(), rusqlite::Error> {
        if self.waits != waits {
            self.conn
                .busy_timeout(if waits { BUSY_TIMEOUT } else { Duration::ZERO })?;
            self.waits = waits;
        }
        Ok(())
    }

    /// One attempt at `op` inside `BEGIN IMMEDIATE` ... `COMMIT`, on the clock read once the
    /// write lock is held. Anything but success rolls the transaction back.
    fn transact<T>(
        &mut self,
        op: &mut impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = op(&tx, Timestamp::now())?;
        tx.commit()?;
        Ok(value)
    }
}

/// Why one attempt at an operation failed.
enum Failure {
    /// SQLite failed (perhaps only busy: then the operation is tried again).
    Sql(rusqlite::Error),
    /// The operation's own answer (fenced, not found, corrupt, ...): final.
    Store(StoreError),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::Sql(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

impl Database {
    /// A poisoned lock only means a thread panicked while holding the connection; the
    /// transaction it had open rolled back when its guard was dropped during unwinding.
    fn lock(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection if no other task is using it.
    fn try_lock(&self) -> Option<MutexGuard<'_, Session>> {
        match self.session.try_lock() {
            Ok(session) => Some(session),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Run `op` inside `BEGIN IMMEDIATE` ... `COMMIT`, waiting for other connections' locks:
    /// on a blocking thread (or at start-up).
    fn write<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut session = self.lock();
        session.set_waits(true).map_err(|e| self.failed(e))?;
        let result = self.retrying(|| session.transact(&mut op));
        if result.is_ok() {
            self.restart_pending.store(false, Ordering::Relaxed);
        }
        result
    }

    /// Run `op` outside a transaction (one statement reads one consistent snapshot), waiting
    /// for other connections' locks: on a blocking thread (or at start-up).
    fn read<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut session = self.lock();
        session.set_waits(true).map_err(|e| self.failed(e))?;
        self.retrying(|| op(&session.conn, Timestamp::now()))
    }

    /// [`Database::write`] on the calling thread without waiting for anything: `None` when the
    /// connection is in use, when another connection holds a lock (nothing was changed), or
    /// when this write may have to sync the WAL's header.
    fn try_write_here<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Option<Result<T, StoreError>> {
        if self.restart_pending.load(Ordering::Relaxed) || self.stand_aside() {
            return None;
        }
        let mut session = self.try_lock()?;
        if let Err(e) = session.set_waits(false) {
            return Some(Err(self.failed(e)));
        }
        let result = session.transact(&mut op);
        drop(session);
        match result {
            Err(Failure::Sql(e)) if is_busy(&e) => {
                #[cfg(test)]
                self.counts.fell_back.fetch_add(1, Ordering::Relaxed);
                None
            }
            Ok(value) => Some(Ok(value)),
            Err(e) => Some(Err(self.settle(e))),
        }
    }

    /// [`Database::read`] on the calling thread without waiting for anything: `None` when the
    /// connection is in use or SQLite reports busy.
    fn try_read_here<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Option<Result<T, StoreError>> {
        if self.stand_aside() {
            return None;
        }
        let mut session = self.try_lock()?;
        if let Err(e) = session.set_waits(false) {
            return Some(Err(self.failed(e)));
        }
        match op(&session.conn, Timestamp::now()) {
            Err(Failure::Sql(e)) if is_busy(&e) => None,
            Ok(value) => Some(Ok(value)),
            Err(e) => Some(Err(self.settle(e))),
        }
    }

    fn retrying<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut tries = 1;
        loop {
            match attempt() {
                Ok(value) => return Ok(value),
                Err(Failure::Sql(e)) if is_busy(&e) && tries < BUSY_ATTEMPTS => {
                    tracing::debug!(
                        path = %self.path.display(),
                        attempt = tries,
                        "SQLite database busy; trying again"
                    );
                    std::thread::sleep(BUSY_BACKOFF * tries);
                    tries += 1;
                }
                Err(Failure::Sql(e)) if is_busy(&e) => {
                    return Err(StoreError::Unavailable(format!(
                        "SQLite database {} stayed locked through {tries} attempts: {e}",
                        self.path.display()
                    )));
                }
                Err(e) => return Err(self.settle(e)),
            }
        }
    }

    /// The error a failed attempt reports.
    fn settle(&self, failure: Failure) -> StoreError {
        match failure {
            Failure::Store(e) => e,
            Failure::Sql(e) => self.failed(e),
        }
    }

    fn failed(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Unavailable(format!("SQLite database {}: {e}", self.path.display()))
    }

    /// A checkpoint is queued or running. Inline attempts then stand aside (the operation
    /// waits on the pool, behind the checkpoint): an async thread that takes the free
    /// connection again and again would otherwise keep the checkpoint waiting for it.
    fn checkpoint_waiting(&self) -> bool {
        self.checkpointing.load(Ordering::Acquire)
    }

    /// Whether an inline attempt must stand aside for a queued or running checkpoint.
    fn stand_aside(&self) -> bool {
        let waiting = self.checkpoint_waiting();
        #[cfg(test)]
        if waiting {
            self.counts.stood_aside.fetch_add(1, Ordering::Relaxed);
        }
        waiting
    }

    /// Whether enough pages went into the WAL to checkpoint it, and no checkpoint is running;
    /// `true` reserves the checkpoint for the caller, which must then run
    /// [`Database::checkpoint`].
    fn checkpoint_due(&self) -> bool {
        self.pages.load(Ordering::Relaxed) >= CHECKPOINT_PAGES
            && !self.checkpointing.swap(true, Ordering::Acquire)
    }

    /// Copy what the WAL holds into the database file, on the blocking pool: it syncs the WAL
    /// and the database file. It holds the store's connection meanwhile (operations wait on
    /// the pool), as SQLite's automatic checkpoint would inside a commit: a checkpoint beside
    /// a busy writer rarely catches up with the end of the WAL, and only one that does lets
    /// the WAL start over instead of growing. Passive: it never waits for another connection.
    /// A failure is logged, not reported: nobody awaits this, and the next one tries again.
    fn checkpoint(&self) {
        let session = self.lock();
        // Counted from here: what the operations queued ahead of it wrote, it copies too.
        self.pages.store(0, Ordering::Relaxed);
        let checkpointed = session
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            });
        drop(session);
        match checkpointed {
            Ok((busy, log, copied)) => {
                #[cfg(test)]
                self.counts.checkpoints.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(
                    path = %self.path.display(),
                    busy, log, copied,
                    "SQLite WAL checkpointed"
                );
                if busy == 0 && log > 0 && copied == log {
                    self.restart_pending.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "SQLite WAL checkpoint failed; the next one will try again"
            ),
        }
    }
}

/// The WAL hook of the store's connection: SQLite calls it after each commit with the number
/// of pages the WAL then holds (every connection's), and it adds what the WAL grew by since
/// the previous commit to `pages`. A WAL smaller than before was started over, so all of it is
/// new.
fn count_wal_pages(
    pages: Arc<AtomicU32>,
) -> impl FnMut(&mut rusqlite::hooks::Wal, std::ffi::c_int) -> rusqlite::Result<()> + Send + 'static
{
    let mut last = 0u32;
    move |_, now| {
        let now = u32::try_from(now).unwrap_or(0);
        let grown = if now >= last { now - last } else { now };
        last = now;
        pages.fetch_add(grown, Ordering::Relaxed);
        Ok(())
    }
}

/// The record under `key`, as stored (expired or not).
fn load(conn: &Connection, key: &RecordKey) -> Result<Option<Record>, Failure> {
    let mut stmt = conn.prepare_cached(SELECT_ONE)?;
    let mut rows = stmt.query([key.as_str()])?;
    match rows.next()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// Records from a listing query, in its order.
fn load_many(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Record>, Failure> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Do what the state machine decided.
fn apply(conn: &Connection, key: &RecordKey, write: Write) -> Result<(), Failure> {
    match write {
        Write::Unchanged => Ok(()),
        Write::Put(record) => put(conn, &record),
        Write::Delete => {
            conn.prepare_cached(DELETE_ONE)?.execute([key.as_str()])?;
            Ok(())
        }
    }
}

/// Delete up to two completed records that expired at or before `now` ([`EVICT_ON_CLAIM`]).
fn evict_on_claim(conn: &Connection, now: Timestamp) -> Result<usize, Failure> {
    Ok(conn
        .prepare_cached(EVICT_ON_CLAIM)?
        .execute([millis(now)])?)
}

/// Delete up to `filter.limit` records [`machine::is_purgeable`] describes at `now`.
fn purge(conn: &Connection, filter: &PurgeFilter, now: Timestamp) -> Result<usize, Failure> {
    let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
    let retention = i64::try_from(filter.unknown_retention.as_millis()).unwrap_or(i64::MAX);
    // `since + retention <= now`, kept exact: a retention longer than the clock's reading
    // gives a cutoff before the epoch, which no record reaches.
    let unknown_since = millis(now).saturating_sub(retention);
    Ok(conn.prepare_cached(PURGE_EXPIRED)?.execute(params![
        millis(now),
        unknown_since,
        filter.tenant,
        limit
    ])?)
}

/// A timestamp as an SQLite integer. Instants past `i64::MAX` ms (only reachable through a
/// saturated "forever" TTL or lease) are stored as `i64::MAX`, still hundreds of millions of
/// years away.
fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// Write a record, replacing whatever was under its key.
fn put(conn: &Connection, r: &Record) -> Result<(), Failure> {
    let unstorable = |reason: String| {
        Failure::Store(StoreError::Corrupt {
            key: r.key.clone(),
            reason,
        })
    };
    let fence = i64::try_from(r.fence)
        .map_err(|_| unstorable(format!("fence {} exceeds SQLite's integers", r.fence)))?;
    let steps = if r.steps.is_empty() {
        Cow::Borrowed(NO_STEPS)
    } else {
        Cow::Owned(
            serde_json::to_string(&r.steps)
                .map_err(|e| unstorable(format!("steps cannot be encoded: {e}")))?,
        )
    };
    let (state, lease_until, expires_at, since, last_error, outcome) = match &r.state {
        RecordState::InProgress { lease_until } => (
            "in_progress",
            Some(millis(*lease_until)),
            None,
            None,
            None,
            None,
        ),
        RecordState::Completed {
            outcome,
            expires_at,
        } => {
            // A success's JSON text is a string inside this JSON, so it comes back byte for
            // byte, whatever its formatting.
            let outcome = serde_json::to_string(outcome)
                .map_err(|e| unstorable(format!("outcome cannot be encoded: {e}")))?;
            (
                "completed",
                None,
                Some(millis(*expires_at)),
                None,
                None,
                Some(outcome),
            )
        }
        RecordState::Unknown { since, last_error } => (
            "unknown",
            None,
            None,
            Some(millis(*since)),
            Some(last_error.as_str()),
            None,
        ),
    };
    conn.prepare_cached(UPSERT)?.execute(params![
        r.key.as_str(),
        r.tool,
        r.fingerprint.to_hex(),
        fence,
        state,
        lease_until,
        expires_at,
        since,
        last_error,
        outcome,
        steps.as_ref(),
        r.arguments,
        millis(r.created_at),
        millis(r.updated_at),
        r.tenant,
    ])?;
    Ok(())
}

/// Read a row of [`columns!`]; anything that does not decode is [`StoreError::Corrupt`].
fn decode(row: &Row<'_>) -> Result<Record, Failure> {
    let key = match row.get_ref(0)? {
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) => s,
            Err(_) => {
                return Err(corrupt(
                    RecordKey::from_stored(String::from_utf8_lossy(t)),
                    "the key is not valid UTF-8".into(),
                ));
            }
        },
        other => {
            return Err(corrupt(
                RecordKey::from_stored(format!("{other:?}")),
                format!("the key is {}, not text", other.data_type()),
            ));
        }
    };
    decode_fields(&Cells(row), key).map_err(|reason| corrupt(RecordKey::from_stored(key), reason))
}

fn corrupt(key: RecordKey, reason: String) -> Failure {
    Failure::Store(StoreError::Corrupt { key, reason })
}

/// The record in a row whose key is `key`. Columns only parsed (fingerprint, state, outcome,
/// steps) are read in place rather than copied out first.
fn decode_fields(c: &Cells<'_, '_>, key: &str) -> Result<Record, String> {
    let fingerprint = c.str(2, "fingerprint")?;
    let fingerprint = Fingerprint::from_hex(fingerprint)
        .ok_or_else(|| format!("fingerprint {fingerprint:?} is not 64 hex digits"))?;
    let state = match c.str(4, "state")? {
        "in_progress" => RecordState::InProgress {
            lease_until: c.timestamp(5, "lease_until")?,
        },
        "completed" => RecordState::Completed {
            outcome: serde_json::from_str::<Outcome>(c.str(9, "outcome")?)
                .map_err(|e| format!("outcome is not a recorded outcome: {e}"))?,
            expires_at: c.timestamp(6, "expires_at")?,
        },
        "unknown" => RecordState::Unknown {
            since: c.timestamp(7, "since")?,
            last_error: c.str(8, "last_error")?.to_owned(),
        },
        other => return Err(format!("state {other:?} is not one this version knows")),
    };
    let steps = match c.str(10, "steps")? {
        // What `put` writes for a call that journaled nothing: most records.
        NO_STEPS => Vec::new(),
        steps => serde_json::from_str::<Vec<JournalEntry>>(steps)
            .map_err(|e| format!("steps are not a journal: {e}"))?,
    };
    Ok(Record {
        key: RecordKey::from_stored(key),
        tool: c.str(1, "tool")?.to_owned(),
        tenant: c.str(14, "tenant")?.to_owned(),
        fingerprint,
        fence: c.integer(3, "fence")?,
        state,
        steps,
        arguments: c.optional_str(11, "arguments")?.map(str::to_owned),
        created_at: c.timestamp(12, "created_at")?,
        updated_at: c.timestamp(13, "updated_at")?,
    })
}

/// Typed access to a row's cells, with errors that name the column.
struct Cells<'a, 'r>(&'a Row<'r>);

impl Cells<'_, '_> {
    fn value(&self, i: usize, name: &str) -> Result<ValueRef<'_>, String> {
        self.0.get_ref(i).map_err(|e| format!("{name}: {e}"))
    }

    fn optional_str(&self, i: usize, name: &str) -> Result<Option<&str>, String> {
        match self.value(i, name)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(Some)
                .map_err(|_| format!("{name} is not valid UTF-8")),
            other => Err(format!("{name} is {}, not text", other.data_type())),
        }
    }

    fn str(&self, i: usize, name: &str) -> Result<&str, String> {
        self.optional_str(i, name)?
            .ok_or_else(|| format!("{name} is missing"))
    }

    fn integer(&self, i: usize, name: &str) -> Result<u64, String> {
        match self.value(i, name)? {
            ValueRef::Integer(n) => {
                u64::try_from(n).map_err(|_| format!("{name} is negative ({n})"))
            }
            ValueRef::Null => Err(format!("{name} is missing")),
            other => Err(format!("{name} is {}, not an integer", other.data_type())),
        }
    }

    fn timestamp(&self, i: usize, name: &str) -> Result<Timestamp, String> {
        self.integer(i, name).map(Timestamp)
    }
}

fn state_name(kind: StateKind) -> &'static str {
    match kind {
        StateKind::InProgress => "in_progress",
        StateKind::Completed => "completed",
        StateKind::Unknown => "unknown",
    }
}

// Each operation is a function of borrowed inputs, run inline on the caller's borrows or, on
// the blocking pool, on copies made only then.

fn claim_in(tx: &Connection, request: &ClaimRequest, now: Timestamp) -> Result<Claim, Failure> {
    let existing = load(tx, &request.key)?;
    let (write, claim) = machine::claim(existing, request, now);
    apply(tx, &request.key, write)?;
    evict_on_claim(tx, now)?;
    Ok(claim)
}

fn complete_in(
    tx: &Connection,
    key: &RecordKey,
    fence: Fence,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<(), Failure> {
    let existing = load(tx, key)?;
    let write = machine::complete(existing, key, fence, outcome, ttl, now)?;
    apply(tx, key, write)
}

fn release_in(tx: &Connection, key: &RecordKey, fence: Fence) -> Result<bool, Failure> {
    let existing = load(tx, key)?;
    let (write, released) = machine::release(existing.as_ref(), fence);
    apply(tx, key, write)?;
    Ok(released)
}

fn renew_in(
    tx: &Connection,
    key: &RecordKey,
    fence: Fence,
    lease: Duration,
    now: Timestamp,
) -> Result<Timestamp, Failure> {
    let existing = load(tx, key)?;
    let (write, until) = machine::renew(existing, key, fence, lease, now)?;
    apply(tx, key, write)?;
    Ok(until)
}

fn journal_in(
    tx: &Connection,
    key: &RecordKey,
    fence: Fence,
    step: &str,
    value: &str,
    now: Timestamp,
) -> Result<(), Failure> {
    let existing = load(tx, key)?;
    let write = machine::journal(existing, key, fence, step, value, now)?;
    apply(tx, key, write)
}

fn mark_unknown_in(
    tx: &Connection,
    key: &RecordKey,
    fence: Fence,
    error: &str,
    now: Timestamp,
) -> Result<(), Failure> {
    let existing = load(tx, key)?;
    let write = machine::mark_unknown(existing, key, fence, error, now)?;
    apply(tx, key, write)
}

fn get_in(conn: &Connection, key: &RecordKey, now: Timestamp) -> Result<Option<Record>, Failure> {
    Ok(load(conn, key)?.filter(|r| machine::is_live(r, now)))
}

fn list_in(conn: &Connection, filter: &ListFilter, now: Timestamp) -> Result<Vec<Record>, Failure> {
    let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
    match filter.state {
        // InProgress and Unknown records never expire.
        None => load_many(conn, LIST_ATTENTION, params![limit, filter.tenant]),
        Some(kind) => load_many(
            conn,
            LIST_STATE,
            params![state_name(kind), millis(now), limit, filter.tenant],
        ),
    }
}

fn resolve_in(
    tx: &Connection,
    key: &RecordKey,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<Record, Failure> {
    let existing = load(tx, key)?;
    let (write, record) = machine::resolve(existing.as_ref(), key, outcome, ttl, now)?;
    apply(tx, key, write)?;
    Ok(record)
}

fn settle_unknown_in(
    tx: &Connection,
    key: &RecordKey,
    fence: Fence,
    outcome: Option<&Outcome>,
    ttl: Duration,
    now: Timestamp,
) -> Result<bool, Failure> {
    let existing = load(tx, key)?;
    let (write, settled) = machine::settle_unknown(existing.as_ref(), fence, outcome, ttl, now);
    apply(tx, key, write)?;
    Ok(settled)
}

fn force_release_in(tx: &Connection, key: &RecordKey) -> Result<bool, Failure> {
    let existing = load(tx, key)?;
    let write = machine::force_release(existing.as_ref(), key)?;
    apply(tx, key, write)?;
    Ok(true)
}

#[async_trait]
impl Store for SqliteStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        self.write(
            |tx, now| claim_in(tx, request, now),
            || {
                let request = request.clone();
                move |tx: &Connection, now: Timestamp| claim_in(tx, &request, now)
            },
        )
        .await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        machine::check_size(outcome, self.max_outcome_bytes)?;
        self.write(
            |tx, now| complete_in(tx, key, fence, outcome, ttl, now),
            || {
                let (key, outcome) = (key.clone(), outcome.clone());
                move |tx: &Connection, now: Timestamp| {
                    complete_in(tx, &key, fence, &outcome, ttl, now)
                }
            },
        )
        .await
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        self.write(
            |tx, _| release_in(tx, key, fence),
            || {
                let key = key.clone();
                move |tx: &Connection, _: Timestamp| release_in(tx, &key, fence)
            },
        )
        .await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.write(
            |tx, now| renew_in(tx, key, fence, lease, now),
            || {
                let key = key.clone();
                move |tx: &Connection, now: Timestamp| renew_in(tx, &key, fence, lease, now)
            },
        )
        .await
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        self.write(
            |tx, now| journal_in(tx, key, fence, step, value, now),
            || {
                let (key, step, value) = (key.clone(), step.to_owned(), value.to_owned());
                move |tx: &Connection, now: Timestamp| {
                    journal_in(tx, &key, fence, &step, &value, now)
                }
            },
        )
        .await
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        self.write(
            |tx, now| mark_unknown_in(tx, key, fence, error, now),
            || {
                let (key, error) = (key.clone(), error.to_owned());
                move |tx: &Connection, now: Timestamp| mark_unknown_in(tx, &key, fence, &error, now)
            },
        )
        .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.read(
            |conn, now| get_in(conn, key, now),
            || {
                let key = key.clone();
                move |conn: &Connection, now: Timestamp| get_in(conn, &key, now)
            },
        )
        .await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        self.read(
            |conn, now| list_in(conn, &filter, now),
            || {
                let filter = filter.clone();
                move |conn: &Connection, now: Timestamp| list_in(conn, &filter, now)
            },
        )
        .await
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        machine::check_settled(outcome, self.max_outcome_bytes)?;
        self.write(
            |tx, now| resolve_in(tx, key, outcome, ttl, now),
            || {
                let (key, outcome) = (key.clone(), outcome.clone());
                move |tx: &Connection, now: Timestamp| resolve_in(tx, &key, &outcome, ttl, now)
            },
        )
        .await
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        if let Some(o) = outcome {
            machine::check_settled(o, self.max_outcome_bytes)?;
        }
        self.write(
            |tx, now| settle_unknown_in(tx, key, fence, outcome, ttl, now),
            || {
                let (key, outcome) = (key.clone(), outcome.cloned());
                move |tx: &Connection, now: Timestamp| {
                    settle_unknown_in(tx, &key, fence, outcome.as_ref(), ttl, now)
                }
            },
        )
        .await
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        self.write(
            |tx, _| force_release_in(tx, key),
            || {
                let key = key.clone();
                move |tx: &Connection, _: Timestamp| force_release_in(tx, &key)
            },
        )
        .await
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        self.write(
            |tx, now| purge(tx, filter, now),
            || {
                let filter = filter.clone();
                move |tx: &Connection, now: Timestamp| purge(tx, &filter, now)
            },
        )
        .await
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(Timestamp::now())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::time::Duration;

    use rusqlite::types::Value;
    use rusqlite::{Connection, StatementStatus, TransactionBehavior};
    use serde_json::json;

    use super::{
        CHECKPOINT_PAGES, CheckpointReservation, EVICT_ON_CLAIM, PURGE_EXPIRED, SqliteStore,
        Synchronous, migrate,
    };
    use crate::record::{Outcome, Record, RecordState, Timestamp};
    use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};
    use crate::{Fingerprint, KeyMaterial, LogicalKey, OrphanPolicy, RecordKey};

    /// What the store did, counted for the tests that check how an operation ran.
    #[derive(Default)]
    pub(super) struct Counts {
        /// Inline attempts that found another connection's lock and went to the pool.
        pub(super) fell_back: AtomicU32,
        /// Checkpoints run.
        pub(super) checkpoints: AtomicU32,
        /// Operations sent to the pool because a checkpoint was queued or running.
        pub(super) stood_aside: AtomicU32,
    }

    /// A directory of its own for each test, removed when the test ends.
    fn temp_dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("idem-sqlite-unit-{name}-"))
            .tempdir()
            .expect("create a temporary directory")
    }

    const LEASE: Duration = Duration::from_secs(60);
    const TTL: Duration = Duration::from_secs(3600);

    fn key(name: &str) -> RecordKey {
        LogicalKey::new(
            "idem-sqlite-unit",
            "tenant",
            "tool",
            KeyMaterial::Explicit { key: name.into() },
        )
        .record_key()
    }

    fn request(key: &RecordKey) -> ClaimRequest {
        ClaimRequest {
            key: key.clone(),
            tool: "send_email".into(),
            tenant: "tenant".into(),
            fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
            lease: LEASE,
            orphans: OrphanPolicy::MarkUnknown,
            arguments: Some(r#"{"to":"a@example.com"}"#.into()),
        }
    }

    async fn acquire(store: &SqliteStore, key: &RecordKey) -> u64 {
        match store.claim(&request(key)).await.expect("claim") {
            Claim::Acquired { fence, .. } => fence,
            other => panic!("expected to acquire {key}, got {other:?}"),
        }
    }

    /// A store whose writes may run inline: at `synchronous = NORMAL`.
    fn inline_store(path: &Path) -> SqliteStore {
        SqliteStore::open(path)
            .expect("open")
            .with_synchronous(Synchronous::Normal)
            .expect("synchronous normal")
    }

    fn rows(path: &Path) -> i64 {
        let raw = Connection::open(path).expect("raw connection");
        raw.query_row("SELECT count(*) FROM idem_records", [], |r| r.get(0))
            .expect("count")
    }

    /// A record with its fence and clock readings zeroed: what two runs of the same operations
    /// a few milliseconds apart must agree on. Lease and expiry keep their distance from the
    /// last update, which the durations passed in decide.
    fn timeless(mut r: Record) -> Record {
        let since = |t: Timestamp| Timestamp(t.0.saturating_sub(r.updated_at.0));
        r.state = match r.state {
            RecordState::InProgress { lease_until } => RecordState::InProgress {
                lease_until: since(lease_until),
            },
            RecordState::Completed {
                outcome,
                expires_at,
            } => RecordState::Completed {
                outcome,
                expires_at: since(expires_at),
            },
            RecordState::Unknown { last_error, .. } => RecordState::Unknown {
                since: Timestamp(0),
                last_error,
            },
        };
        r.fence = 0;
        r.created_at = Timestamp(0);
        r.updated_at = Timestamp(0);
        r
    }

    fn timeless_claim(c: Claim) -> Claim {
        match c {
            Claim::Acquired {
                steps, takeover, ..
            } => Claim::Acquired {
                fence: 0,
                steps,
                takeover,
            },
            Claim::Existing(r) => Claim::Existing(timeless(r)),
        }
    }

    /// Every operation of the store, successes and refusals, as text to compare.
    async fn script(store: &SqliteStore) -> Vec<String> {
        let mut log = Vec::new();
        let outcome = Outcome::success(&json!({"id": 7, "tags": []}));
        let (k1, k2, k3, k4) = (key("one"), key("two"), key("three"), key("four"));

        let f1 = acquire(store, &k1).await;
        log.push(format!(
            "{:?}",
            store.journal(&k1, f1, "reserve", "1").await
        ));
        log.push(format!(
            "{:?}",
            store.renew(&k1, f1, LEASE).await.map(|_| ())
        ));
        log.push(format!(
            "{:?}",
            store.complete(&k1, f1, &outcome, TTL).await
        ));
        log.push(format!(
            "{:?}",
            store.claim(&request(&k1)).await.map(timeless_claim)
        ));

        let f2 = acquire(store, &k2).await;
        let stale = f2 - 1;
        let refused = store.complete(&k2, stale, &outcome, TTL).await;
        assert!(
            matches!(&refused, Err(StoreError::Fenced { fence, .. }) if *fence == stale),
            "a stale fence is refused, got {refused:?}"
        );
        log.push(format!("{:?}", refused.map_err(|_| "fenced")));
        log.push(format!("{:?}", store.release(&k2, stale).await));
        log.push(format!(
            "{:?}",
            store.mark_unknown(&k2, f2, "timed out").await
        ));
        log.push(format!(
            "{:?}",
            store
                .list(ListFilter::default())
                .await
                .map(|v| v.into_iter().map(timeless).collect::<Vec<_>>())
        ));
        log.push(format!(
            "{:?}",
            store.settle_unknown(&k2, f2, Some(&outcome), TTL).await
        ));

        let f3 = acquire(store, &k3).await;
        log.push(format!("{:?}", store.release(&k3, f3).await));
        log.push(format!("{:?}", store.get(&k3).await));

        acquire(store, &k4).await;
        log.push(format!("{:?}", store.force_release(&k4).await));
        log.push(format!(
            "{:?}",
            store.resolve(&k4, &outcome, TTL).await.map(timeless)
        ));
        log.push(format!(
            "{:?}",
            store.purge_expired(&PurgeFilter::up_to(10)).await
        ));
        for k in [&k1, &k2, &k3, &k4] {
            log.push(format!("{:?}", store.get(k).await.map(|r| r.map(timeless))));
        }
        log
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inline_and_pooled_operations_leave_identical_records() {
        let dir = temp_dir("same");
        let inline = SqliteStore::open(dir.path().join("inline.db"))
            .expect("open")
            .with_synchronous(Synchronous::Normal)
            .expect("synchronous normal");
        let durable = SqliteStore::open(dir.path().join("durable.db")).expect("open");
        let pooled = SqliteStore::open(dir.path().join("pooled.db"))
            .expect("open")
            .with_blocking_pool();
        assert!(inline.inline_writes() && inline.inline_reads());
        assert!(!durable.inline_writes() && durable.inline_reads());
        assert!(!pooled.inline_writes() && !pooled.inline_reads());
        let (a, b) = (script(&inline).await, script(&pooled).await);
        assert_eq!(a, b, "the same operations give the same answers either way");
        assert_eq!(
            script(&durable).await,
            a,
            "and so do writes on the pool with reads inline"
        );
        assert!(
            a.iter().any(|line| line.contains("fenced"))
                && a.iter().any(|l| l.contains("NotFound")),
            "the script covers refusals too: {a:#?}"
        );
        assert_eq!(inline.db.counts.fell_back.load(Ordering::Relaxed), 0);
    }

    /// Another connection takes and drops the write lock over and over until told to stop.
    /// It keeps the first lock until `met` says the store ran into it (or 10 s pass), so the
    /// store meets a locked file for certain, however the threads are scheduled.
    fn churn_the_lock(
        path: &Path,
        stop: Arc<AtomicBool>,
        met: impl Fn() -> bool + Send + 'static,
    ) -> (std::thread::JoinHandle<u32>, std::sync::mpsc::Receiver<()>) {
        let mut other = Connection::open(path).expect("raw connection");
        let (locked, first_lock) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let mut held = 0;
            while !stop.load(Ordering::Relaxed) {
                let tx = other
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .expect("take the write lock");
                if held == 0 {
                    locked.send(()).expect("the test waits for the first lock");
                    let until = std::time::Instant::now() + Duration::from_secs(10);
                    while !met() && std::time::Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(2));
                }
                tx.commit().expect("commit");
                held += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            held
        });
        (holder, first_lock)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_blocked_by_another_connection_go_to_the_pool_and_lose_nothing() {
        let dir = temp_dir("churn");
        let path = dir.path().join("idem.db");
        let store = Arc::new(inline_store(&path));
        let stop = Arc::new(AtomicBool::new(false));
        let watched = Arc::clone(&store);
        let (holder, first_lock) = churn_the_lock(&path, Arc::clone(&stop), move || {
            watched.db.counts.fell_back.load(Ordering::Relaxed) > 0
        });
        first_lock
            .recv()
            .expect("the other connection holds the lock");
        // Four tasks at once also contend for the connection itself.
        let mut tasks = Vec::new();
        for t in 0..4 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                for i in 0..50 {
                    let k = key(&format!("churn-{t}-{i}"));
                    let fence = acquire(&store, &k).await;
                    let outcome = Outcome::success(&json!([t, i]));
                    store
                        .complete(&k, fence, &outcome, TTL)
                        .await
                        .expect("complete");
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(holder.join().expect("holder") > 0);
        assert!(
            store.db.counts.fell_back.load(Ordering::Relaxed) > 0,
            "some inline attempts met the other connection's lock"
        );
        assert_eq!(rows(&path), 200, "every record was written once");
        for t in 0..4 {
            for i in 0..50 {
                let k = key(&format!("churn-{t}-{i}"));
                match store.get(&k).await.expect("get").map(|r| r.state) {
                    Some(RecordState::Completed { outcome, .. }) => {
                        assert_eq!(outcome, Outcome::success(&json!([t, i])))
                    }
                    other => panic!("{k} should be completed, got {other:?}"),
                }
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_runtime_keeps_running_while_another_connection_holds_the_lock() {
        let dir = temp_dir("runtime");
        let path = dir.path().join("idem.db");
        let store = inline_store(&path);
        let mut other = Connection::open(&path).expect("raw connection");
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let tx = other
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .expect("take the write lock");
            locked_tx.send(()).expect("signal");
            std::thread::sleep(Duration::from_millis(500));
            tx.commit().expect("commit");
        });
        locked_rx.recv().expect("lock taken");
        // On a single-threaded runtime, this ticker runs only while nothing blocks the thread.
        let ticks = Arc::new(AtomicU32::new(0));
        let ticker = tokio::spawn({
            let ticks = Arc::clone(&ticks);
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let k = key("waiting");
        let fence = acquire(&store, &k).await;
        let during = ticks.load(Ordering::Relaxed);
        ticker.abort();
        holder.join().expect("holder");
        assert!(
            during >= 10,
            "the runtime kept running during the 500 ms wait ({during} ticks of 10 ms)"
        );
        assert_eq!(store.db.counts.fell_back.load(Ordering::Relaxed), 1);
        // With the lock free again, the next write runs inline and sees the claim.
        store
            .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
            .await
            .expect("complete");
        assert_eq!(store.db.counts.fell_back.load(Ordering::Relaxed), 1);
    }

    fn wal_bytes(path: &Path) -> u64 {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checkpoints_keep_the_wal_bounded() {
        let dir = temp_dir("checkpoint");
        let path = dir.path().join("idem.db");
        let store = SqliteStore::open(&path).expect("open");
        let page: i64 = {
            let raw = Connection::open(&path).expect("raw connection");
            raw.query_row("PRAGMA page_size", [], |r| r.get(0))
                .expect("page size")
        };
        let page = u64::try_from(page).expect("a positive page size");
        // Each claim writes at least three pages (the row, its key's index entry, its state's
        // index entry): enough claims for twenty checkpoints or more.
        let rounds = 20 * CHECKPOINT_PAGES / 3;
        let (mut first_half, mut largest) = (0, 0);
        for i in 0..rounds {
            acquire(&store, &key(&format!("wal-{i}"))).await;
            largest = largest.max(wal_bytes(&path));
            if i == rounds / 2 {
                first_half = largest;
            }
        }
        // Without checkpoints the WAL would hold all of those pages.
        let unbounded = u64::from(rounds) * 3 * page;
        let checkpoints = store.db.counts.checkpoints.load(Ordering::Relaxed);
        assert!(
            checkpoints >= 10,
            "{checkpoints} checkpoints in {rounds} commits"
        );
        assert!(
            largest * 5 < unbounded,
            "the WAL reached {largest} bytes; without checkpoints it would pass {unbounded}"
        );
        assert!(
            largest < 2 * first_half,
            "the WAL stopped growing: {first_half} bytes after half the commits, {largest} after all"
        );
        assert_eq!(rows(&path), i64::from(rounds));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_queued_checkpoint_is_not_kept_waiting_by_inline_operations() {
        let dir = temp_dir("queued-checkpoint");
        let path = dir.path().join("idem.db");
        let store = inline_store(&path);
        // A checkpoint reserved and queued on the pool, not yet running (as `write` leaves it
        // when a commit crosses the threshold). With the connection free, an inline claim
        // could take it ahead of the checkpoint, again and again.
        assert!(!store.db.checkpoint_waiting());
        store.db.checkpointing.store(true, Ordering::Release);
        let reservation = CheckpointReservation(Arc::clone(&store.db));
        let k = key("behind");
        let fence = acquire(&store, &k).await;
        assert_eq!(
            store.db.counts.stood_aside.load(Ordering::Relaxed),
            1,
            "the claim waited for the connection on the pool, behind the checkpoint"
        );
        // The checkpoint ran (or its task was dropped): the reservation goes, and operations
        // run inline again; nothing was lost on the way.
        drop(reservation);
        assert!(!store.db.checkpoint_waiting());
        store
            .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
            .await
            .expect("complete");
        assert_eq!(store.db.counts.stood_aside.load(Ordering::Relaxed), 1);
        assert_eq!(rows(&path), 1);
    }

    /// `PRAGMA synchronous` on the store's connection, the one every operation and every
    /// checkpoint runs on: 2 is FULL, 1 is NORMAL.
    fn synchronous_of(store: &SqliteStore) -> i64 {
        store
            .db
            .lock()
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("read PRAGMA synchronous")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn by_default_every_commit_survives_a_power_loss() {
        let dir = temp_dir("durable");
        let path = dir.path().join("idem.db");
        let store = SqliteStore::open(&path).expect("open");
        assert_eq!(
            synchronous_of(&store),
            2,
            "synchronous = FULL: each commit syncs the WAL"
        );
        // Still so after writes and a checkpoint on the blocking pool.
        for i in 0..(CHECKPOINT_PAGES / 2) {
            acquire(&store, &key(&format!("durable-{i}"))).await;
        }
        while store.db.checkpoint_waiting() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.db.counts.checkpoints.load(Ordering::Relaxed) > 0);
        assert_eq!(synchronous_of(&store), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn normal_is_an_opt_in_whose_writes_run_inline() {
        let dir = temp_dir("normal");
        let path = dir.path().join("idem.db");
        let store = SqliteStore::open(&path)
            .expect("open")
            .with_synchronous(Synchronous::Normal)
            .expect("synchronous normal");
        assert_eq!(
            synchronous_of(&store),
            1,
            "synchronous = NORMAL when asked for"
        );
        assert!(store.inline_writes());
        for i in 0..(CHECKPOINT_PAGES / 2) {
            acquire(&store, &key(&format!("normal-{i}"))).await;
        }
        while store.db.checkpoint_waiting() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.db.counts.checkpoints.load(Ordering::Relaxed) > 0);
        assert_eq!(synchronous_of(&store), 1, "a checkpoint keeps the setting");
        // A second store on the same file chooses for its own connection.
        let other = SqliteStore::open(&path).expect("open again");
        assert_eq!(synchronous_of(&other), 2);
        assert_eq!(synchronous_of(&store), 1);
        let back = store
            .with_synchronous(Synchronous::Full)
            .expect("synchronous full");
        assert_eq!(synchronous_of(&back), 2);
        assert!(!back.inline_writes() && back.inline_reads());
    }

    #[test]
    fn an_empty_journal_is_stored_as_serde_json_writes_it() {
        let empty: Vec<crate::record::JournalEntry> = Vec::new();
        assert_eq!(
            serde_json::to_string(&empty).expect("encode"),
            super::NO_STEPS
        );
    }

    #[test]
    fn the_claim_eviction_is_compiled_once() {
        let dir = temp_dir("reprepare");
        let conn = Connection::open(dir.path().join("idem.db")).expect("open");
        migrate(&conn, &dir.path().join("idem.db")).unwrap_or_else(|_| panic!("schema"));
        // As the store runs them: from rusqlite's statement cache, which clears the bindings
        // of a statement it takes back.
        let recompiled = |sql: &str, params: &dyn Fn(i64) -> Vec<Value>| {
            let mut count = 0;
            for now in 1..=4 {
                let mut stmt = conn.prepare_cached(sql).expect("prepare");
                stmt.execute(rusqlite::params_from_iter(params(now)))
                    .expect("execute");
                count = stmt.get_status(StatementStatus::RePrepare);
            }
            count
        };
        assert_eq!(recompiled(EVICT_ON_CLAIM, &|now| vec![now.into()]), 0);
        // What the literal limit avoids: a bound limit, cleared and bound again, recompiles
        // the statement at every execution, even bound to the same value each time.
        let purge = |now: i64| vec![now.into(), now.into(), Value::Null, 2.into()];
        assert_eq!(recompiled(PURGE_EXPIRED, &purge), 4);
    }
}

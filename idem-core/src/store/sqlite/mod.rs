//! The embedded durable store: one SQLite file, shared safely by several processes on a host.
//!
//! Every state change runs inside `BEGIN IMMEDIATE` ... `COMMIT`: the store reads the row,
//! applies the same [`machine`](crate::store::machine) function the memory store applies
//! (through [`transition`](crate::store::transition)), and writes what that function says.
//! `BEGIN IMMEDIATE` takes the database's write lock *before* the read, so two connections
//! (two processes) can never both decide on the same row, and SQLite makes exactly the
//! decisions the memory store makes.
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
//! up to a busy timeout of 5 s (on the store's thread, see below), then the store retries a few
//! times before it reports [`StoreError::Unavailable`]; readers never wait for writers in WAL
//! mode. WAL relies on shared memory, so every process must run on the same host: do not put
//! the file on a network file system.
//!
//! # Where operations run
//!
//! rusqlite is synchronous. A write at `synchronous = FULL` (the default) waits for the disk
//! at its commit, which does not belong on an async thread: every write runs on the store's
//! own thread (one per store, started by its first such operation, ended when the store is
//! dropped), where it waits up to the busy timeout for other connections' locks. The
//! operations there run one after another, as they would anyway on the store's one
//! connection. The round trip to that thread (microseconds) is small beside the `fsync`; a
//! thread of its own rather than tokio's blocking pool, because the pool's hand-offs cost
//! more (measured at `FULL`: 0.76× of raw rusqlite through the pool, 0.87× with the store's
//! thread; BENCHMARKS.md, row 2).
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
//! the operation itself: a round trip to another thread is itself microseconds to tens of
//! microseconds. (SQLite may still retry briefly on its own when it races another connection
//! for the WAL's shared index; those retries are microseconds, not the busy timeout.)
//!
//! An operation that may run inline goes to the store's thread instead, where it waits up to
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
//!   store's thread, reads included).
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
//! runs `PRAGMA wal_checkpoint(PASSIVE)` on tokio's blocking pool. The checkpoint holds the
//! store's connection while it runs (milliseconds): from the moment it is queued, operations
//! stand aside and wait for it on the store's thread, not on the async thread, so an async
//! thread that finds the connection free again and again cannot keep it waiting (an
//! application that keeps tokio's blocking pool full delays the checkpoint, and so these
//! operations, until a thread is free). Holding the
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
//! # Dropping the store
//!
//! Dropping the last handle on a store closes its connection before the drop returns: the
//! operations already handed to the store's thread finish (those whose callers gave up on
//! them too), the thread ends, a checkpoint running on the blocking pool ends, and the
//! connection closes; if it was the file's last, the WAL is checkpointed into the file and
//! removed. A program that copies or opens the file next finds the whole database in it.
//! Inside an async runtime that wait blocks the thread dropping the store: usually for one
//! operation or none (each waits for other connections' locks as it would anyway, up to the
//! busy timeout per attempt) and a checkpoint's milliseconds. Once the thread has ended, the
//! drop waits at most 10 s more for the connection, then returns with a warning. A
//! checkpoint still queued on the pool is not waited for: it finds the store gone and does
//! nothing. (Dropped by a job on the store's own thread, which cannot wait for itself, the
//! store closes once that job returns.)
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
//!
//! # Pending approvals
//!
//! Pending approvals live in a table of their own, `idem_approvals` (one JSON text per record
//! key, indexed by tenant and tool), created when a store opens a file that lacks it. So do
//! budgets, `idem_budgets` (one JSON text per scope, the scope's bytes its key, with when it
//! expires), at the same schema version.
//!
//! # The folder
//!
//! `statements.rs` holds the SQL text, `connection.rs` the file and its connection (opening,
//! settings, migrations, transactions, checkpoints), `codec.rs` rows to records and back,
//! `job.rs` what an operation is, `store.rs` the [`Store`] impl, where each operation runs
//! inline or on the store's thread, `texts.rs` the operations on the tables beside the records
//! (approvals, run accounts, budgets), and `worker.rs` that thread, which the store's drop ends
//! before it waits for the connection to close.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

mod codec;
mod connection;
mod job;
mod statements;
mod store;
#[cfg(test)]
mod tests;
mod texts;
mod worker;

pub use connection::Synchronous;

use connection::Database;

#[cfg(doc)]
use crate::record::Timestamp;
#[cfg(doc)]
use crate::store::Store;
use crate::store::StoreError;
use crate::store::layer::{Layer, Limited, Limits};

/// A durable [`Store`] in one SQLite file (bundled SQLite, no system library needed): a
/// [`SqliteBackend`] behind the store [`Limits`].
///
/// Open it once per process and share it behind an `Arc`; several processes on one host may
/// open the same file. See the [module documentation](self) for durability and locking.
///
/// ```
/// use std::time::Duration;
/// use idem::store::sqlite::SqliteStore;
/// use idem::store::{Claim, ClaimRequest, Store};
/// use idem::key::{Fingerprint, KeyMaterial, LogicalKey}; use idem::tool::OrphanPolicy; use idem::record::{Outcome, RecordState};
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
///     contract: None,
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
/// # Ok::<(), idem::store::StoreError>(())
/// # })?;
/// # Ok(())
/// # }
/// ```
///
/// Outcomes larger than [`DEFAULT_MAX_OUTCOME_BYTES`](crate::store::DEFAULT_MAX_OUTCOME_BYTES)
/// are refused with [`StoreError::TooLarge`]; the limit is the store's to choose:
///
/// ```
/// use idem::store::sqlite::SqliteStore;
///
/// let path = std::env::temp_dir().join(format!("idem-doc-limit-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path)?.with_max_outcome_bytes(64 * 1024);
/// # drop(store);
/// # for suffix in ["", "-wal", "-shm"] {
/// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
/// # }
/// # Ok::<(), idem::store::StoreError>(())
/// ```
pub type SqliteStore = Limited<SqliteBackend>;

/// The file and connection of a [`SqliteStore`], without its [`Limits`]: what the layer
/// wraps.
pub struct SqliteBackend {
    db: Arc<Database>,
    synchronous: Synchronous,
    /// Every operation on the store's thread ([`SqliteStore::with_blocking_pool`]).
    pool_only: bool,
    /// The store's own thread for the operations that may block, started on first use.
    /// Declared after `db`: fields drop in order, so when the worker's drop waits for the
    /// connection to close, the store's own handle on it is gone already.
    worker: worker::Worker,
}

impl fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.db.path)
            .field("synchronous", &self.synchronous)
            .field("inline_reads", &self.inline_reads())
            .field("inline_writes", &self.inline_writes())
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
    /// use idem::store::sqlite::SqliteStore;
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
    /// # Ok::<(), idem::store::StoreError>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let db = Database::open(path.as_ref().to_path_buf())?;
        Ok(Self::over(db))
    }

    fn over(db: Database) -> Self {
        let worker = worker::Worker::new(db.closing.watch());
        let backend = SqliteBackend {
            db: Arc::new(db),
            synchronous: Synchronous::Full,
            pool_only: false,
            worker,
        };
        Limits::default().layer(backend)
    }

    /// Open a file a dispatcher made, for an operator: never create it, never upgrade it.
    /// A file that does not exist, is not an idem store, or holds another schema version
    /// is refused ([`StoreError::Unavailable`], naming the file, the version and the fix):
    /// an older file is upgraded by the first dispatcher of this version that opens it,
    /// which its agents of the older version would then refuse, so it is an agent's
    /// upgrade to make, not an operator's command.
    ///
    /// ```
    /// use idem::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-existing-{}.db", std::process::id()));
    /// assert!(SqliteStore::open_existing(&path).is_err_and(|e| e.to_string().contains("does not exist")));
    /// assert!(!path.exists());
    /// drop(SqliteStore::open(&path)?);
    /// assert!(SqliteStore::open_existing(&path).is_ok());
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem::store::StoreError>(())
    /// ```
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        connection::check_existing(path.as_ref())?;
        let db = Database::open_existing(path.as_ref().to_path_buf())?;
        Ok(Self::over(db))
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
    /// use idem::store::sqlite::{SqliteStore, Synchronous};
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-normal-{}.db", std::process::id()));
    /// // Records of the last moments before a power loss may be lost: see above.
    /// let store = SqliteStore::open(&path)?.with_synchronous(Synchronous::Normal)?;
    /// assert!(format!("{store:?}").contains("synchronous: Normal"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem::store::StoreError>(())
    /// ```
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Result<Self, StoreError> {
        // The store's one connection serves every operation and every checkpoint.
        self.inner.db.read(|conn, _| {
            conn.pragma_update(None, "synchronous", synchronous.pragma())?;
            Ok(())
        })?;
        self.inner.synchronous = synchronous;
        Ok(self)
    }

    /// Read time from `clock` instead of the system's: leases, expiries and Unknown
    /// outcomes' times, for a test that moves time itself (as
    /// [`MemoryStore::with_clock`](crate::store::memory::MemoryStore::with_clock)). Give it
    /// right after opening: a store already shared cannot change its clock
    /// ([`StoreError::Unavailable`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idem::store::memory::ManualClock;
    /// use idem::store::sqlite::SqliteStore;
    /// use idem::Store;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let path = std::env::temp_dir().join(format!("idem-doc-clock-{}.db", std::process::id()));
    /// let clock = Arc::new(ManualClock::new());
    /// let store = SqliteStore::open(&path)?.with_clock(clock.clone())?;
    /// let before = store.now().await?;
    /// clock.advance(std::time::Duration::from_secs(60));
    /// assert_eq!(store.now().await?.as_millis(), before.as_millis() + 60_000);
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem::store::StoreError>(())
    /// # }).unwrap();
    /// ```
    pub fn with_clock(
        mut self,
        clock: Arc<dyn crate::store::memory::Clock>,
    ) -> Result<Self, StoreError> {
        let Some(db) = Arc::get_mut(&mut self.inner.db) else {
            return Err(StoreError::Unavailable(
                "the store is shared already: give it its clock right after opening it".into(),
            ));
        };
        db.clock = clock;
        Ok(self)
    }

    /// Run every operation off the awaiting task, on the store's own thread (see the
    /// [module documentation](self); the name is from when that was tokio's blocking pool).
    ///
    /// By default a read (and, at [`Synchronous::Normal`], a write) that can start at once
    /// runs inline (see the [module documentation](self)): its transaction takes tens of
    /// microseconds, less than the hand-off to another thread. Choose the pool when even that
    /// must not run on the async thread: a runtime with strict latency budgets per poll, or a
    /// file on a disk slow enough that reads or writes to the page cache stall.
    ///
    /// ```
    /// use idem::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-pool-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_blocking_pool();
    /// assert!(format!("{store:?}").contains("inline_reads: false"));
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem::store::StoreError>(())
    /// ```
    pub fn with_blocking_pool(mut self) -> Self {
        self.inner.pool_only = true;
        self
    }

    /// The database file.
    ///
    /// ```
    /// use idem::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-path-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?;
    /// assert!(store.path().exists());
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem::store::StoreError>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.inner.db.path
    }
}

impl SqliteBackend {
    /// Whether reads may run inline: they never sync.
    fn inline_reads(&self) -> bool {
        !self.pool_only
    }

    /// Whether writes may run inline: not at `synchronous = FULL`, whose commits `fsync`.
    fn inline_writes(&self) -> bool {
        !self.pool_only && self.synchronous == Synchronous::Normal
    }
}

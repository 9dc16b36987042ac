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
//! The database runs in WAL mode with `synchronous = NORMAL`. A committed write survives a
//! crash of the process: it is in the WAL, in the operating system's page cache. A power
//! loss or an operating-system crash may roll back the last transactions before it (the
//! file is never corrupted, but a completed outcome could be forgotten and the call run
//! again). [`SqliteStore::with_synchronous_full`] makes SQLite sync the WAL at every commit,
//! which survives power loss at the cost of one `fsync` per state change.
//!
//! # Several processes
//!
//! Each [`SqliteStore`] holds one connection. Writers wait for each other up to a busy
//! timeout of 5 s, then the store retries a few times before it reports
//! [`StoreError::Unavailable`]; readers never wait for writers in WAL mode. WAL relies on
//! shared memory, so every process must run on the same host: do not put the file on a
//! network file system.
//!
//! # Clock and retention
//!
//! Lease and expiry decisions use the system clock ([`Timestamp::now`]), which all processes
//! on one host share. Each claim evicts up to two expired completed records, so the table
//! stays bounded without a janitor; [`Store::purge_expired`] evicts in larger batches.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, Row, TransactionBehavior, params};

use crate::canonical::Fingerprint;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine::{self, Write};
use crate::store::{Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, ListFilter, Store, StoreError};

/// The version of the schema this code reads and writes, kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

/// How long a connection waits for another connection's write lock before SQLite reports
/// `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times an operation is tried when SQLite still reports busy after the timeout.
/// SQLite returns `SQLITE_BUSY` without waiting in a few cases (a WAL being recovered by
/// another connection, a journal-mode change), which the busy timeout alone does not cover.
const BUSY_ATTEMPTS: u32 = 4;

/// The pause between attempts, multiplied by the attempt number.
const BUSY_BACKOFF: Duration = Duration::from_millis(50);

/// How many expired completed records each claim evicts. Every record is created by a claim,
/// so evicting more than one per claim keeps the backlog of expired records bounded.
const EVICT_PER_CLAIM: usize = 2;

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
    updated_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_records_state_expires ON idem_records (state, expires_at);
";

/// The columns of a record, in the order [`decode`] reads them and [`put`] binds them.
macro_rules! columns {
    () => {
        "key, tool, fingerprint, fence, state, lease_until, expires_at, since, last_error, \
         outcome, steps, arguments, created_at, updated_at"
    };
}

const SELECT_ONE: &str = concat!("SELECT ", columns!(), " FROM idem_records WHERE key = ?1");

const UPSERT: &str = concat!(
    "INSERT INTO idem_records (",
    columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
     ON CONFLICT (key) DO UPDATE SET \
     tool = excluded.tool, fingerprint = excluded.fingerprint, fence = excluded.fence, \
     state = excluded.state, lease_until = excluded.lease_until, \
     expires_at = excluded.expires_at, since = excluded.since, \
     last_error = excluded.last_error, outcome = excluded.outcome, steps = excluded.steps, \
     arguments = excluded.arguments, created_at = excluded.created_at, \
     updated_at = excluded.updated_at"
);

const DELETE_ONE: &str = "DELETE FROM idem_records WHERE key = ?1";

const DELETE_EXPIRED: &str = "DELETE FROM idem_records WHERE key IN (\
     SELECT key FROM idem_records WHERE state = 'completed' AND expires_at <= ?1 LIMIT ?2)";

const LIST_ATTENTION: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM idem_records WHERE state IN ('in_progress', 'unknown') \
     ORDER BY created_at, key LIMIT ?1"
);

const LIST_STATE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM idem_records WHERE state = ?1 AND (state <> 'completed' OR expires_at > ?2) \
     ORDER BY created_at, key LIMIT ?3"
);

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
    synchronous: &'static str,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.db.path)
            .field("synchronous", &self.synchronous)
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
            conn: Mutex::new(conn),
            path,
        };
        db.read(|conn, _| {
            conn.busy_timeout(BUSY_TIMEOUT)?;
            let mode: String =
                conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(
                    path = %db.path.display(),
                    journal_mode = %mode,
                    "SQLite refused WAL mode; writers will block readers"
                );
            }
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            Ok(())
        })?;
        db.write(|tx, _| migrate(tx, &db.path))?;
        Ok(SqliteStore {
            db: Arc::new(db),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
            synchronous: "NORMAL",
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

    /// Sync the WAL to disk at every commit (`synchronous = FULL`): recorded outcomes then
    /// survive a power loss or an operating-system crash, not only a crash of the process,
    /// at the cost of one `fsync` per state change.
    ///
    /// ```
    /// use idem_core::store::sqlite::SqliteStore;
    ///
    /// let path = std::env::temp_dir().join(format!("idem-doc-full-{}.db", std::process::id()));
    /// let store = SqliteStore::open(&path)?.with_synchronous_full()?;
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok::<(), idem_core::StoreError>(())
    /// ```
    pub fn with_synchronous_full(mut self) -> Result<Self, StoreError> {
        self.db.read(|conn, _| {
            conn.pragma_update(None, "synchronous", "FULL")?;
            Ok(())
        })?;
        self.synchronous = "FULL";
        Ok(self)
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

    /// Run `op` on a blocking thread: rusqlite is synchronous. If the caller's future is
    /// dropped, the operation still finishes (or rolls back) as one transaction; an orphaned
    /// claim is then settled by its lease, like any other.
    async fn run<T, F>(&self, op: F) -> Result<T, StoreError>
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

/// Set up the schema, or check that the file holds one this code understands.
fn migrate(conn: &Connection, path: &Path) -> Result<(), Failure> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    match version {
        SCHEMA_VERSION => Ok(()),
        0 => {
            conn.execute_batch(SCHEMA)?;
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

/// The connection and where it points.
struct Database {
    conn: Mutex<Connection>,
    path: PathBuf,
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
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `op` inside `BEGIN IMMEDIATE` ... `COMMIT`, on the clock read once the write lock
    /// is held. Anything but success rolls the transaction back.
    fn write<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        self.retrying(|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = op(&tx, Timestamp::now())?;
            tx.commit()?;
            Ok(value)
        })
    }

    /// Run `op` outside a transaction (one statement reads one consistent snapshot).
    fn read<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let conn = self.lock();
        self.retrying(|| op(&conn, Timestamp::now()))
    }

    fn retrying<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut tries = 1;
        loop {
            match attempt() {
                Ok(value) => return Ok(value),
                Err(Failure::Store(e)) => return Err(e),
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
                Err(Failure::Sql(e)) => {
                    return Err(StoreError::Unavailable(format!(
                        "SQLite database {}: {e}",
                        self.path.display()
                    )));
                }
            }
        }
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

/// Delete up to `limit` completed records that expired at or before `now`.
fn evict(conn: &Connection, now: Timestamp, limit: usize) -> Result<usize, Failure> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    Ok(conn
        .prepare_cached(DELETE_EXPIRED)?
        .execute(params![millis(now), limit])?)
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
    let steps = serde_json::to_string(&r.steps)
        .map_err(|e| unstorable(format!("steps cannot be encoded: {e}")))?;
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
        steps,
        r.arguments,
        millis(r.created_at),
        millis(r.updated_at),
    ])?;
    Ok(())
}

/// Read a row of [`columns!`]; anything that does not decode is [`StoreError::Corrupt`].
fn decode(row: &Row<'_>) -> Result<Record, Failure> {
    let key = match row.get_ref(0)? {
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) => RecordKey::from_stored(s),
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
    let cells = Cells(row);
    match decode_fields(&cells, &key) {
        Ok(record) => Ok(record),
        Err(reason) => Err(corrupt(key, reason)),
    }
}

fn corrupt(key: RecordKey, reason: String) -> Failure {
    Failure::Store(StoreError::Corrupt { key, reason })
}

fn decode_fields(c: &Cells<'_, '_>, key: &RecordKey) -> Result<Record, String> {
    let fingerprint = c.text(2, "fingerprint")?;
    let fingerprint = Fingerprint::from_hex(&fingerprint)
        .ok_or_else(|| format!("fingerprint {fingerprint:?} is not 64 hex digits"))?;
    let state = c.text(4, "state")?;
    let state = match state.as_str() {
        "in_progress" => RecordState::InProgress {
            lease_until: c.timestamp(5, "lease_until")?,
        },
        "completed" => {
            let outcome = c.text(9, "outcome")?;
            RecordState::Completed {
                outcome: serde_json::from_str::<Outcome>(&outcome)
                    .map_err(|e| format!("outcome is not a recorded outcome: {e}"))?,
                expires_at: c.timestamp(6, "expires_at")?,
            }
        }
        "unknown" => RecordState::Unknown {
            since: c.timestamp(7, "since")?,
            last_error: c.text(8, "last_error")?,
        },
        other => return Err(format!("state {other:?} is not one this version knows")),
    };
    let steps = c.text(10, "steps")?;
    let steps = serde_json::from_str::<Vec<JournalEntry>>(&steps)
        .map_err(|e| format!("steps are not a journal: {e}"))?;
    Ok(Record {
        key: key.clone(),
        tool: c.text(1, "tool")?,
        fingerprint,
        fence: c.integer(3, "fence")?,
        state,
        steps,
        arguments: c.optional_text(11, "arguments")?,
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

    fn optional_text(&self, i: usize, name: &str) -> Result<Option<String>, String> {
        match self.value(i, name)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(|s| Some(s.to_owned()))
                .map_err(|_| format!("{name} is not valid UTF-8")),
            other => Err(format!("{name} is {}, not text", other.data_type())),
        }
    }

    fn text(&self, i: usize, name: &str) -> Result<String, String> {
        self.optional_text(i, name)?
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

#[async_trait]
impl Store for SqliteStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let request = request.clone();
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &request.key)?;
                let (write, claim) = machine::claim(existing.as_ref(), &request, now);
                apply(tx, &request.key, write)?;
                evict(tx, now, EVICT_PER_CLAIM)?;
                Ok(claim)
            })
        })
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
        let (key, outcome) = (key.clone(), outcome.clone());
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &key)?;
                let write = machine::complete(existing.as_ref(), &key, fence, &outcome, ttl, now)?;
                apply(tx, &key, write)
            })
        })
        .await
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        let key = key.clone();
        self.run(move |db| {
            db.write(|tx, _| {
                let existing = load(tx, &key)?;
                let (write, released) = machine::release(existing.as_ref(), &key, fence);
                apply(tx, &key, write)?;
                Ok(released)
            })
        })
        .await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let key = key.clone();
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &key)?;
                let (write, until) = machine::renew(existing.as_ref(), &key, fence, lease, now)?;
                apply(tx, &key, write)?;
                Ok(until)
            })
        })
        .await
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (key, step, value) = (key.clone(), step.to_owned(), value.to_owned());
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &key)?;
                let write = machine::journal(existing.as_ref(), &key, fence, &step, &value, now)?;
                apply(tx, &key, write)
            })
        })
        .await
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let (key, error) = (key.clone(), error.to_owned());
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &key)?;
                let write = machine::mark_unknown(existing.as_ref(), &key, fence, &error, now)?;
                apply(tx, &key, write)
            })
        })
        .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let key = key.clone();
        self.run(move |db| {
            db.read(|conn, now| Ok(load(conn, &key)?.filter(|r| machine::is_live(r, now))))
        })
        .await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        self.run(move |db| {
            db.read(|conn, now| match filter.state {
                // InProgress and Unknown records never expire.
                None => load_many(conn, LIST_ATTENTION, params![limit]),
                Some(kind) => load_many(
                    conn,
                    LIST_STATE,
                    params![state_name(kind), millis(now), limit],
                ),
            })
        })
        .await
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        machine::check_size(outcome, self.max_outcome_bytes)?;
        let (key, outcome) = (key.clone(), outcome.clone());
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &key)?;
                let (write, record) =
                    machine::resolve(existing.as_ref(), &key, &outcome, ttl, now)?;
                apply(tx, &key, write)?;
                Ok(record)
            })
        })
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
            machine::check_size(o, self.max_outcome_bytes)?;
        }
        let (key, outcome) = (key.clone(), outcome.cloned());
        self.run(move |db| {
            db.write(|tx, now| {
                let existing = load(tx, &key)?;
                let (write, settled) =
                    machine::settle_unknown(existing.as_ref(), fence, outcome.as_ref(), ttl, now);
                apply(tx, &key, write)?;
                Ok(settled)
            })
        })
        .await
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        let key = key.clone();
        self.run(move |db| {
            db.write(|tx, _| {
                let existing = load(tx, &key)?;
                let write = machine::force_release(existing.as_ref(), &key)?;
                apply(tx, &key, write)?;
                Ok(true)
            })
        })
        .await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.run(move |db| db.write(|tx, now| evict(tx, now, limit)))
            .await
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(Timestamp::now())
    }
}

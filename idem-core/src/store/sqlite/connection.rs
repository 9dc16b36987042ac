//! The SQLite store's file and its one connection: opening it (WAL mode, the `synchronous`
//! setting, no automatic checkpoint), the schema's migrations (the pending approvals' table
//! included), transactions with the busy handling of inline and pooled attempts, and the
//! checkpoints this store runs itself.
//!
//! See "Where operations run" and "Checkpoints" in the [store's documentation](super).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use super::statements::{
    ADD_CONTRACT, ADD_TENANT, APPROVALS_SCHEMA, BUDGETS_SCHEMA, FENCE_FLOOR_SCHEMA, RUNS_SCHEMA,
    SCHEMA, SCHEMA_VERSION,
};
use super::worker::Closing;
use crate::record::Timestamp;
use crate::store::StoreError;

/// How long a connection waits for another connection's write lock before SQLite reports
/// `SQLITE_BUSY`: only ever on the store's thread. An inline attempt does not wait at all.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times an operation is tried when SQLite still reports busy after the timeout.
/// SQLite returns `SQLITE_BUSY` without waiting in a few cases (a WAL being recovered by
/// another connection, a journal-mode change), which the busy timeout alone does not cover.
const BUSY_ATTEMPTS: u32 = 4;

/// The pause between attempts, multiplied by the attempt number.
const BUSY_BACKOFF: Duration = Duration::from_millis(50);

/// After how many pages written to the WAL the store checkpoints it: SQLite's own default
/// threshold for its automatic checkpoint, so the WAL stays about 4 MB (at 4 KiB pages).
pub(super) const CHECKPOINT_PAGES: u32 = 1000;

/// When a commit of a [`SqliteStore`](super::SqliteStore) is durable: SQLite's `synchronous` setting, in WAL mode.
///
/// ```
/// use idem::store::sqlite::Synchronous;
///
/// assert_eq!(Synchronous::default(), Synchronous::Full);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Synchronous {
    /// `synchronous = FULL`, the default: every commit syncs the WAL, so a recorded claim or
    /// outcome survives a power loss or an operating-system crash. One `fsync` per state
    /// change; writes run on the store's own thread.
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
    pub(super) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Set up the schema, bring a version 1 file up to date, or check that the file holds a schema this
/// code understands; then create the pending approvals', run accounts', fence floor's and budgets'
/// tables if the file lacks them (a version 2 or 3 file from before them). Runs inside `BEGIN
/// IMMEDIATE`, so processes opening the file at once take turns and the later ones find it done.
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), Failure> {
    migrate_records(conn, path)?;
    conn.execute_batch(APPROVALS_SCHEMA)?;
    conn.execute_batch(RUNS_SCHEMA)?;
    conn.execute_batch(FENCE_FLOOR_SCHEMA)?;
    conn.execute_batch(BUDGETS_SCHEMA)?;
    Ok(())
}

/// Whether `path` is an idem store of this schema version, read without writing (the
/// check of [`SqliteStore::open_existing`](super::SqliteStore::open_existing)).
pub(super) fn check_existing(path: &Path) -> Result<(), StoreError> {
    let refuse = |why: String| Err(StoreError::Unavailable(why));
    if !path.is_file() {
        return refuse(format!(
            "no SQLite store at {}: the file does not exist (check the path; a dispatcher creates it when it first opens it)",
            path.display()
        ));
    }
    let read = || -> Result<(i64, bool, bool), rusqlite::Error> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let version = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        let table = |name: &str| -> Result<bool, rusqlite::Error> {
            conn.query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [name],
                |row| row.get(0),
            )
        };
        Ok((version, table("idem_records")?, table("idem_approvals")?))
    };
    let (version, records, approvals) = read().map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot read {} as a SQLite store: {e}",
            path.display()
        ))
    })?;
    match version {
        _ if !records => refuse(format!(
            "{} is not an idem store: it has no idem_records table (check the path)",
            path.display()
        )),
        SCHEMA_VERSION if approvals => Ok(()),
        SCHEMA_VERSION => refuse(format!(
            "SQLite database {} lacks the pending approvals' table, which a dispatcher of this version adds when it opens the file; upgrade the agents first, or use the idem of their version",
            path.display()
        )),
        v if v > SCHEMA_VERSION => refuse(format!(
            "SQLite database {} has idem schema version {v}; this version of idem understands version {SCHEMA_VERSION} (use the idem of the agents that wrote it)",
            path.display()
        )),
        v => refuse(format!(
            "SQLite database {} has idem schema version {v}, older than this idem's {SCHEMA_VERSION}: it is upgraded when a dispatcher of this version opens it, and agents of the older version would then refuse it; upgrade the agents first, or use the idem of their version",
            path.display()
        )),
    }
}

/// The records' table at [`SCHEMA_VERSION`], or the refusal of a newer one.
fn migrate_records(conn: &Connection, path: &Path) -> Result<(), Failure> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    match version {
        SCHEMA_VERSION => Ok(()),
        0..=2 => {
            conn.execute_batch(SCHEMA)?;
            // A version 1 table (or one made by hand before `user_version` was set), or 2.
            let has = |column: &str| -> Result<bool, rusqlite::Error> {
                conn.query_row(
                    "SELECT count(*) > 0 FROM pragma_table_info('idem_records') WHERE name = ?1",
                    [column],
                    |row| row.get(0),
                )
            };
            if !has("tenant")? {
                conn.execute_batch(ADD_TENANT)?;
            }
            if !has("contract")? {
                conn.execute_batch(ADD_CONTRACT)?;
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
pub(super) struct Database {
    pub(super) session: Mutex<Session>,
    pub(super) path: PathBuf,
    /// Pages written to the WAL since the last checkpoint started, by any connection, as seen
    /// at this connection's commits (kept by [`count_wal_pages`]).
    pages: Arc<AtomicU32>,
    /// A checkpoint is queued or running (at most one is).
    pub(super) checkpointing: AtomicBool,
    /// The last checkpoint copied the whole WAL: the next write may start the WAL over, which
    /// syncs its header, so it goes to the store's thread.
    restart_pending: AtomicBool,
    /// The clock every operation reads (the system's unless the store was given another).
    pub(super) clock: Arc<dyn crate::store::memory::Clock>,
    #[cfg(test)]
    pub(super) counts: Counts,
    /// Declared after `session`: fields drop in order, so whoever waits for this is woken
    /// once the connection is closed.
    pub(super) closing: Closing,
}

/// The one checkpoint [`Database::checkpoint_due`] reserved; dropping it (run or not: a
/// runtime shutting down drops queued blocking tasks) lets the next one be reserved.
///
/// It holds the database weakly: a checkpoint still queued when the store is dropped does not
/// keep the file open, nor the drop waiting for a thread of the pool; it finds nothing to do.
pub(super) struct CheckpointReservation(Weak<Database>);

impl CheckpointReservation {
    /// The checkpoint `db` reserved.
    pub(super) fn of(db: &Arc<Database>) -> Self {
        CheckpointReservation(Arc::downgrade(db))
    }

    /// Run it, unless the store was dropped meanwhile.
    pub(super) fn run(self) {
        if let Some(db) = self.0.upgrade() {
            db.checkpoint();
        }
    }
}

impl Drop for CheckpointReservation {
    fn drop(&mut self) {
        if let Some(db) = self.0.upgrade() {
            db.checkpointing.store(false, Ordering::Release);
        }
    }
}

/// The connection and the busy handling it is set to.
pub(super) struct Session {
    pub(super) conn: Connection,
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
        clock: &dyn crate::store::memory::Clock,
        op: &mut impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = op(&tx, clock.now())?;
        tx.commit()?;
        Ok(value)
    }
}

/// Why one attempt at an operation failed.
pub(super) enum Failure {
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
    /// The clock operations read.
    fn clock(&self) -> &dyn crate::store::memory::Clock {
        &*self.clock
    }

    /// Open the file at `path` (creating it and the schema if needed) with the store's
    /// settings: WAL mode, `synchronous = FULL`, no automatic checkpoint, the WAL hook that
    /// counts pages for this store's own checkpoints.
    pub(super) fn open(path: PathBuf) -> Result<Self, StoreError> {
        Self::open_with(path, rusqlite::OpenFlags::SQLITE_OPEN_CREATE)
    }

    /// Open a file that must exist already: never created, not even if it went away
    /// since it was checked.
    pub(super) fn open_existing(path: PathBuf) -> Result<Self, StoreError> {
        Self::open_with(path, rusqlite::OpenFlags::empty())
    }

    fn open_with(path: PathBuf, create: rusqlite::OpenFlags) -> Result<Self, StoreError> {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
            | rusqlite::OpenFlags::SQLITE_OPEN_URI
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            | create;
        let conn = Connection::open_with_flags(&path, flags).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot open SQLite database {}: {e}",
                path.display()
            ))
        })?;
        let closing = Closing::new(path.clone());
        let db = Database {
            session: Mutex::new(Session { conn, waits: false }),
            path,
            pages: Arc::new(AtomicU32::new(0)),
            checkpointing: AtomicBool::new(false),
            restart_pending: AtomicBool::new(false),
            clock: Arc::new(crate::store::memory::SystemClock),
            #[cfg(test)]
            counts: Counts::default(),
            closing,
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
            // Checkpoints run on the blocking pool instead (see the store's documentation).
            conn.pragma_update(None, "wal_autocheckpoint", 0)?;
            Ok(())
        })?;
        // Registered after `wal_autocheckpoint`, which would replace it.
        db.lock()
            .conn
            .wal_hook(Some(count_wal_pages(Arc::clone(&db.pages))))
            .map_err(|e| db.failed(e))?;
        db.write(|tx, _| migrate(tx, &db.path))?;
        Ok(db)
    }

    /// A poisoned lock only means a thread panicked while holding the connection; the
    /// transaction it had open rolled back when its guard was dropped during unwinding.
    pub(super) fn lock(&self) -> MutexGuard<'_, Session> {
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
    pub(super) fn write<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut session = self.lock();
        session.set_waits(true).map_err(|e| self.failed(e))?;
        let clock = self.clock();
        let result = self.retrying(|| session.transact(clock, &mut op));
        if result.is_ok() {
            self.restart_pending.store(false, Ordering::Relaxed);
        }
        result
    }

    /// Run `op` outside a transaction (one statement reads one consistent snapshot), waiting
    /// for other connections' locks: on a blocking thread (or at start-up).
    pub(super) fn read<T>(
        &self,
        mut op: impl FnMut(&Connection, Timestamp) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut session = self.lock();
        session.set_waits(true).map_err(|e| self.failed(e))?;
        let clock = self.clock();
        self.retrying(|| op(&session.conn, clock.now()))
    }

    /// [`Database::write`] on the calling thread without waiting for anything: `None` when the
    /// connection is in use, when another connection holds a lock (nothing was changed), or
    /// when this write may have to sync the WAL's header.
    pub(super) fn try_write_here<T>(
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
        let clock = self.clock();
        let result = session.transact(clock, &mut op);
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
    pub(super) fn try_read_here<T>(
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
        match op(&session.conn, self.clock().now()) {
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

    pub(super) fn failed(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Unavailable(format!("SQLite database {}: {e}", self.path.display()))
    }

    /// A checkpoint is queued or running. Inline attempts then stand aside (the operation
    /// waits on the pool, behind the checkpoint): an async thread that takes the free
    /// connection again and again would otherwise keep the checkpoint waiting for it.
    pub(super) fn checkpoint_waiting(&self) -> bool {
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
    pub(super) fn checkpoint_due(&self) -> bool {
        self.pages.load(Ordering::Relaxed) >= CHECKPOINT_PAGES
            && !self.checkpointing.swap(true, Ordering::Acquire)
    }

    /// Copy what the WAL holds into the database file, on the blocking pool: it syncs the WAL
    /// and the database file. It holds the store's connection meanwhile (operations wait on
    /// the pool), as SQLite's automatic checkpoint would inside a commit: a checkpoint beside
    /// a busy writer rarely catches up with the end of the WAL, and only one that does lets
    /// the WAL start over instead of growing. Passive: it never waits for another connection.
    /// A failure is logged, not reported: nobody awaits this, and the next one tries again.
    pub(super) fn checkpoint(&self) {
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

/// What the store did, counted for the tests that check how an operation ran.
#[cfg(test)]
#[derive(Default)]
pub(super) struct Counts {
    /// Inline attempts that found another connection's lock and went to the pool.
    pub(super) fell_back: AtomicU32,
    /// Checkpoints run.
    pub(super) checkpoints: AtomicU32,
    /// Operations sent to the pool because a checkpoint was queued or running.
    pub(super) stood_aside: AtomicU32,
}

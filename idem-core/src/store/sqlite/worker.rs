//! The store's own thread: the operations that may block (a write at `FULL`, an operation
//! that meets another connection's lock, every operation of a store built with
//! `with_blocking_pool`) run there, one after another, instead of on tokio's blocking pool.
//! Dropping the store ends the thread and waits for its connection to close.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::store::StoreError;

/// A job for the store's thread.
type Work = Box<dyn FnOnce() + Send>;

/// How long a dropped store waits, once its thread has ended, for its connection to close:
/// what may still hold it then is a checkpoint running on the blocking pool (milliseconds).
/// A safety net, not a measurement: past it the drop returns with a warning.
const CLOSING_WAIT: Duration = Duration::from_secs(10);

/// The store's own thread, on which the operations that may block run one after another
/// (they share one connection, so they would wait for each other anyway). Started on first
/// use.
///
/// Dropped with the store, after the store's own handle on the database: the drop lets the
/// thread finish the jobs it was given, waits for it to end, then for the connection to
/// close, so that the file is whole and closed when the store's drop returns.
#[derive(Debug)]
pub(super) struct Worker {
    thread: Mutex<Option<Thread>>,
    closed: Closed,
}

/// The running thread and the way to hand it jobs.
#[derive(Debug)]
struct Thread {
    jobs: mpsc::Sender<Work>,
    handle: JoinHandle<()>,
}

impl Worker {
    /// A worker for the database `closed` watches; no thread yet.
    pub(super) fn new(closed: Closed) -> Self {
        Worker {
            thread: Mutex::new(None),
            closed,
        }
    }

    pub(super) fn run(&self, job: Work) -> Result<(), StoreError> {
        let failed = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("SQLite worker thread failed: {e}"))
        };
        let mut thread = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        let jobs = match thread.as_ref() {
            Some(running) => &running.jobs,
            None => {
                let (jobs_in, jobs) = mpsc::channel::<Work>();
                let handle = std::thread::Builder::new()
                    .name("idem-sqlite".into())
                    .spawn(move || {
                        while let Ok(job) = jobs.recv() {
                            // A job that panics drops its reply (its caller is told the thread
                            // failed); the thread goes on with the next.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                    })
                    .map_err(|e| failed(&e))?;
                &thread
                    .insert(Thread {
                        jobs: jobs_in,
                        handle,
                    })
                    .jobs
            }
        };
        jobs.send(job).map_err(|e| failed(&e))
    }
}

impl Drop for Worker {
    /// Blocks the dropping thread (an async one too) for the jobs already handed over, each
    /// bounded by the busy timeout, and then for the connection to close.
    fn drop(&mut self) {
        let thread = self.thread.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(Thread { jobs, handle }) = thread.take() {
            drop(jobs);
            if handle.thread().id() == std::thread::current().id() {
                // Dropped by one of its own jobs, which may still hold the connection: waiting
                // here would wait for itself. The thread ends, and the connection closes, once
                // that job returns.
                return;
            }
            // Jobs that panic are caught: the thread itself ends normally.
            let _ = handle.join();
        }
        self.closed.wait();
    }
}

/// Held by the database, after its connection: dropping it tells [`Closed`] that the
/// connection is closed.
#[derive(Debug)]
pub(super) struct Closing(Arc<Latch>);

/// Waits for the connection a [`Closing`] follows to close.
#[derive(Debug)]
pub(super) struct Closed(Arc<Latch>);

#[derive(Debug)]
struct Latch {
    /// The database file, for the warning.
    path: PathBuf,
    closed: Mutex<bool>,
    changed: Condvar,
}

impl Closing {
    /// For the connection to the file at `path`, open.
    pub(super) fn new(path: PathBuf) -> Self {
        Closing(Arc::new(Latch {
            path,
            closed: Mutex::new(false),
            changed: Condvar::new(),
        }))
    }

    /// A way to wait for this to be dropped.
    pub(super) fn watch(&self) -> Closed {
        Closed(Arc::clone(&self.0))
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        *self.0.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0.changed.notify_all();
    }
}

impl Closed {
    /// Until the connection is closed, or [`CLOSING_WAIT`] passed (with a warning).
    fn wait(&self) {
        let closed = self.0.closed.lock().unwrap_or_else(|e| e.into_inner());
        let (closed, _) = self
            .0
            .changed
            .wait_timeout_while(closed, CLOSING_WAIT, |closed| !*closed)
            .unwrap_or_else(|e| e.into_inner());
        if !*closed {
            tracing::warn!(
                path = %self.0.path.display(),
                waited = ?CLOSING_WAIT,
                "a dropped SQLite store's connection is still open; it closes when the last \
                 operation holding it ends"
            );
        }
    }
}

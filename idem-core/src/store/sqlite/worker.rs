//! The store's own thread: the operations that may block (a write at `FULL`, an operation
//! that meets another connection's lock, every operation of a store built with
//! `with_blocking_pool`) run there, one after another, instead of on tokio's blocking pool.

use crate::store::StoreError;

/// A job for the store's thread.
type Work = Box<dyn FnOnce() + Send>;

/// The store's own thread, on which the operations that may block run one after another
/// (they share one connection, so they would wait for each other anyway). Started on first
/// use; it ends once the store is dropped and the jobs it was given are done.
#[derive(Debug, Default)]
pub(super) struct Worker(std::sync::Mutex<Option<std::sync::mpsc::Sender<Work>>>);

impl Worker {
    pub(super) fn run(&self, job: Work) -> Result<(), StoreError> {
        let failed = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("SQLite worker thread failed: {e}"))
        };
        let mut sender = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let jobs = match sender.as_ref() {
            Some(jobs) => jobs,
            None => {
                let (jobs_in, jobs) = std::sync::mpsc::channel::<Work>();
                std::thread::Builder::new()
                    .name("idem-sqlite".into())
                    .spawn(move || {
                        while let Ok(job) = jobs.recv() {
                            // A job that panics drops its reply (its caller is told the thread
                            // failed); the thread goes on with the next.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                    })
                    .map_err(|e| failed(&e))?;
                sender.insert(jobs_in)
            }
        };
        jobs.send(job).map_err(|e| failed(&e))
    }
}

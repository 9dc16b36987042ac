//! What every operation of the SQLite store is: a [`Job`], run inline on the caller's borrows
//! or, on a copy of its inputs, on the store's thread.

use rusqlite::Connection;

use super::connection::Failure;
use crate::record::Timestamp;

/// One operation as the store runs it: on a connection, at the clock read once it holds what
/// it needs; borrowing its inputs inline, owning a copy of them on the pool.
pub(super) trait Job: Send + Sync {
    /// What the operation answers.
    type Output: Send + 'static;

    /// The same job owning its inputs.
    type Owned: Job<Output = Self::Output> + 'static;

    /// Run on `conn` (inside a transaction, for a write).
    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Self::Output, Failure>;

    /// The job with its inputs copied, for the store's thread.
    fn detached(&self) -> Self::Owned;
}

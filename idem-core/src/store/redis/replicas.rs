//! Waiting for replicas: how many must acknowledge each write, and the error when fewer
//! did ("Replication" in the [store's documentation](super)).

use std::time::Duration;

use super::codec::millis;
use crate::key::RecordKey;
use crate::store::StoreError;

/// How many replicas must acknowledge each write, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReplicaAcks {
    pub(super) replicas: u32,
    pub(super) timeout: Duration,
}

/// A write the primary made but fewer replicas than required acknowledged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unconfirmed {
    pub(super) acked: i64,
    pub(super) acks: ReplicaAcks,
}

impl Unconfirmed {
    /// The error for `what` (e.g. "the outcome") under `key`, and what follows from it.
    pub(super) fn error(&self, key: &RecordKey, what: &str, consequence: &str) -> StoreError {
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

/// Whether a script's status says it changed the record (what replicas must acknowledge).
pub(super) fn wrote(status: &str) -> bool {
    matches!(status, "ok" | "acquired" | "marked_unknown")
}

//! What a store refuses to record, as one layer: outcomes larger than its limit
//! ([`StoreError::TooLarge`]), outcomes an operator or a verify hook gives that are not JSON
//! a replay could read back ([`StoreError::InvalidOutcome`]), and, if asked, claims whose
//! arguments are larger than a limit.
//!
//! Every store idem ships is its backend behind this layer: [`MemoryStore`] is
//! `Limited<MemoryBackend>`, and so are `SqliteStore`, `RedisStore` and `PostgresStore` over
//! theirs. The public types are the layered ones, rather than the backends with a wrapper
//! their constructors add, so that nothing a user writes changes: a store built with
//! `SqliteStore::open` (and configured with [`Limited::with_max_outcome_bytes`], as before)
//! refuses exactly what it refused when each store checked for itself, whether it is used
//! directly, behind the dispatcher or through the conformance suite. The check runs before
//! the backend is asked, so a refusal changes nothing, as before.
//!
//! A store of one's own gets the same refusals by being layered too:
//! `Limits::default().layer(my_store)`; the conformance suite's `oversized_output_is_refused`
//! case expects them.
//!
//! Depth is the dispatcher's to check ([`MAX_OUTCOME_DEPTH`](crate::store::MAX_OUTCOME_DEPTH)):
//! it holds a tool's output as a value, while a store sees only its text, which it would have
//! to parse again on every call. The argument limit of the dispatcher
//! (`Dispatcher::with_max_argument_bytes`) refuses a call before anything is claimed, with an
//! error of its own; [`Limits::with_max_argument_bytes`] is for stores used without it, and off
//! by default, as stores always were.
//!
//! [`MemoryStore`]: crate::store::memory::MemoryStore

use super::layered::Operation;
use super::layered::{Layer, Layered, StoreFuture};
use crate::record::Outcome;
use crate::store::machine::{check_settled, check_size};
use crate::store::{DEFAULT_MAX_OUTCOME_BYTES, StoreError};

/// The limits a store puts on what it records: a [`Layer`].
///
/// ```
/// use std::time::Duration;
/// use idem::store::layer::{Layer, Limits};
/// use idem::store::memory::MemoryStore;
/// use idem::store::{Claim, ClaimRequest, Store};
/// use idem::key::{Fingerprint, RecordKey}; use idem::tool::OrphanPolicy; use idem::record::Outcome; use idem::store::StoreError;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = Limits::new(16).layer(MemoryStore::new());
/// let key = RecordKey::from_stored("k");
/// let request = ClaimRequest {
///     key: key.clone(),
///     tool: "t".into(),
///     tenant: "acme".into(),
///     fingerprint: Fingerprint::of(&serde_json::json!({})),
///     lease: Duration::from_secs(30),
///     orphans: OrphanPolicy::TakeOver,
///     arguments: None,
///     contract: None,
/// };
/// let Ok(Claim::Acquired { fence, .. }) = store.claim(&request).await else { panic!() };
/// let long = Outcome::Success(format!("\"{}\"", "x".repeat(64)));
/// let refused = store.complete(&key, fence, &long, Duration::from_secs(60)).await;
/// assert!(matches!(refused, Err(StoreError::TooLarge { bytes: 66, limit: 16 })));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_outcome_bytes: usize,
    max_argument_bytes: Option<usize>,
}

impl Default for Limits {
    /// Outcomes up to [`DEFAULT_MAX_OUTCOME_BYTES`], arguments unbounded.
    fn default() -> Self {
        Limits::new(DEFAULT_MAX_OUTCOME_BYTES)
    }
}

impl Limits {
    /// Outcomes up to `max_outcome_bytes` (as [`Outcome::stored_len`] counts them), arguments
    /// unbounded.
    ///
    /// ```
    /// use idem::store::layer::Limits;
    /// assert_eq!(Limits::new(1024).max_outcome_bytes(), 1024);
    /// ```
    pub const fn new(max_outcome_bytes: usize) -> Self {
        Limits {
            max_outcome_bytes,
            max_argument_bytes: None,
        }
    }

    /// Refuse claims whose canonical arguments are longer than `bytes` with
    /// [`StoreError::TooLarge`] (nothing is claimed).
    ///
    /// ```
    /// use idem::store::layer::Limits;
    /// let limits = Limits::default().with_max_argument_bytes(64 * 1024);
    /// assert_eq!(limits.max_argument_bytes(), Some(64 * 1024));
    /// ```
    pub const fn with_max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = Some(bytes);
        self
    }

    /// The largest outcome recorded.
    pub const fn max_outcome_bytes(&self) -> usize {
        self.max_outcome_bytes
    }

    /// The longest arguments claimed, if they are bounded.
    pub const fn max_argument_bytes(&self) -> Option<usize> {
        self.max_argument_bytes
    }

    /// Whether the limits let `operation` through, and the refusal if not.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::store::layer::{Limits, Operation};
    /// use idem::record::Outcome; use idem::key::RecordKey;
    ///
    /// let key = RecordKey::from_stored("k");
    /// let text = Outcome::Success("receipt 42".into());
    /// let ttl = Duration::from_secs(60);
    /// // A holder's own output is only measured; what an operator gives must be JSON.
    /// let complete = Operation::Complete { key: &key, fence: 1, outcome: &text, ttl };
    /// assert!(Limits::default().check(&complete).is_ok());
    /// let resolve = Operation::Resolve { key: &key, outcome: &text, ttl };
    /// assert!(Limits::default().check(&resolve).is_err());
    /// ```
    pub fn check(&self, operation: &Operation<'_>) -> Result<(), StoreError> {
        let settled = |outcome: &Outcome| check_settled(outcome, self.max_outcome_bytes);
        match *operation {
            // The dispatcher's own output, written from a `serde_json::Value`: measured, not
            // parsed again (that would cost a parse per call).
            Operation::Complete { outcome, .. } => check_size(outcome, self.max_outcome_bytes),
            // An operator's or a verify hook's outcome, which may be any text.
            Operation::Resolve { outcome, .. } => settled(outcome),
            Operation::SettleUnknown {
                outcome: Some(outcome),
                ..
            } => settled(outcome),
            // An account entry is the dispatcher's, bounded as an outcome is.
            Operation::AppendRunEntry { text, .. } if text.len() > self.max_outcome_bytes => {
                Err(StoreError::TooLarge {
                    bytes: text.len(),
                    limit: self.max_outcome_bytes,
                })
            }
            Operation::Claim { request } => match (self.max_argument_bytes, &request.arguments) {
                (Some(limit), Some(arguments)) if arguments.len() > limit => {
                    Err(StoreError::TooLarge {
                        bytes: arguments.len(),
                        limit,
                    })
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

impl Layer for Limits {
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &Operation<'_>,
        next: impl FnOnce() -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        match self.check(operation) {
            Ok(()) => next(),
            Err(refused) => Box::pin(std::future::ready(Err(refused))),
        }
    }
}

/// A store behind [`Limits`]: what every store idem ships is.
pub type Limited<S> = Layered<S, Limits>;

impl<S> Limited<S> {
    /// Limit the size of one recorded outcome (default [`DEFAULT_MAX_OUTCOME_BYTES`]); larger
    /// outcomes are refused with [`StoreError::TooLarge`], and nothing changes.
    ///
    /// ```
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = MemoryStore::new().with_max_outcome_bytes(64 * 1024);
    /// assert_eq!(store.get_layer().max_outcome_bytes(), 64 * 1024);
    /// ```
    pub fn with_max_outcome_bytes(mut self, limit: usize) -> Self {
        self.layer.max_outcome_bytes = limit;
        self
    }
}

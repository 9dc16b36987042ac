//! An in-memory store: for tests and single-process use. Sharded, bounded, and it makes its
//! decisions with the same state machine as the durable stores.
//!
//! Records are kept in a compact form of their own and turned into [`Record`]s only at the
//! [`Store`] boundary, so that a million records take little more than their arguments and
//! outcomes (BENCHMARKS.md, "Memory per record").
//!
//! The folder: `clock.rs` (where the time comes from), `keys.rs` (how a key is filed and
//! hashed), `compact.rs` (the record's compact form), `shard.rs` (one shard's tables),
//! `store.rs` (the [`Store`] impl).
//!
//! [`Record`]: crate::record::Record

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

mod clock;
mod compact;
mod keys;
mod shard;
mod store;
#[cfg(test)]
mod tests;

pub use clock::{Clock, ManualClock, SystemClock};

use keys::{KeyRef, SHARDS};
use shard::{Shard, lock};

use crate::store::layer::{Layer, Limited, Limits};
#[cfg(doc)]
use crate::store::{Store, StoreError};

/// The default number of records a [`MemoryStore`] holds.
pub const DEFAULT_CAPACITY: usize = 1_000_000;

/// A bounded, sharded in-memory [`Store`]: a [`MemoryBackend`] behind the store
/// [`Limits`].
///
/// Completed records past their TTL are evicted when space is needed and by
/// [`Store::purge_expired`]; live records (InProgress, Unknown, unexpired Completed) are never
/// evicted: a full store refuses new claims with [`StoreError::CapacityExceeded`] rather than
/// forget a record.
///
/// ```
/// use idem::MemoryStore;
///
/// let store = MemoryStore::new().with_capacity(10_000);
/// # let _ = store;
/// ```
pub type MemoryStore = Limited<MemoryBackend>;

/// The records and clock of a [`MemoryStore`], without its [`Limits`]: what the layer wraps.
pub struct MemoryBackend {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    clock: Arc<dyn Clock>,
    /// Pending approvals' texts by record key (few, and decided by people: one lock).
    approvals: Mutex<std::collections::BTreeMap<String, String>>,
    /// Run accounts by tenant and run: each entry with when it expires, in append order.
    runs: Mutex<RunAccounts>,
    /// Budgets' texts by scope, each with when it expires (few, one lock).
    budgets: Mutex<Budgets>,
}

/// Budgets: by scope, when the text expires and the text.
type Budgets = std::collections::HashMap<String, (crate::record::Timestamp, String)>;

/// Run accounts, by tenant and run id.
type RunAccounts =
    std::collections::HashMap<(String, String), Vec<(crate::record::Timestamp, String)>>;

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("capacity", &(self.per_shard * SHARDS))
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl MemoryBackend {
    fn shard(&self, key: KeyRef<'_>) -> MutexGuard<'_, Shard> {
        lock(&self.shards[key.shard()])
    }

    /// How many records are held, expired ones included until they are evicted.
    fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store holding up to [`DEFAULT_CAPACITY`] records, on the system clock.
    ///
    /// ```
    /// let store = idem::store::memory::MemoryStore::new();
    /// assert!(store.is_empty());
    /// ```
    pub fn new() -> Self {
        let backend = MemoryBackend {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: DEFAULT_CAPACITY.div_ceil(SHARDS),
            clock: Arc::new(SystemClock),
            approvals: Mutex::default(),
            runs: Mutex::default(),
            budgets: Mutex::default(),
        };
        Limits::default().layer(backend)
    }

    /// Bound the number of records (rounded up to a multiple of the shard count).
    ///
    /// ```
    /// let store = idem::store::memory::MemoryStore::new().with_capacity(100);
    /// assert!(format!("{store:?}").contains("capacity: 112"));
    /// ```
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.inner.per_shard = capacity.max(1).div_ceil(SHARDS);
        self
    }

    /// Use another clock (a [`ManualClock`] in tests).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idem::store::memory::{ManualClock, MemoryStore};
    ///
    /// let store = MemoryStore::new().with_clock(Arc::new(ManualClock::new()));
    /// # let _ = store;
    /// ```
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.inner.clock = clock;
        self
    }

    /// How many records are held, expired ones included until they are evicted.
    ///
    /// ```
    /// assert_eq!(idem::store::memory::MemoryStore::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no record is held.
    ///
    /// ```
    /// assert!(idem::store::memory::MemoryStore::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

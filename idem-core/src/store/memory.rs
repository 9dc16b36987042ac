//! An in-memory store: for tests and single-process use. Sharded, bounded, and it makes its
//! decisions with the same state machine as the durable stores.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine::{self, Write};
use crate::store::{Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, ListFilter, Store, StoreError};

/// A source of time for the memory store, so tests can expire leases without sleeping.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to.
///
/// ```
/// use std::time::Duration;
/// use idem_core::store::memory::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now().as_millis(), t0.as_millis() + 2000);
/// ```
#[derive(Debug)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// Start at the system time.
    pub fn new() -> Self {
        ManualClock(AtomicU64::new(Timestamp::now().as_millis()))
    }

    /// Move forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(
            u64::try_from(by.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

const SHARDS: usize = 16;

/// One shard: records found by their own key. A set of boxed records rather than a map from
/// key to record keeps the key once per record (not twice) and the table's slots one pointer
/// wide (a table is at most 7/8 full and up to half empty after it grows, so inline records
/// would cost their size again in empty slots).
type Shard = HashSet<Slot>;

/// A record in a shard, hashed and compared by its key.
struct Slot(Box<Record>);

impl Borrow<str> for Slot {
    fn borrow(&self) -> &str {
        self.0.key.as_str()
    }
}

impl Hash for Slot {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same hash as the key's `str`, as `Borrow<str>` requires.
        self.0.key.as_str().hash(state);
    }
}

impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Slot {}

/// The record under `key` in a shard.
fn find<'a>(map: &'a Shard, key: &RecordKey) -> Option<&'a Record> {
    map.get(key.as_str()).map(|slot| &*slot.0)
}

/// The default number of records a [`MemoryStore`] holds.
pub const DEFAULT_CAPACITY: usize = 1_000_000;

/// A bounded, sharded in-memory [`Store`].
///
/// Completed records past their TTL are evicted when space is needed and by
/// [`Store::purge_expired`]; live records (InProgress, Unknown, unexpired Completed) are never
/// evicted: a full store refuses new claims with [`StoreError::CapacityExceeded`] rather than
/// forget a record.
///
/// ```
/// use idem_core::store::memory::MemoryStore;
///
/// let store = MemoryStore::new().with_capacity(10_000);
/// # let _ = store;
/// ```
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    clock: Arc<dyn Clock>,
    max_outcome_bytes: usize,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("capacity", &(self.per_shard * SHARDS))
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store holding up to [`DEFAULT_CAPACITY`] records, on the system clock.
    pub fn new() -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashSet::new())).collect(),
            per_shard: DEFAULT_CAPACITY.div_ceil(SHARDS),
            clock: Arc::new(SystemClock),
            max_outcome_bytes: DEFAULT_MAX_OUTCOME_BYTES,
        }
    }

    /// Bound the number of records (rounded up to a multiple of the shard count).
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.per_shard = capacity.max(1).div_ceil(SHARDS);
        self
    }

    /// Use another clock (a [`ManualClock`] in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Limit the size of one recorded outcome.
    pub fn with_max_outcome_bytes(mut self, limit: usize) -> Self {
        self.max_outcome_bytes = limit;
        self
    }

    /// How many records are held, expired ones included until they are evicted.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &RecordKey) -> MutexGuard<'_, Shard> {
        // Keys are hex digests: their first bytes are uniformly spread.
        let b = key.as_str().as_bytes();
        let h = b.iter().take(4).fold(0usize, |acc, x| {
            acc.wrapping_mul(31).wrapping_add(*x as usize)
        });
        lock(&self.shards[h % SHARDS])
    }

    fn apply(map: &mut Shard, key: &RecordKey, write: Write) {
        match write {
            Write::Unchanged => {}
            Write::Put(r) => {
                // The machine writes a record under the key it was asked about.
                debug_assert_eq!(&r.key, key);
                map.replace(Slot(r));
            }
            Write::Delete => {
                map.remove(key.as_str());
            }
        }
    }
}

/// A poisoned shard only means another thread panicked while holding it; every write to a
/// shard is a single map operation, so its data is still consistent.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Store for MemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let now = self.clock.now();
        let mut map = self.shard(&request.key);
        if !map.contains(request.key.as_str()) && map.len() >= self.per_shard {
            map.retain(|slot| machine::is_live(&slot.0, now));
            if map.len() >= self.per_shard {
                return Err(StoreError::CapacityExceeded {
                    capacity: self.per_shard * SHARDS,
                });
            }
        }
        let (write, claim) = machine::claim(find(&map, &request.key), request, now);
        Self::apply(&mut map, &request.key, write);
        Ok(claim)
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        machine::check_size(outcome, self.max_outcome_bytes)?;
        let now = self.clock.now();
        let mut map = self.shard(key);
        let write = machine::complete(find(&map, key), key, fence, outcome, ttl, now)?;
        Self::apply(&mut map, key, write);
        Ok(())
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        let mut map = self.shard(key);
        let (write, released) = machine::release(find(&map, key), key, fence);
        Self::apply(&mut map, key, write);
        Ok(released)
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let now = self.clock.now();
        let mut map = self.shard(key);
        let (write, until) = machine::renew(find(&map, key), key, fence, lease, now)?;
        Self::apply(&mut map, key, write);
        Ok(until)
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut map = self.shard(key);
        let write = machine::journal(find(&map, key), key, fence, step, value, now)?;
        Self::apply(&mut map, key, write);
        Ok(())
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut map = self.shard(key);
        let write = machine::mark_unknown(find(&map, key), key, fence, error, now)?;
        Self::apply(&mut map, key, write);
        Ok(())
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let now = self.clock.now();
        let map = self.shard(key);
        Ok(find(&map, key)
            .filter(|r| machine::is_live(r, now))
            .cloned())
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let map = lock(shard);
            for r in map.iter().map(|slot| &*slot.0) {
                let wanted = match filter.state {
                    Some(kind) => r.state.kind() == kind,
                    None => r.state.kind() != StateKind::Completed,
                };
                if wanted && machine::is_live(r, now) {
                    out.push(r.clone());
                }
            }
        }
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.key.cmp(&b.key))
        });
        out.truncate(filter.limit);
        Ok(out)
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        machine::check_size(outcome, self.max_outcome_bytes)?;
        let now = self.clock.now();
        let mut map = self.shard(key);
        let (write, record) = machine::resolve(find(&map, key), key, outcome, ttl, now)?;
        Self::apply(&mut map, key, write);
        Ok(record)
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
        let now = self.clock.now();
        let mut map = self.shard(key);
        let (write, settled) = machine::settle_unknown(find(&map, key), fence, outcome, ttl, now);
        Self::apply(&mut map, key, write);
        Ok(settled)
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        let mut map = self.shard(key);
        let write = machine::force_release(find(&map, key), key)?;
        Self::apply(&mut map, key, write);
        Ok(true)
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let mut purged = 0;
        for shard in self.shards.iter() {
            if purged >= limit {
                break;
            }
            let mut map = lock(shard);
            let expired: Vec<RecordKey> = map
                .iter()
                .map(|slot| &*slot.0)
                .filter(|r| {
                    matches!(r.state, RecordState::Completed { .. }) && !machine::is_live(r, now)
                })
                .map(|r| r.key.clone())
                .take(limit - purged)
                .collect();
            for k in expired {
                map.remove(k.as_str());
                purged += 1;
            }
        }
        Ok(purged)
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.clock.now())
    }
}

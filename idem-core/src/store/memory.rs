//! An in-memory store: for tests and single-process use. Sharded, bounded, and it makes its
//! decisions with the same state machine as the durable stores.
//!
//! Records are kept in a compact form of their own and turned into [`Record`]s only at the
//! [`Store`] boundary, so that a million records take little more than their arguments and
//! outcomes (BENCHMARKS.md, "Memory per record").

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::canonical::{Fingerprint, hex};
use crate::error::ToolError;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine::{self, Write};
use crate::store::{
    Claim, ClaimRequest, DEFAULT_MAX_OUTCOME_BYTES, ListFilter, PurgeFilter, Store, StoreError,
};

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
/// # mod idem { pub use idem_core::store::memory::{Clock, ManualClock}; }
/// use std::time::Duration;
/// use idem::{Clock, ManualClock};
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

/// The 32 bytes spelled by a key of 64 lower-case hex digits.
type Digest = [u8; 32];

/// A record's key as a shard files it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRef<'a> {
    /// 64 lower-case hex digits (every key [`crate::LogicalKey::record_key`] derives), kept as
    /// the 32 bytes they spell: half the size, and cheaper to hash.
    Digest(Digest),
    /// Any other key (one read back from elsewhere, a test's name), kept as written so that it
    /// comes back byte for byte.
    Text(&'a str),
}

impl<'a> KeyRef<'a> {
    fn of(key: &'a RecordKey) -> Self {
        match decode_digest(key.as_str()) {
            Some(d) => KeyRef::Digest(d),
            None => KeyRef::Text(key.as_str()),
        }
    }

    fn to_record_key(self) -> RecordKey {
        match self {
            KeyRef::Digest(d) => RecordKey::from_stored(hex(&d)),
            KeyRef::Text(t) => RecordKey::from_stored(t),
        }
    }

    /// Which shard holds the key.
    fn shard(self) -> usize {
        match self {
            // A digest's bytes are uniformly spread.
            KeyRef::Digest(d) => usize::from(d[0]) % SHARDS,
            KeyRef::Text(t) => {
                let h = t.bytes().take(4).fold(0usize, |acc, x| {
                    acc.wrapping_mul(31).wrapping_add(usize::from(x))
                });
                h % SHARDS
            }
        }
    }
}

/// The bytes of exactly 64 lower-case hex digits. Upper case is refused: encoding the bytes
/// again must give back the very same text.
fn decode_digest(s: &str) -> Option<Digest> {
    // Each input byte's value as a hex digit, or 0xff. The loop only looks up and merges, and
    // checks once at the end: every key of every call goes through here.
    const DIGIT: [u8; 256] = {
        let mut table = [0xff; 256];
        let mut i = 0;
        while i < 10 {
            table[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            table[b'a' as usize + i] = 10 + i as u8;
            i += 1;
        }
        table
    };
    let bytes: &[u8; 64] = s.as_bytes().try_into().ok()?;
    let mut out = [0u8; 32];
    let mut invalid = 0u8;
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let (hi, lo) = (DIGIT[usize::from(pair[0])], DIGIT[usize::from(pair[1])]);
        invalid |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    (invalid & 0xf0 == 0).then_some(out)
}

/// A record as the memory store keeps it: a [`Record`] without its key (the entry holds it)
/// and with every part sized for the common case. A completed success, the bulk of any store,
/// is 128 bytes here plus its arguments and output, against 224 for a [`Record`] plus its key,
/// tool name, arguments and output.
#[derive(Debug, Clone, PartialEq)]
struct Compact {
    fingerprint: Fingerprint,
    /// The tool and tenant, shared by every record of that pair in the shard (see [`Tools`]).
    tool: Arc<str>,
    arguments: Option<Box<str>>,
    fence: Fence,
    created_at: Timestamp,
    updated_at: Timestamp,
    state: CompactState,
    /// Most calls journal nothing: one pointer, not an empty `Vec`'s three words (the lint is
    /// about the extra allocation, which only a record with steps pays).
    #[allow(clippy::box_collection)]
    steps: Option<Box<Vec<JournalEntry>>>,
}

/// [`RecordState`] with exact-size text and the rare terminal error boxed, so that the enum is
/// no larger than its common variants.
#[derive(Debug, Clone, PartialEq)]
enum CompactState {
    InProgress {
        lease_until: Timestamp,
    },
    Succeeded {
        expires_at: Timestamp,
        output: Box<str>,
    },
    Failed {
        expires_at: Timestamp,
        error: Box<ToolError>,
    },
    Unknown {
        since: Timestamp,
        last_error: Box<str>,
    },
}

impl Compact {
    /// Everything of `record` but its key and tool name, which the caller has already filed.
    fn new(record: Record, tool: Arc<str>) -> Self {
        let state = match record.state {
            RecordState::InProgress { lease_until } => CompactState::InProgress { lease_until },
            RecordState::Completed {
                outcome: Outcome::Success(output),
                expires_at,
            } => CompactState::Succeeded {
                expires_at,
                output: output.into_boxed_str(),
            },
            RecordState::Completed {
                outcome: Outcome::Failure(error),
                expires_at,
            } => CompactState::Failed {
                expires_at,
                error: Box::new(error),
            },
            RecordState::Unknown { since, last_error } => CompactState::Unknown {
                since,
                last_error: last_error.into_boxed_str(),
            },
        };
        Compact {
            fingerprint: record.fingerprint,
            tool,
            arguments: record.arguments.map(String::into_boxed_str),
            fence: record.fence,
            created_at: record.created_at,
            updated_at: record.updated_at,
            state,
            steps: if record.steps.is_empty() {
                None
            } else {
                Some(Box::new(record.steps))
            },
        }
    }

    /// The record, under `key`.
    fn to_record(&self, key: RecordKey) -> Record {
        let state = match &self.state {
            CompactState::InProgress { lease_until } => RecordState::InProgress {
                lease_until: *lease_until,
            },
            CompactState::Succeeded { expires_at, output } => RecordState::Completed {
                outcome: Outcome::Success(String::from(&**output)),
                expires_at: *expires_at,
            },
            CompactState::Failed { expires_at, error } => RecordState::Completed {
                outcome: Outcome::Failure(ToolError::clone(error)),
                expires_at: *expires_at,
            },
            CompactState::Unknown { since, last_error } => RecordState::Unknown {
                since: *since,
                last_error: String::from(&**last_error),
            },
        };
        let (tool, tenant) = split_origin(&self.tool);
        Record {
            key,
            tool: tool.to_owned(),
            tenant: tenant.to_owned(),
            fingerprint: self.fingerprint,
            fence: self.fence,
            state,
            steps: self.steps.as_deref().cloned().unwrap_or_default(),
            arguments: self.arguments.as_deref().map(str::to_owned),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    fn kind(&self) -> StateKind {
        match self.state {
            CompactState::InProgress { .. } => StateKind::InProgress,
            CompactState::Succeeded { .. } | CompactState::Failed { .. } => StateKind::Completed,
            CompactState::Unknown { .. } => StateKind::Unknown,
        }
    }

    /// [`machine::is_purgeable`] without building the record.
    fn is_purgeable(&self, filter: &PurgeFilter, now: Timestamp) -> bool {
        if filter
            .tenant
            .as_ref()
            .is_some_and(|t| split_origin(&self.tool).1 != t)
        {
            return false;
        }
        match self.state {
            CompactState::Succeeded { expires_at, .. }
            | CompactState::Failed { expires_at, .. } => expires_at <= now,
            CompactState::Unknown { since, .. } => since.plus(filter.unknown_retention) <= now,
            CompactState::InProgress { .. } => false,
        }
    }

    /// [`machine::is_live`] without building the record (a test holds the two together).
    fn is_live(&self, now: Timestamp) -> bool {
        match self.state {
            CompactState::Succeeded { expires_at, .. }
            | CompactState::Failed { expires_at, .. } => expires_at > now,
            CompactState::InProgress { .. } | CompactState::Unknown { .. } => true,
        }
    }
}

/// The tool names of a shard's records, each kept once and shared by its records.
///
/// Names never leave the shard (a [`Record`] gets a copy), so a name's count is the interner's
/// own reference plus one per record: a record that drops the last but one takes the name out.
///
/// A name is a record's tool and tenant together, written by [`origin`]: one pointer per
/// record for both (most of a shard's records share a few pairs).
#[derive(Debug, Default)]
struct Tools(HashSet<Arc<str>>, String);

impl Tools {
    fn intern(&mut self, tool: &str, tenant: &str) -> Arc<str> {
        let mut name = std::mem::take(&mut self.1);
        name.clear();
        origin(&mut name, tool, tenant);
        let t = match self.0.get(name.as_str()) {
            Some(t) => t.clone(),
            None => {
                let t: Arc<str> = Arc::from(name.as_str());
                self.0.insert(t.clone());
                t
            }
        };
        self.1 = name;
        t
    }

    /// Call with a record's tool just before the record is dropped.
    fn forget(&mut self, tool: &Arc<str>) {
        if Arc::strong_count(tool) <= 2 {
            self.0.remove(&**tool);
        }
    }
}

/// Write a tool and a tenant as one name: the tool's length, `:`, the tool, the tenant (the
/// length keeps any pair of strings apart).
fn origin(out: &mut String, tool: &str, tenant: &str) {
    // The length's digits without the formatting machinery: this runs on every claim.
    let mut digits = [0; 20];
    let digits = crate::key::decimal(tool.len() as u64, &mut digits);
    out.extend(digits.iter().map(|&d| char::from(d)));
    out.push(':');
    out.push_str(tool);
    out.push_str(tenant);
}

/// The tool and tenant of a name [`origin`] wrote.
fn split_origin(name: &str) -> (&str, &str) {
    name.split_once(':')
        .and_then(|(len, rest)| {
            let len = len.parse::<usize>().ok()?;
            Some((rest.get(..len)?, rest.get(len..)?))
        })
        .unwrap_or((name, ""))
}

/// A record and its key, boxed in a table so that the table's slots are one pointer wide (a
/// table is at most 7/8 full and up to half empty after it grows: inline entries would cost
/// their size again in empty slots).
#[derive(Debug)]
struct Entry<K> {
    key: K,
    record: Compact,
}

/// An entry in a table, hashed and compared by its key.
#[derive(Debug)]
struct Slot<K>(Box<Entry<K>>);

impl Borrow<Digest> for Slot<Digest> {
    fn borrow(&self) -> &Digest {
        &self.0.key
    }
}

impl Hash for Slot<Digest> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same hash as the borrowed form's, as `Borrow` requires.
        self.0.key.hash(state);
    }
}

impl Borrow<str> for Slot<Box<str>> {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

impl Hash for Slot<Box<str>> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same hash as the borrowed form's, as `Borrow` requires.
        str::hash(&self.0.key, state);
    }
}

impl<K: PartialEq> PartialEq for Slot<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl<K: Eq> Eq for Slot<K> {}

/// Store `record` in the entry that held the key before (reusing its allocation and, when the
/// tool is the same, its name), or in a new one.
fn fill<K>(
    tools: &mut Tools,
    old: Option<Box<Entry<K>>>,
    key: impl FnOnce() -> K,
    record: Record,
) -> Box<Entry<K>> {
    match old {
        Some(mut entry) => {
            let tool = if split_origin(&entry.record.tool) == (&record.tool, &record.tenant) {
                entry.record.tool.clone()
            } else {
                tools.intern(&record.tool, &record.tenant)
            };
            let previous = std::mem::replace(&mut entry.record, Compact::new(record, tool));
            tools.forget(&previous.tool);
            entry
        }
        None => {
            let tool = tools.intern(&record.tool, &record.tenant);
            Box::new(Entry {
                key: key(),
                record: Compact::new(record, tool),
            })
        }
    }
}

/// How the digest table hashes its keys. A key there is a SHA-256 output, already uniform, so
/// two of its words folded with a secret per-table seed make the hash, at a fraction of
/// SipHash's cost. The seed matters: a caller could grind key material offline until many
/// digests share the bits that pick a bucket; without the seed it cannot know which bits.
/// (The first byte picks the shard, so the words come from further in.)
#[derive(Debug, Clone)]
struct DigestHashing {
    seed: [u64; 2],
}

impl Default for DigestHashing {
    fn default() -> Self {
        let random = RandomState::new();
        DigestHashing {
            seed: [random.hash_one(1u8), random.hash_one(2u8)],
        }
    }
}

impl BuildHasher for DigestHashing {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher {
            seed: self.seed,
            hash: 0,
        }
    }
}

#[derive(Debug)]
struct DigestHasher {
    seed: [u64; 2],
    hash: u64,
}

impl DigestHasher {
    /// Multiply as 128 bits and fold the halves: every input bit reaches the low bits.
    fn fold(a: u64, b: u64) -> u64 {
        let product = u128::from(a) * u128::from(b);
        (product as u64) ^ ((product >> 64) as u64)
    }

    fn word(bytes: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(bytes);
        u64::from_le_bytes(w)
    }
}

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        if bytes.len() == 32 {
            // A digest's 32 bytes, the only input this table hashes.
            self.hash ^= Self::fold(
                Self::word(&bytes[8..16]) ^ self.seed[0],
                Self::word(&bytes[16..24]) ^ self.seed[1],
            );
        } else {
            // Anything else (never, in this table) is still hashed, byte by byte.
            for &b in bytes {
                self.hash = Self::fold(self.hash ^ u64::from(b) ^ self.seed[0], self.seed[1] | 1);
            }
        }
    }

    fn write_usize(&mut self, n: usize) {
        // The length a slice's hash writes first; always 32 here, and mixed in all the same.
        self.hash = Self::fold(self.hash ^ n as u64 ^ self.seed[1], self.seed[0] | 1);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// One shard: records found by their key, in one of two tables by the key's form.
#[derive(Debug, Default)]
struct Shard {
    digests: HashSet<Slot<Digest>, DigestHashing>,
    texts: HashSet<Slot<Box<str>>>,
    tools: Tools,
}

impl Shard {
    fn len(&self) -> usize {
        self.digests.len() + self.texts.len()
    }

    fn get(&self, key: KeyRef<'_>) -> Option<&Compact> {
        match key {
            KeyRef::Digest(d) => self.digests.get(&d).map(|s| &s.0.record),
            KeyRef::Text(t) => self.texts.get(t).map(|s| &s.0.record),
        }
    }

    fn put(&mut self, key: KeyRef<'_>, record: Record) {
        match key {
            KeyRef::Digest(d) => {
                let old = self.digests.take(&d).map(|s| s.0);
                let entry = fill(&mut self.tools, old, || d, record);
                self.digests.insert(Slot(entry));
            }
            KeyRef::Text(t) => {
                let old = self.texts.take(t).map(|s| s.0);
                let entry = fill(&mut self.tools, old, || t.into(), record);
                self.texts.insert(Slot(entry));
            }
        }
    }

    fn remove(&mut self, key: KeyRef<'_>) {
        let tool = match key {
            KeyRef::Digest(d) => self.digests.take(&d).map(|s| s.0.record.tool),
            KeyRef::Text(t) => self.texts.take(t).map(|s| s.0.record.tool),
        };
        if let Some(tool) = tool {
            self.tools.forget(&tool);
        }
    }

    /// Keep the records `keep` says to; how many went.
    fn retain(&mut self, mut keep: impl FnMut(&Compact) -> bool) -> usize {
        let before = self.len();
        let tools = &mut self.tools;
        let mut judge = |record: &Compact| {
            let kept = keep(record);
            if !kept {
                tools.forget(&record.tool);
            }
            kept
        };
        self.digests.retain(|s| judge(&s.0.record));
        self.texts.retain(|s| judge(&s.0.record));
        before - self.len()
    }

    fn iter(&self) -> impl Iterator<Item = (KeyRef<'_>, &Compact)> {
        let digests = self
            .digests
            .iter()
            .map(|s| (KeyRef::Digest(s.0.key), &s.0.record));
        let texts = self
            .texts
            .iter()
            .map(|s| (KeyRef::Text(&s.0.key), &s.0.record));
        digests.chain(texts)
    }
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
/// # mod idem { pub use idem_core::store::memory::MemoryStore; }
/// use idem::MemoryStore;
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
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
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

    fn shard(&self, key: KeyRef<'_>) -> MutexGuard<'_, Shard> {
        lock(&self.shards[key.shard()])
    }

    /// One transition of the state machine on the record under `key`, under its shard's lock.
    fn transition<T>(
        &self,
        key: &RecordKey,
        step: impl FnOnce(Option<Record>) -> Result<(Write, T), StoreError>,
    ) -> Result<T, StoreError> {
        let at = KeyRef::of(key);
        let mut shard = self.shard(at);
        let existing = shard.get(at).map(|c| c.to_record(key.clone()));
        let (write, answer) = step(existing)?;
        shard.apply(at, write);
        Ok(answer)
    }
}

impl Shard {
    fn apply(&mut self, key: KeyRef<'_>, write: Write) {
        match write {
            Write::Unchanged => {}
            Write::Put(r) => {
                // The machine writes a record under the key it was asked about.
                debug_assert_eq!(KeyRef::of(&r.key), key);
                self.put(key, *r);
            }
            Write::Delete => self.remove(key),
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
        let at = KeyRef::of(&request.key);
        let mut shard = self.shard(at);
        let existing = shard.get(at).map(|c| c.to_record(request.key.clone()));
        if existing.is_none() && shard.len() >= self.per_shard {
            shard.retain(|r| r.is_live(now));
            if shard.len() >= self.per_shard {
                return Err(StoreError::CapacityExceeded {
                    capacity: self.per_shard * SHARDS,
                });
            }
        }
        let (write, claim) = machine::claim(existing, request, now);
        shard.apply(at, write);
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
        self.transition(key, |r| {
            Ok((machine::complete(r, key, fence, outcome, ttl, now)?, ()))
        })
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        self.transition(key, |r| Ok(machine::release(r.as_ref(), fence)))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let now = self.clock.now();
        self.transition(key, |r| machine::renew(r, key, fence, lease, now))
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        self.transition(key, |r| {
            Ok((machine::journal(r, key, fence, step, value, now)?, ()))
        })
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        self.transition(key, |r| {
            Ok((machine::mark_unknown(r, key, fence, error, now)?, ()))
        })
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let now = self.clock.now();
        let at = KeyRef::of(key);
        let shard = self.shard(at);
        Ok(shard
            .get(at)
            .filter(|r| r.is_live(now))
            .map(|r| r.to_record(key.clone())))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            for (key, r) in shard.iter() {
                let wanted = match filter.state {
                    Some(kind) => r.kind() == kind,
                    None => r.kind() != StateKind::Completed,
                } && filter
                    .tenant
                    .as_ref()
                    .is_none_or(|t| split_origin(&r.tool).1 == t);
                if wanted && r.is_live(now) {
                    out.push(r.to_record(key.to_record_key()));
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
        machine::check_settled(outcome, self.max_outcome_bytes)?;
        let now = self.clock.now();
        self.transition(key, |r| {
            machine::resolve(r.as_ref(), key, outcome, ttl, now)
        })
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        if let Some(o) = outcome {
            machine::check_settled(o, self.max_outcome_bytes)?;
        }
        let now = self.clock.now();
        self.transition(key, |r| {
            Ok(machine::settle_unknown(
                r.as_ref(),
                fence,
                outcome,
                ttl,
                now,
            ))
        })
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        self.transition(key, |r| {
            Ok((machine::force_release(r.as_ref(), key)?, true))
        })
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let limit = filter.limit;
        let mut purged = 0;
        for shard in self.shards.iter() {
            if purged >= limit {
                break;
            }
            let mut budget = limit - purged;
            purged += lock(shard).retain(|r| {
                if budget > 0 && r.is_purgeable(filter, now) {
                    budget -= 1;
                    false
                } else {
                    true
                }
            });
        }
        Ok(purged)
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.clock.now())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn digest_hashes_spread_within_a_shard() {
        use sha2::{Digest as _, Sha256};
        // Keys of one shard share their first byte; the bits that pick a bucket must not.
        let hashing = DigestHashing::default();
        let mut buckets = HashSet::new();
        let mut n = 0u32;
        let mut i = 0u32;
        while n < 4096 {
            let d: [u8; 32] = Sha256::digest(i.to_le_bytes()).into();
            i += 1;
            if KeyRef::Digest(d).shard() != 0 {
                continue;
            }
            n += 1;
            buckets.insert(hashing.hash_one(d) & 0xfff);
        }
        // 4,096 uniform draws from 4,096 buckets fill about 2,590 of them.
        assert!(buckets.len() > 2300, "{} buckets of 4096", buckets.len());
        // Another table draws another seed.
        let other = DigestHashing::default();
        assert_ne!(hashing.hash_one([7u8; 32]), other.hash_one([7u8; 32]));
    }
    use super::*;
    use crate::class::OrphanPolicy;
    use crate::key::{KeyMaterial, LogicalKey};
    use serde_json::json;

    const TTL: Duration = Duration::from_secs(60);
    const LEASE: Duration = Duration::from_secs(30);

    fn store() -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        (MemoryStore::new().with_clock(clock.clone()), clock)
    }

    fn derived(call_id: &str) -> RecordKey {
        let material = KeyMaterial::CallId {
            call_id: call_id.into(),
            run_id: None,
        };
        LogicalKey::new("ns", "tenant", "send_email", material).record_key()
    }

    fn request(key: &RecordKey, tool: &str) -> ClaimRequest {
        ClaimRequest {
            key: key.clone(),
            tool: tool.into(),
            tenant: "tenant".into(),
            fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
            lease: LEASE,
            orphans: OrphanPolicy::TakeOver,
            arguments: Some(r#"{"to":"a@example.com"}"#.into()),
        }
    }

    async fn acquire(s: &MemoryStore, req: &ClaimRequest) -> Fence {
        match s.claim(req).await.expect("claim") {
            Claim::Acquired { fence, .. } => fence,
            other => panic!("expected to acquire {:?}, got {other:?}", req.key),
        }
    }

    /// Keys that are not 64 lower-case hex digits, which the store keeps as text.
    fn text_keys() -> Vec<RecordKey> {
        let digest = derived("call_1");
        vec![
            RecordKey::from_stored(digest.as_str().to_uppercase()),
            RecordKey::from_stored(&digest.as_str()[..63]),
            RecordKey::from_stored(format!("{}0", digest.as_str())),
            RecordKey::from_stored("g".repeat(64)),
            RecordKey::from_stored("é".repeat(32)),
            RecordKey::from_stored(""),
            RecordKey::from_stored("k"),
        ]
    }

    /// Interned tool names across the store.
    fn interned(s: &MemoryStore) -> usize {
        s.shards.iter().map(|m| lock(m).tools.0.len()).sum()
    }

    #[test]
    fn only_lower_case_hex_digests_are_kept_as_bytes() {
        let key = derived("call_1");
        let Some(d) = decode_digest(key.as_str()) else {
            panic!("a derived key is a digest");
        };
        assert_eq!(KeyRef::Digest(d).to_record_key(), key);
        for k in text_keys() {
            assert_eq!(KeyRef::of(&k), KeyRef::Text(k.as_str()), "{k:?}");
            assert_eq!(KeyRef::of(&k).to_record_key(), k);
        }
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_completed_entry_is_160_bytes() {
        // The memory-per-record budget (BENCHMARKS.md row 6) rests on this size.
        assert_eq!(std::mem::size_of::<Entry<Digest>>(), 160);
    }

    fn in_every_state() -> Vec<Record> {
        let steps = vec![JournalEntry {
            step: "charge".into(),
            value: json!({"id": 7}).to_string(),
        }];
        let base = Record {
            key: derived("call_1"),
            tool: "send_email".into(),
            tenant: "tenant: with a colon".into(),
            fingerprint: Fingerprint::of(&json!({"n": 1})),
            fence: 42,
            state: RecordState::InProgress {
                lease_until: Timestamp(5_000),
            },
            steps: Vec::new(),
            arguments: None,
            created_at: Timestamp(1_000),
            updated_at: Timestamp(2_000),
        };
        let with = |state: RecordState, steps: &[JournalEntry], arguments: Option<&str>| Record {
            state,
            steps: steps.to_vec(),
            arguments: arguments.map(str::to_owned),
            ..base.clone()
        };
        let failure = ToolError::terminal("insufficient funds").with_details(json!({"short": 3}));
        vec![
            base.clone(),
            with(base.state.clone(), &steps, Some("{}")),
            with(
                RecordState::Completed {
                    outcome: Outcome::Success(String::new()),
                    expires_at: Timestamp(9_000),
                },
                &[],
                Some(r#"{"n":1}"#),
            ),
            with(
                RecordState::Completed {
                    outcome: Outcome::Success("null".into()),
                    expires_at: Timestamp(9_000),
                },
                &steps,
                None,
            ),
            with(
                RecordState::Completed {
                    outcome: Outcome::Failure(failure),
                    expires_at: Timestamp(9_000),
                },
                &steps,
                Some(""),
            ),
            with(
                RecordState::Unknown {
                    since: Timestamp(3_000),
                    last_error: "timed out after sending".into(),
                },
                &steps,
                None,
            ),
        ]
    }

    #[test]
    fn every_state_round_trips_through_the_compact_form() {
        for r in in_every_state() {
            let mut name = String::new();
            origin(&mut name, &r.tool, &r.tenant);
            let compact = Compact::new(r.clone(), Arc::from(name.as_str()));
            assert_eq!(compact.to_record(r.key.clone()), r);
            assert_eq!(compact.kind(), r.state.kind());
            for now in [0, 4_999, 5_000, 8_999, 9_000, 9_001, u64::MAX] {
                assert_eq!(
                    compact.is_live(Timestamp(now)),
                    machine::is_live(&r, Timestamp(now)),
                    "{r:?} at {now}"
                );
            }
        }
    }

    #[tokio::test]
    async fn keys_of_any_form_live_their_whole_life() {
        let (s, clock) = store();
        let digest = derived("call_1");
        let mut keys = text_keys();
        keys.push(digest.clone());
        for key in &keys {
            let req = request(key, "send_email");
            let f = acquire(&s, &req).await;
            s.journal(key, f, "a", "1").await.expect("journal");
            s.renew(key, f, LEASE).await.expect("renew");
            s.mark_unknown(key, f, "timed out").await.expect("unknown");
            let r = s.get(key).await.expect("get").expect("held");
            assert_eq!(&r.key, key);
            assert_eq!(r.steps.len(), 1);
            assert!(matches!(r.state, RecordState::Unknown { .. }));
        }
        // The upper-case twin of a digest is another record.
        assert_eq!(s.len(), keys.len());
        let listed = s.list(ListFilter::default()).await.expect("list");
        let mut got: Vec<_> = listed.iter().map(|r| r.key.clone()).collect();
        let mut want = keys.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "every key comes back as written");

        let failure = Outcome::Failure(ToolError::terminal("no"));
        for key in &keys {
            let r = s.resolve(key, &failure, TTL).await.expect("resolve");
            assert_eq!(&r.key, key);
            let again = s.claim(&request(key, "send_email")).await.expect("claim");
            assert_eq!(again, Claim::Existing(r));
        }
        clock.advance(TTL);
        assert_eq!(
            s.purge_expired(&PurgeFilter::up_to(usize::MAX))
                .await
                .expect("purge"),
            keys.len()
        );
        assert!(s.is_empty());
        assert_eq!(interned(&s), 0);

        // A released key is claimed again with a greater fence, whatever its form.
        for key in &keys {
            let req = request(key, "send_email");
            let f = acquire(&s, &req).await;
            assert!(s.release(key, f).await.expect("release"));
            clock.advance(Duration::from_millis(1));
            assert!(acquire(&s, &req).await > f, "{key:?}");
        }
    }

    #[tokio::test]
    async fn a_call_replays_what_was_stored() {
        let (s, _clock) = store();
        for key in [derived("call_2"), RecordKey::from_stored("call_2")] {
            let req = request(&key, "send_email");
            let f = acquire(&s, &req).await;
            s.journal(&key, f, "a", "1").await.expect("journal");
            s.journal(&key, f, "b", "2").await.expect("journal");
            s.journal(&key, f, "a", "3").await.expect("journal again");
            s.complete(&key, f, &Outcome::Success("0".into()), TTL)
                .await
                .expect("complete");
            let Claim::Existing(r) = s.claim(&req).await.expect("claim") else {
                panic!("a completed call is not claimed again");
            };
            assert_eq!(r.key, key);
            assert_eq!(r.tool, "send_email");
            assert_eq!(r.fence, f);
            assert_eq!(r.arguments, req.arguments);
            assert_eq!(r.fingerprint, req.fingerprint);
            let steps: Vec<_> = r.steps.iter().map(|e| (&*e.step, &*e.value)).collect();
            assert_eq!(steps, [("a", "3"), ("b", "2")]);
            assert!(matches!(
                &r.state,
                RecordState::Completed { outcome: Outcome::Success(o), .. } if o == "0"
            ));
            assert_eq!(s.get(&key).await.expect("get"), Some(r));
        }
    }

    #[tokio::test]
    async fn tool_names_are_shared_and_go_with_their_last_record() {
        let (s, clock) = store();
        // Keys with the same first byte share a shard.
        let key = |i: u64| RecordKey::from_stored(format!("{i:064x}"));
        let mut fences = Vec::new();
        for i in 0..4 {
            let tool = if i < 3 { "send_email" } else { "refund" };
            fences.push(acquire(&s, &request(&key(i), tool)).await);
        }
        {
            let shard = lock(&s.shards[KeyRef::of(&key(0)).shard()]);
            let tool_of = |i| &shard.get(KeyRef::of(&key(i))).expect("held").tool;
            assert!(Arc::ptr_eq(tool_of(0), tool_of(1)), "one name per tool");
            assert!(Arc::ptr_eq(tool_of(0), tool_of(2)));
            assert_eq!(shard.tools.0.len(), 2);
        }

        // Completing keeps the name; releasing the last record of a tool drops it.
        s.complete(&key(0), fences[0], &Outcome::Success("1".into()), TTL)
            .await
            .expect("complete");
        assert_eq!(interned(&s), 2);
        assert!(s.release(&key(3), fences[3]).await.expect("release"));
        assert_eq!(interned(&s), 1);
        assert!(s.force_release(&key(1)).await.expect("force release"));
        s.mark_unknown(&key(2), fences[2], "lost")
            .await
            .expect("unknown");
        assert!(
            s.settle_unknown(&key(2), fences[2], None, TTL)
                .await
                .expect("settle")
        );
        assert_eq!(interned(&s), 1, "the completed record still names it");
        clock.advance(TTL);
        assert_eq!(
            s.purge_expired(&PurgeFilter::up_to(10))
                .await
                .expect("purge"),
            1
        );
        assert_eq!(interned(&s), 0);

        // Evicting an expired record to make room drops its name too.
        let s = MemoryStore::new()
            .with_clock(clock.clone())
            .with_capacity(SHARDS);
        let f = acquire(&s, &request(&key(0), "send_email")).await;
        s.complete(&key(0), f, &Outcome::Success("1".into()), TTL)
            .await
            .expect("complete");
        clock.advance(TTL);
        acquire(&s, &request(&key(1), "refund")).await;
        assert_eq!(s.len(), 1);
        let shard = lock(&s.shards[KeyRef::of(&key(0)).shard()]);
        let names: Vec<_> = shard.tools.0.iter().map(|t| split_origin(t)).collect();
        assert_eq!(names, [("refund", "tenant")]);
    }

    #[tokio::test]
    async fn a_key_taken_over_by_another_tool_changes_its_name() {
        let (s, clock) = store();
        let key = RecordKey::from_stored("shared");
        let f = acquire(&s, &request(&key, "send_email")).await;
        s.complete(&key, f, &Outcome::Success("1".into()), TTL)
            .await
            .expect("complete");
        clock.advance(TTL);
        acquire(&s, &request(&key, "refund")).await;
        let r = s.get(&key).await.expect("get").expect("held");
        assert_eq!(r.tool, "refund");
        assert_eq!(interned(&s), 1);
    }
}

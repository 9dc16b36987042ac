//! The store contract: every operation a durable store must perform atomically.
//!
//! Holder writes (`complete`, `release`, `renew`, `journal`, `mark_unknown`) are conditional
//! on the key being InProgress at the holder's fence; a stale holder's write is refused with
//! [`StoreError::Fenced`] and changes nothing (a stale `release` is a no-op that returns
//! `false`). Lease and expiry decisions use the store's own clock.
//!
//! # The folder
//!
//! - this file: the contract ([`Store`]) and its vocabulary;
//! - [`machine`]: every decision of the record state machine, as pure functions;
//!   [`transition`]: load → decide → apply, for the stores that run those functions
//!   themselves; `codec`: what the stores share in writing records down and reading them back;
//! - [`layer`]: code around every operation of a store (the outcome [`Limits`](layer::Limits)
//!   every shipped store is behind, a [`Trace`](layer::Trace) span per operation);
//! - one folder per store ([`memory`], `sqlite`, `redis`, `postgres`), each split by
//!   concern: its type and settings (`mod.rs`), its statements or scripts, its connection,
//!   its codec, its [`Store`] impl (`store.rs`);
//! - [`tenant`]: operator operations confined to one tenant; `conformance`: the contract as
//!   executable cases, run against every store.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::contract::Contract;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, StateKind, Timestamp};

pub mod approvals;
pub mod budgets;
pub(crate) mod codec;
pub mod decisions;
pub mod layer;
pub mod machine;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod tenant;
pub mod transition;

#[cfg(feature = "conformance")]
pub mod conformance;

// The stores and their settings, by name, beside their folders.
pub use memory::{Clock, ManualClock, MemoryStore};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "redis")]
pub use redis::{RedisOptions, RedisStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, Synchronous};
pub use tenant::TenantStore;

/// The default limit on one recorded outcome (1 MiB).
pub const DEFAULT_MAX_OUTCOME_BYTES: usize = 1024 * 1024;

/// The longest budget scope every store keeps, in bytes: what a PostgreSQL index entry holds
/// of text that does not compress, with room to spare. A longer scope may be refused
/// ([`StoreError::Unavailable`]); the conformance suite keeps scopes of this length apart.
pub const MAX_BUDGET_SCOPE_BYTES: usize = 2048;

/// The deepest nesting of arrays and objects an outcome may have to be recorded: what
/// serde_json reads back (127 levels), less the two levels a record may wrap a terminal
/// error's details in.
pub const MAX_OUTCOME_DEPTH: usize = 125;

/// How deeply `value` nests arrays and objects, counted only up to `limit + 1`: the walk
/// stops descending there, so a hostile value cannot overflow the stack, and a flat one (the
/// common output) costs no allocation.
///
/// ```
/// use idem::store::nesting;
/// assert_eq!(nesting(&serde_json::json!(1), 10), 0);
/// assert_eq!(nesting(&serde_json::json!({"a": [[1], 2]}), 10), 3);
/// ```
pub fn nesting(value: &serde_json::Value, limit: usize) -> usize {
    use serde_json::Value;
    let deepest = |children: &mut dyn Iterator<Item = &Value>| match limit {
        0 => 1,
        _ => 1 + children.map(|c| nesting(c, limit - 1)).max().unwrap_or(0),
    };
    match value {
        Value::Array(items) => deepest(&mut items.iter()),
        Value::Object(map) => deepest(&mut map.values()),
        _ => 0,
    }
}

/// A request to claim a key.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The stored key.
    pub key: RecordKey,
    /// The tool's registered name.
    pub tool: String,
    /// The tenant or principal the call acts for, kept in the record for operators.
    pub tenant: String,
    /// Fingerprint of the typed arguments.
    pub fingerprint: Fingerprint,
    /// How long the holder's lease lasts before it must be renewed.
    pub lease: Duration,
    /// What to do with an orphan (an expired lease) found under the key.
    pub orphans: OrphanPolicy,
    /// Canonical JSON of the arguments, kept for recovery.
    pub arguments: Option<String>,
    /// The policy the call is made under, kept in a new record (a take-over keeps the one
    /// recorded). An orphan made under a contract whose class does not take orphans over is
    /// turned Unknown whatever `orphans` says ([`crate::contract::orphan_policy`]).
    pub contract: Option<std::sync::Arc<Contract>>,
}

/// The result of a claim.
// `Existing` holds a whole record: a claim is answered once per dispatch and moved once or
// twice, and boxing the record would cost an allocation on every replay instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The caller now holds the key.
    Acquired {
        /// The holder's fence: pass it to every later write.
        fence: Fence,
        /// Steps an earlier holder journaled (non-empty only after a take-over).
        steps: Vec<JournalEntry>,
        /// Whether an orphaned holder's key was taken over.
        takeover: bool,
    },
    /// Someone else's record is there: a live holder, a completed call, an Unknown one, or a
    /// record with another fingerprint. An orphan under `MarkUnknown` is returned already
    /// turned Unknown.
    Existing(Record),
}

/// What can go wrong in a store.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The writer no longer holds the key at this fence (a newer holder took over, the lease
    /// expired, or the record was settled).
    #[error("fenced: key {key} is no longer held at fence {fence}")]
    Fenced {
        /// The key.
        key: RecordKey,
        /// The stale fence.
        fence: Fence,
    },
    /// The store cannot be reached or did not answer.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// No record under the key (operator operations).
    #[error("no record under key {0}")]
    NotFound(RecordKey),
    /// The operation does not apply to the record's current state.
    #[error("record {key} is {state:?}; {action} needs {needs}")]
    WrongState {
        /// The key.
        key: RecordKey,
        /// Its state.
        state: StateKind,
        /// The operation attempted.
        action: &'static str,
        /// What state it needs.
        needs: &'static str,
    },
    /// An outcome larger than the store accepts.
    #[error("outcome of {bytes} bytes exceeds the store's limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// An outcome nested deeper than a replay can read back (serde_json reads 128 levels;
    /// a record wraps an outcome in up to two more). Found by the dispatcher before it
    /// records: nothing was recorded.
    #[error(
        "the outcome is nested {depth} or more levels deep; a replay reads at most {limit}: return a flatter value"
    )]
    TooDeep {
        /// How deep it is (at least).
        depth: usize,
        /// The deepest a recorded outcome may be.
        limit: usize,
    },
    /// A bounded store is full of records it may not evict.
    #[error("store is full: {capacity} live records and none may be evicted")]
    CapacityExceeded {
        /// The capacity.
        capacity: usize,
    },
    /// An outcome handed to [`Store::resolve`] or [`Store::settle_unknown`] whose success
    /// value is not JSON text: every replay would fail to read it back. Nothing was changed.
    #[error(
        "the outcome's success value is not JSON text ({reason}); give it as JSON, e.g. with `Outcome::success(&value)`"
    )]
    InvalidOutcome {
        /// What the JSON parser reported.
        reason: String,
    },
    /// A stored record could not be read back.
    #[error("record {key} is corrupt: {reason}")]
    Corrupt {
        /// The key.
        key: RecordKey,
        /// What is wrong.
        reason: String,
    },
}

impl StoreError {
    /// Whether the store could not be reached (writes fail closed on this).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// A short, stable name of the variant, for logs and metrics (never the message, which
    /// may quote a server's reply).
    ///
    /// ```
    /// use idem::key::RecordKey; use idem::store::StoreError;
    /// let e = StoreError::NotFound(RecordKey::from_stored("k"));
    /// assert_eq!(e.code(), "not_found");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Fenced { .. } => "fenced",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::NotFound(_) => "not_found",
            StoreError::WrongState { .. } => "wrong_state",
            StoreError::TooLarge { .. } => "too_large",
            StoreError::TooDeep { .. } => "too_deep",
            StoreError::CapacityExceeded { .. } => "capacity_exceeded",
            StoreError::InvalidOutcome { .. } => "invalid_outcome",
            StoreError::Corrupt { .. } => "corrupt",
        }
    }

    /// The holder of `key` at `fence` was fenced out.
    pub(crate) fn fenced(key: &RecordKey, fence: Fence) -> Self {
        StoreError::Fenced {
            key: key.clone(),
            fence,
        }
    }

    /// The record under `key` cannot be read back (or written down), for `reason`.
    pub(crate) fn corrupt(key: &RecordKey, reason: impl Into<String>) -> Self {
        StoreError::Corrupt {
            key: key.clone(),
            reason: reason.into(),
        }
    }

    /// An operator's `action` found the record under `key` settled already (Completed).
    pub(crate) fn settled(key: &RecordKey, action: &'static str) -> Self {
        StoreError::WrongState {
            key: key.clone(),
            state: StateKind::Completed,
            action,
            needs: "an InProgress or Unknown record",
        }
    }
}

/// Which records an operator listing returns.
///
/// ```
/// use idem::store::ListFilter; use idem::record::StateKind;
///
/// let filter = ListFilter {
///     state: Some(StateKind::Unknown),
///     tenant: Some("acme".into()),
///     ..ListFilter::default()
/// };
/// assert_eq!(filter.limit, 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only records in this state (`None`: InProgress and Unknown, the ones needing attention).
    pub state: Option<StateKind>,
    /// Only records of this tenant (`None`: every tenant's).
    pub tenant: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// Only records after this one in the listing's order (oldest first, then by key): give
    /// the last record of a page ([`ListCursor::after`]) to read the next page.
    pub after: Option<ListCursor>,
}

/// Where a page of [`Store::list`] ended: its last record's creation time and key.
///
/// ```
/// # use std::sync::Arc;
/// use idem::store::{ListCursor, ListFilter, StoreError}; use idem::Store;
///
/// /// Every record needing attention, a page of 500 at a time.
/// async fn all(store: &dyn Store) -> Result<usize, StoreError> {
///     let mut filter = ListFilter { limit: 500, ..ListFilter::default() };
///     let mut seen = 0;
///     loop {
///         let page = store.list(filter.clone()).await?;
///         seen += page.len();
///         match page.last() {
///             Some(last) if page.len() == filter.limit => filter.after = Some(ListCursor::after(last)),
///             _ => return Ok(seen),
///         }
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    /// The record's creation time.
    pub created_at: Timestamp,
    /// Its key.
    pub key: RecordKey,
}

impl ListCursor {
    /// The cursor just past `record`.
    pub fn after(record: &Record) -> Self {
        ListCursor {
            created_at: record.created_at,
            key: record.key.clone(),
        }
    }

    /// Whether `record` comes after the cursor in the listing's order.
    pub(crate) fn precedes(&self, record: &Record) -> bool {
        (record.created_at, &record.key) > (self.created_at, &self.key)
    }
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter {
            state: None,
            tenant: None,
            limit: 100,
            after: None,
        }
    }
}

impl ListFilter {
    /// Whether a live record in state `kind` of `tenant` is one this filter lists; the SQL
    /// stores write the same rule in their statements.
    pub(crate) fn admits(&self, kind: StateKind, tenant: &str) -> bool {
        let state = match self.state {
            Some(wanted) => kind == wanted,
            None => kind != StateKind::Completed,
        };
        state && self.tenant.as_deref().is_none_or(|t| t == tenant)
    }

    /// Whether `record` is past the cursor (every record is, without one).
    pub(crate) fn after_cursor(&self, record: &Record) -> bool {
        self.after.as_ref().is_none_or(|c| c.precedes(record))
    }
}

/// The order [`Store::list`] answers in: oldest first, then by key (as the SQL stores'
/// `ORDER BY created_at, key`).
pub(crate) fn sort_listed(records: &mut [Record]) {
    records.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.key.cmp(&b.key))
    });
}

/// How long an Unknown record is kept before [`Store::purge_expired`] may delete it, unless
/// [`PurgeFilter::unknown_retention`] says otherwise: 30 days. An Unknown record waits for a
/// verify hook or an operator; a month leaves time for both (a weekend, a holiday, a
/// provider's support ticket) while a flood of ambiguous failures cannot fill a store forever.
pub const DEFAULT_UNKNOWN_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Which records [`Store::purge_expired`] deletes: completed records past their expiry, and
/// Unknown records older than the retention (counted from when they became Unknown, on the
/// store's clock). InProgress records are never purged.
///
/// ```
/// use std::time::Duration;
/// use idem::store::PurgeFilter;
///
/// let purge = PurgeFilter {
///     tenant: Some("acme".into()),
///     unknown_retention: Duration::from_secs(7 * 86_400),
///     ..PurgeFilter::up_to(1_000)
/// };
/// assert_eq!(purge.limit, 1_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeFilter {
    /// Delete at most this many records.
    pub limit: usize,
    /// Only records of this tenant (`None`: every tenant's).
    pub tenant: Option<String>,
    /// Unknown records older than this are deleted too.
    pub unknown_retention: Duration,
}

impl PurgeFilter {
    /// Purge at most `limit` records, of every tenant, with the default Unknown retention.
    pub fn up_to(limit: usize) -> Self {
        PurgeFilter {
            limit,
            tenant: None,
            unknown_retention: DEFAULT_UNKNOWN_RETENTION,
        }
    }
}

impl Default for PurgeFilter {
    fn default() -> Self {
        PurgeFilter::up_to(1_000)
    }
}

/// A store of records. Every implementation runs the same conformance suite.
///
/// ```
/// use std::sync::Arc;
/// use idem::{MemoryStore, Store};
///
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// # let _ = store;
/// ```
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Insert an InProgress record if the key is absent (or its completed record expired), or
    /// take over an orphan, atomically. Never read-then-write.
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError>;

    /// Record the outcome, if still held at `fence`. The record expires after `ttl`. A
    /// success's text is stored as given, unchecked (the dispatcher writes it from a
    /// `serde_json::Value`, and checking it would cost a parse per call).
    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError>;

    /// Delete the claim (the effect certainly did not happen). A stale release is a no-op
    /// that returns `Ok(false)`.
    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError>;

    /// Extend the lease. An expired lease cannot be renewed. Returns the new lease end.
    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError>;

    /// Journal a named step's result under the key.
    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError>;

    /// Turn the held record Unknown: the effect may or may not have happened.
    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError>;

    /// The record under a key. Completed records past their expiry are reported absent.
    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError>;

    /// Operator: list records (by default the InProgress and Unknown ones).
    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError>;

    /// Operator: settle an InProgress or Unknown record with an outcome (a value, or a
    /// failure). Any holder is fenced out. A success must be JSON text that replays can read
    /// back ([`StoreError::InvalidOutcome`] otherwise, and nothing changes).
    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError>;

    /// Settle a record that is still Unknown at `fence`, after a verify hook asked the
    /// downstream system what happened: with an outcome (the effect happened) it becomes
    /// Completed, its fence incremented, expiring after `ttl`; without one (the effect
    /// certainly did not happen) it is deleted so the call may run again. Returns `false`
    /// and changes nothing if the record is no longer Unknown at that fence: another worker
    /// settled it first. A success must be JSON text, as for [`Store::resolve`].
    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Operator: forget an InProgress or Unknown record so the call may run again.
    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError>;

    /// Delete up to `filter.limit` records that [`PurgeFilter`] describes (expired completed
    /// records, and Unknown records past the retention); returns how many were deleted.
    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError>;

    /// The store's clock.
    async fn now(&self) -> Result<Timestamp, StoreError>;

    /// Pending approvals: the JSON text of the entry under `key`, as last put by
    /// [`Store::swap_approval`]. What reads and decides them is [`approvals`], written once.
    async fn approval_text(&self, key: &RecordKey) -> Result<Option<String>, StoreError>;

    /// Pending approvals: put `text` (the JSON of `entry`, whose tenant and tool a store may
    /// index) under `key` if the text there is still `expected` (`None`: no entry),
    /// atomically. Returns whether it was put; `false` changes nothing.
    async fn swap_approval(
        &self,
        key: &RecordKey,
        expected: Option<&str>,
        entry: &approvals::PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError>;

    /// Pending approvals: delete the entry under `key` if its text is still `expected`,
    /// atomically. Returns whether it was deleted; `false` changes nothing.
    async fn remove_approval(&self, key: &RecordKey, expected: &str) -> Result<bool, StoreError>;

    /// Pending approvals: the key and text of every entry `filter` may admit. A store may
    /// narrow by tenant and tool; the caller checks each entry against the filter again.
    async fn approval_texts(
        &self,
        filter: &approvals::ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError>;

    /// Run accounts: append `text` (one entry of a run's account, as JSON text the
    /// dispatcher writes) to the account of `tenant`'s run `run_id`, kept at least `ttl`
    /// from now on the store's clock (a store may keep a whole run's account until `ttl`
    /// after its last entry). Entries are never changed once appended.
    async fn append_run_entry(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: Duration,
    ) -> Result<(), StoreError>;

    /// Run accounts: the text of every unexpired entry of `tenant`'s run `run_id`, in the
    /// order they were appended (by concurrent appenders: the order the store committed
    /// them). A run nobody appended to has none.
    async fn run_entries(&self, tenant: &str, run_id: &str) -> Result<Vec<String>, StoreError>;

    /// Budgets: the JSON text kept under budget `scope`, as last put by
    /// [`Store::swap_budget`], unless it expired. What reads and counts budgets is
    /// [`budgets`], written once.
    async fn budget_text(&self, scope: &str) -> Result<Option<String>, StoreError>;

    /// Budgets: put `text` under `scope` if the text there is still `expected` (`None`: no
    /// text, or an expired one), atomically, kept at least `ttl` from now on the store's clock.
    /// Returns whether it was put; `false` changes nothing.
    ///
    /// A scope is any string of up to [`MAX_BUDGET_SCOPE_BYTES`] (a tenant, a run, a limit's
    /// name, an argument's value): each store keeps every scope apart from every other, byte
    /// for byte. An expired text matches no `expected` text: it reads as absent, and only a
    /// swap expecting `None` replaces it.
    async fn swap_budget(
        &self,
        scope: &str,
        expected: Option<&str>,
        text: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError>;
}

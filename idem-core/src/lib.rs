#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod canonical;
pub mod class;
pub mod contract;
pub mod error;
pub mod key;
pub mod record;
pub mod store;

pub use canonical::{Fingerprint, canonical_json};
pub use class::{ClassHints, OrphanPolicy, ToolClass, UnknownClass};
pub use contract::{Contract, DEFAULT_VERSION, Reconciled};
pub use error::{ErrorKind, ToolError};
pub use key::{IdempotencyKey, KeyMaterial, KeySource, LogicalKey, RecordKey};
pub use record::{
    ESCALATED, Fence, JournalEntry, ORPHANED, Outcome, Record, RecordState, StateKind, Timestamp,
    UnknownCause,
};
pub use store::{
    Claim, ClaimRequest, DEFAULT_UNKNOWN_RETENTION, ListCursor, ListFilter, MAX_OUTCOME_DEPTH,
    PurgeFilter, Store, StoreError,
};

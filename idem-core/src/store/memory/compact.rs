//! The form a memory store keeps a record in: a [`Record`] without its key, every part sized
//! for the common case, and the tool and tenant shared by the shard's records of that pair.

use std::collections::HashSet;
use std::sync::Arc;

use crate::canonical::Fingerprint;
use crate::contract::Contract;
use crate::error::ToolError;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::PurgeFilter;

/// A record as the memory store keeps it: a [`Record`] without its key (the entry holds it)
/// and with every part sized for the common case. A completed success, the bulk of any store,
/// is 128 bytes here plus its arguments and output, against 224 for a [`Record`] plus its key,
/// tool name, arguments and output.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Compact {
    fingerprint: Fingerprint,
    /// The tool and tenant, shared by every record of that pair in the shard (see [`Tools`]).
    pub(super) tool: Arc<str>,
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
pub(super) enum CompactState {
    /// The contract is kept while a record can be taken over or verified, and dropped once
    /// it is completed (a replay does not read it), so a completed entry stays small.
    InProgress {
        lease_until: Timestamp,
        contract: Option<Arc<Contract>>,
    },
    Succeeded {
        expires_at: Timestamp,
        output: Box<str>,
    },
    Failed {
        expires_at: Timestamp,
        error: Box<ToolError>,
    },
    /// Rare: the reason and contract behind one pointer.
    Unknown {
        since: Timestamp,
        detail: Box<(Box<str>, Option<Arc<Contract>>)>,
    },
}

impl Compact {
    /// Everything of `record` but its key and tool name, which the caller has already filed.
    pub(super) fn new(record: Record, tool: Arc<str>) -> Self {
        let state = match record.state {
            RecordState::InProgress { lease_until } => CompactState::InProgress {
                lease_until,
                contract: record.contract,
            },
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
                detail: Box::new((last_error.into_boxed_str(), record.contract)),
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
    pub(super) fn to_record(&self, key: RecordKey) -> Record {
        let (state, contract) = match &self.state {
            CompactState::InProgress {
                lease_until,
                contract,
            } => (
                RecordState::InProgress {
                    lease_until: *lease_until,
                },
                contract.clone(),
            ),
            CompactState::Succeeded { expires_at, output } => (
                RecordState::Completed {
                    outcome: Outcome::Success(String::from(&**output)),
                    expires_at: *expires_at,
                },
                None,
            ),
            CompactState::Failed { expires_at, error } => (
                RecordState::Completed {
                    outcome: Outcome::Failure(ToolError::clone(error)),
                    expires_at: *expires_at,
                },
                None,
            ),
            CompactState::Unknown { since, detail } => (
                RecordState::Unknown {
                    since: *since,
                    last_error: String::from(&*detail.0),
                },
                detail.1.clone(),
            ),
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
            contract,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    pub(super) fn fence(&self) -> Fence {
        self.fence
    }

    pub(super) fn kind(&self) -> StateKind {
        match self.state {
            CompactState::InProgress { .. } => StateKind::InProgress,
            CompactState::Succeeded { .. } | CompactState::Failed { .. } => StateKind::Completed,
            CompactState::Unknown { .. } => StateKind::Unknown,
        }
    }

    /// [`machine::is_purgeable`](crate::store::machine::is_purgeable) without building the record.
    pub(super) fn is_purgeable(&self, filter: &PurgeFilter, now: Timestamp) -> bool {
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

    /// [`machine::is_live`](crate::store::machine::is_live) without building the record (a
    /// test holds the two together).
    pub(super) fn is_live(&self, now: Timestamp) -> bool {
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
pub(super) struct Tools(pub(super) HashSet<Arc<str>>, String);

impl Tools {
    pub(super) fn intern(&mut self, tool: &str, tenant: &str) -> Arc<str> {
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
    pub(super) fn forget(&mut self, tool: &Arc<str>) {
        if Arc::strong_count(tool) <= 2 {
            self.0.remove(&**tool);
        }
    }
}

/// Write a tool and a tenant as one name: the tool's length, `:`, the tool, the tenant (the
/// length keeps any pair of strings apart).
pub(super) fn origin(out: &mut String, tool: &str, tenant: &str) {
    // The length's digits without the formatting machinery: this runs on every claim.
    let mut digits = [0; 20];
    let digits = crate::key::decimal(tool.len() as u64, &mut digits);
    out.extend(digits.iter().map(|&d| char::from(d)));
    out.push(':');
    out.push_str(tool);
    out.push_str(tenant);
}

/// The tool and tenant of a name [`origin`] wrote.
pub(super) fn split_origin(name: &str) -> (&str, &str) {
    name.split_once(':')
        .and_then(|(len, rest)| {
            let len = len.parse::<usize>().ok()?;
            Some((rest.get(..len)?, rest.get(len..)?))
        })
        .unwrap_or((name, ""))
}

//! The record state machine as pure functions over the current record.
//!
//! Stores that can run arbitrary code inside one transaction (memory under a lock, SQLite
//! inside `BEGIN IMMEDIATE`) read the record, apply one of these functions and write what it
//! says, so every such store makes exactly the same decisions; [`transition`](super::transition)
//! holds that load → decide → apply, once. Stores that cannot (Redis, PostgreSQL) encode the
//! same rules in a script or statement and are held to them by the conformance suite.

use std::time::Duration;

use crate::class::OrphanPolicy;
use crate::contract::orphan_policy;
use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, Timestamp, UnknownCause};
use crate::store::codec;
use crate::store::{Claim, ClaimRequest, PurgeFilter, StoreError};

/// What the store must do with the key after a transition.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Nothing changes.
    Unchanged,
    /// Store this record under the key.
    Put(Box<Record>),
    /// Delete the key.
    Delete,
}

/// The fence of a key that has no record: the store clock in milliseconds, and above `floor`,
/// the highest fence of any record the store deleted.
///
/// A key that was released (or purged) and is claimed again must never hand out a fence an
/// earlier holder may still hold. The clock alone makes fences increase across deletions
/// only a millisecond or more apart (a take-over adds 1 and needs a lapsed lease); a key
/// freed and claimed again within one millisecond is told apart by the floor, which the
/// store raises with every record it deletes.
pub fn first_fence(now: Timestamp, floor: Fence) -> Fence {
    now.as_millis().max(floor.saturating_add(1))
}

/// Whether a record is still visible at `now` (a completed record past expiry is not).
pub fn is_live(record: &Record, now: Timestamp) -> bool {
    match &record.state {
        RecordState::Completed { expires_at, .. } => *expires_at > now,
        _ => true,
    }
}

/// Whether [`Store::purge_expired`](crate::store::Store::purge_expired) deletes a record at
/// `now`: a completed record past its expiry, or an Unknown record older than the retention;
/// of the filter's tenant, if it names one.
pub fn is_purgeable(record: &Record, filter: &PurgeFilter, now: Timestamp) -> bool {
    if filter.tenant.as_ref().is_some_and(|t| *t != record.tenant) {
        return false;
    }
    match &record.state {
        RecordState::Completed { expires_at, .. } => *expires_at <= now,
        RecordState::Unknown { since, .. } => since.plus(filter.unknown_retention) <= now,
        RecordState::InProgress { .. } => false,
    }
}

/// Claim or take over; a key without a record is fenced above `floor` ([`first_fence`]).
pub fn claim(
    existing: Option<Record>,
    req: &ClaimRequest,
    now: Timestamp,
    floor: Fence,
) -> (Write, Claim) {
    let fresh = |fence: Fence| Record {
        key: req.key.clone(),
        tool: req.tool.clone(),
        tenant: req.tenant.clone(),
        fingerprint: req.fingerprint,
        fence,
        state: RecordState::InProgress {
            lease_until: now.plus(req.lease),
        },
        steps: Vec::new(),
        arguments: req.arguments.clone(),
        contract: req.contract.clone(),
        created_at: now,
        updated_at: now,
    };
    let Some(rec) = existing else {
        let fence = first_fence(now, floor);
        return (
            Write::Put(Box::new(fresh(fence))),
            Claim::Acquired {
                fence,
                steps: Vec::new(),
                takeover: false,
            },
        );
    };
    if !is_live(&rec, now) {
        // The old record expired: a new call under the same key. Keep the fence increasing.
        let fence = rec.fence + 1;
        return (
            Write::Put(Box::new(fresh(fence))),
            Claim::Acquired {
                fence,
                steps: Vec::new(),
                takeover: false,
            },
        );
    }
    if rec.fingerprint != req.fingerprint {
        return (Write::Unchanged, Claim::Existing(rec));
    }
    match rec.state {
        RecordState::InProgress { lease_until } if lease_until <= now => {
            match orphan_policy(req.orphans, rec.contract.as_deref()) {
                OrphanPolicy::TakeOver => {
                    let mut r = rec;
                    r.fence += 1;
                    r.state = RecordState::InProgress {
                        lease_until: now.plus(req.lease),
                    };
                    r.updated_at = now;
                    let claim = Claim::Acquired {
                        fence: r.fence,
                        steps: r.steps.clone(),
                        takeover: true,
                    };
                    (Write::Put(Box::new(r)), claim)
                }
                OrphanPolicy::MarkUnknown => {
                    let mut r = rec;
                    r.state = RecordState::Unknown {
                        since: now,
                        last_error: UnknownCause::Orphaned.recorded().into(),
                    };
                    r.updated_at = now;
                    (Write::Put(Box::new(r.clone())), Claim::Existing(r))
                }
            }
        }
        _ => (Write::Unchanged, Claim::Existing(rec)),
    }
}

/// Whether `r` is in progress under `fence`: the only state a holder may write to.
fn holds(r: &Record, fence: Fence) -> bool {
    r.fence == fence && matches!(r.state, RecordState::InProgress { .. })
}

/// The record a holder writes to, taken by value: the write changes it in place.
fn held(existing: Option<Record>, key: &RecordKey, fence: Fence) -> Result<Record, StoreError> {
    match existing {
        Some(r) if holds(&r, fence) => Ok(r),
        _ => Err(StoreError::fenced(key, fence)),
    }
}

/// Check an outcome given by an operator or a verify hook, which (unlike a dispatcher's own
/// output) may be any text: a success must be JSON, or no replay could read it back; and, as
/// every outcome, it must fit the store's size limit.
pub fn check_settled(outcome: &Outcome, limit: usize) -> Result<(), StoreError> {
    if let Outcome::Success(text) = outcome {
        // Parsed as replays parse it (depth limit, number range, surrogates), not merely skimmed.
        serde_json::from_str::<serde_json::Value>(text).map_err(|e| {
            StoreError::InvalidOutcome {
                reason: e.to_string(),
            }
        })?;
    }
    check_size(outcome, limit)
}

/// [`check_settled`], then the JSON text stores keep for the outcome: for a store of one's
/// own that checks and encodes in one step (the stores idem ships check in their
/// [`Limits`](crate::store::layer::Limits) layer).
pub fn encode_settled(
    key: &RecordKey,
    outcome: &Outcome,
    limit: usize,
) -> Result<String, StoreError> {
    check_settled(outcome, limit)?;
    codec::outcome_json(key, outcome)
}

/// Check an outcome against a store's size limit.
pub fn check_size(outcome: &Outcome, limit: usize) -> Result<(), StoreError> {
    let bytes = outcome.stored_len();
    if bytes > limit {
        return Err(StoreError::TooLarge { bytes, limit });
    }
    Ok(())
}

/// Check an outcome against a store's size limit and encode it as the JSON text stores keep
/// (a success's own JSON text is carried inside unchanged, so it replays byte for byte). As
/// [`encode_settled`], for a store of one's own.
pub fn encode_outcome(
    key: &RecordKey,
    outcome: &Outcome,
    limit: usize,
) -> Result<String, StoreError> {
    check_size(outcome, limit)?;
    codec::outcome_json(key, outcome)
}

/// Record the outcome.
pub fn complete(
    existing: Option<Record>,
    key: &RecordKey,
    fence: Fence,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<Write, StoreError> {
    let mut r = held(existing, key, fence)?;
    r.state = RecordState::Completed {
        outcome: outcome.clone(),
        expires_at: now.plus(ttl),
    };
    r.updated_at = now;
    Ok(Write::Put(Box::new(r)))
}

/// Release the claim; a stale release changes nothing and reports `false`.
pub fn release(existing: Option<&Record>, fence: Fence) -> (Write, bool) {
    match existing {
        Some(r) if holds(r, fence) => (Write::Delete, true),
        _ => (Write::Unchanged, false),
    }
}

/// Renew a live lease.
pub fn renew(
    existing: Option<Record>,
    key: &RecordKey,
    fence: Fence,
    lease: Duration,
    now: Timestamp,
) -> Result<(Write, Timestamp), StoreError> {
    let mut r = held(existing, key, fence)?;
    match r.state {
        RecordState::InProgress { lease_until } if lease_until > now => {
            let until = now.plus(lease);
            r.state = RecordState::InProgress { lease_until: until };
            r.updated_at = now;
            Ok((Write::Put(Box::new(r)), until))
        }
        _ => Err(StoreError::fenced(key, fence)),
    }
}

/// Journal a step (a step journaled again replaces its value).
pub fn journal(
    existing: Option<Record>,
    key: &RecordKey,
    fence: Fence,
    step: &str,
    value: &str,
    now: Timestamp,
) -> Result<Write, StoreError> {
    let mut r = held(existing, key, fence)?;
    match r.steps.iter_mut().find(|e| e.step == step) {
        Some(e) => e.value = value.to_owned(),
        None => r.steps.push(JournalEntry {
            step: step.to_owned(),
            value: value.to_owned(),
        }),
    }
    r.updated_at = now;
    Ok(Write::Put(Box::new(r)))
}

/// Turn the held record Unknown.
pub fn mark_unknown(
    existing: Option<Record>,
    key: &RecordKey,
    fence: Fence,
    error: &str,
    now: Timestamp,
) -> Result<Write, StoreError> {
    let mut r = held(existing, key, fence)?;
    r.state = RecordState::Unknown {
        since: now,
        last_error: error.to_owned(),
    };
    r.updated_at = now;
    Ok(Write::Put(Box::new(r)))
}

fn unsettled<'a>(
    existing: Option<&'a Record>,
    key: &RecordKey,
    action: &'static str,
) -> Result<&'a Record, StoreError> {
    let r = existing.ok_or_else(|| StoreError::NotFound(key.clone()))?;
    match r.state {
        RecordState::Completed { .. } => Err(StoreError::settled(key, action)),
        _ => Ok(r),
    }
}

/// Operator: settle an InProgress or Unknown record. The fence is bumped so that the old
/// holder, if alive, is refused.
pub fn resolve(
    existing: Option<&Record>,
    key: &RecordKey,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<(Write, Record), StoreError> {
    let mut r = unsettled(existing, key, "resolve")?.clone();
    r.fence += 1;
    r.state = RecordState::Completed {
        outcome: outcome.clone(),
        expires_at: now.plus(ttl),
    };
    r.updated_at = now;
    Ok((Write::Put(Box::new(r.clone())), r))
}

/// Settle a record still Unknown at `fence`: complete it with `outcome`, or delete it.
pub fn settle_unknown(
    existing: Option<&Record>,
    fence: Fence,
    outcome: Option<&Outcome>,
    ttl: Duration,
    now: Timestamp,
) -> (Write, bool) {
    match existing {
        Some(r) if r.fence == fence && matches!(r.state, RecordState::Unknown { .. }) => {
            match outcome {
                Some(outcome) => {
                    let mut r = r.clone();
                    r.fence += 1;
                    r.state = RecordState::Completed {
                        outcome: outcome.clone(),
                        expires_at: now.plus(ttl),
                    };
                    r.updated_at = now;
                    (Write::Put(Box::new(r)), true)
                }
                None => (Write::Delete, true),
            }
        }
        _ => (Write::Unchanged, false),
    }
}

/// Operator: forget an InProgress or Unknown record.
pub fn force_release(existing: Option<&Record>, key: &RecordKey) -> Result<Write, StoreError> {
    unsettled(existing, key, "release")?;
    Ok(Write::Delete)
}

//! What a [`Layer`] sees of each operation of a store: its name and inputs.

use std::time::Duration;

use crate::key::RecordKey;
use crate::record::{Fence, Outcome};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::{ClaimRequest, ListFilter, PurgeFilter};
#[cfg(doc)]
use crate::store::{Store, layer::Layer};

/// One operation asked of a store, with its inputs, as a [`Layer`] sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Operation<'a> {
    /// [`Store::claim`].
    Claim(&'a ClaimRequest),
    /// [`Store::complete`].
    Complete {
        /// The key.
        key: &'a RecordKey,
        /// The holder's fence.
        fence: Fence,
        /// The outcome to record.
        outcome: &'a Outcome,
        /// How long the record is kept.
        ttl: Duration,
    },
    /// [`Store::release`].
    Release {
        /// The key.
        key: &'a RecordKey,
        /// The holder's fence.
        fence: Fence,
    },
    /// [`Store::renew`].
    Renew {
        /// The key.
        key: &'a RecordKey,
        /// The holder's fence.
        fence: Fence,
        /// The new lease.
        lease: Duration,
    },
    /// [`Store::journal`].
    Journal {
        /// The key.
        key: &'a RecordKey,
        /// The holder's fence.
        fence: Fence,
        /// The step's name.
        step: &'a str,
        /// The step's result.
        value: &'a str,
    },
    /// [`Store::mark_unknown`].
    MarkUnknown {
        /// The key.
        key: &'a RecordKey,
        /// The holder's fence.
        fence: Fence,
        /// Why the outcome is unknown.
        error: &'a str,
    },
    /// [`Store::get`].
    Get {
        /// The key.
        key: &'a RecordKey,
    },
    /// [`Store::list`].
    List(&'a ListFilter),
    /// [`Store::resolve`].
    Resolve {
        /// The key.
        key: &'a RecordKey,
        /// The outcome to settle with.
        outcome: &'a Outcome,
        /// How long the record is kept.
        ttl: Duration,
    },
    /// [`Store::settle_unknown`].
    SettleUnknown {
        /// The key.
        key: &'a RecordKey,
        /// The fence the record must still be Unknown at.
        fence: Fence,
        /// The outcome (the effect happened), or none (it did not).
        outcome: Option<&'a Outcome>,
        /// How long the record is kept.
        ttl: Duration,
    },
    /// [`Store::force_release`].
    ForceRelease {
        /// The key.
        key: &'a RecordKey,
    },
    /// [`Store::purge_expired`].
    PurgeExpired(&'a PurgeFilter),
    /// [`Store::now`].
    Now,
    /// [`Store::approval_text`].
    ApprovalText {
        /// The key.
        key: &'a RecordKey,
    },
    /// [`Store::swap_approval`].
    SwapApproval {
        /// The key.
        key: &'a RecordKey,
        /// The entry to put.
        entry: &'a PendingApproval,
    },
    /// [`Store::remove_approval`].
    RemoveApproval {
        /// The key.
        key: &'a RecordKey,
    },
    /// [`Store::approval_texts`].
    ApprovalTexts(&'a ApprovalFilter),
    /// [`Store::append_run_entry`].
    AppendRunEntry {
        /// The tenant.
        tenant: &'a str,
        /// The run.
        run_id: &'a str,
        /// The entry.
        text: &'a str,
        /// How long it is kept.
        ttl: Duration,
    },
    /// [`Store::run_entries`].
    RunEntries {
        /// The tenant.
        tenant: &'a str,
        /// The run.
        run_id: &'a str,
    },
    /// [`Store::budget_text`].
    BudgetText {
        /// The budget's scope.
        scope: &'a str,
    },
    /// [`Store::swap_budget`].
    SwapBudget {
        /// The budget's scope.
        scope: &'a str,
        /// The text to put.
        text: &'a str,
        /// How long it is kept.
        ttl: Duration,
    },
}

impl Operation<'_> {
    /// The operation's name: the [`Store`] method's.
    ///
    /// ```
    /// use idem::store::layer::Operation;
    /// assert_eq!(Operation::Now.name(), "now");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Claim(_) => "claim",
            Operation::Complete { .. } => "complete",
            Operation::Release { .. } => "release",
            Operation::Renew { .. } => "renew",
            Operation::Journal { .. } => "journal",
            Operation::MarkUnknown { .. } => "mark_unknown",
            Operation::Get { .. } => "get",
            Operation::List(_) => "list",
            Operation::Resolve { .. } => "resolve",
            Operation::SettleUnknown { .. } => "settle_unknown",
            Operation::ForceRelease { .. } => "force_release",
            Operation::PurgeExpired(_) => "purge_expired",
            Operation::Now => "now",
            Operation::ApprovalText { .. } => "approval_text",
            Operation::SwapApproval { .. } => "swap_approval",
            Operation::RemoveApproval { .. } => "remove_approval",
            Operation::ApprovalTexts(_) => "approval_texts",
            Operation::AppendRunEntry { .. } => "append_run_entry",
            Operation::RunEntries { .. } => "run_entries",
            Operation::BudgetText { .. } => "budget_text",
            Operation::SwapBudget { .. } => "swap_budget",
        }
    }

    /// The key the operation is about, if it is about one.
    ///
    /// ```
    /// use idem::key::RecordKey;
    /// use idem::store::layer::Operation;
    ///
    /// let key = RecordKey::from_stored("k");
    /// assert_eq!(Operation::Get { key: &key }.key(), Some(&key));
    /// assert_eq!(Operation::Now.key(), None);
    /// ```
    pub fn key(&self) -> Option<&RecordKey> {
        match *self {
            Operation::Claim(request) => Some(&request.key),
            Operation::Complete { key, .. }
            | Operation::Release { key, .. }
            | Operation::Renew { key, .. }
            | Operation::Journal { key, .. }
            | Operation::MarkUnknown { key, .. }
            | Operation::Get { key }
            | Operation::Resolve { key, .. }
            | Operation::SettleUnknown { key, .. }
            | Operation::ForceRelease { key }
            | Operation::ApprovalText { key }
            | Operation::SwapApproval { key, .. }
            | Operation::RemoveApproval { key } => Some(key),
            Operation::List(_)
            | Operation::PurgeExpired(_)
            | Operation::Now
            | Operation::ApprovalTexts(_)
            | Operation::AppendRunEntry { .. }
            | Operation::RunEntries { .. }
            // A scope may be an argument's value: not a key a trace may show, even hashed.
            | Operation::BudgetText { .. }
            | Operation::SwapBudget { .. } => None,
        }
    }
}

//! A run's account: every call of a run with what became of it, kept in the store so that
//! any process can tell it (the host, the agent loop, an MCP client, `idem runs show`).
//!
//! A dispatcher that keeps accounts ([`Dispatcher::with_run_accounts`]) appends one entry
//! per dispatch of a call whose run has an id, after the dispatch ended: its tool and class,
//! call id, step and key, how many times the dispatch ran the body, and its outcome then. A
//! `read` that ran is *answered*, never *applied*: only a write's outcome is an effect.
//! Reading the account ([`Dispatcher::run_account`]) brings entries whose outcome could
//! still change (Unknown, pending approval, in progress) up to date from the call's record,
//! so the account says what the store knows now: an Unknown call a verify hook settled since
//! reads as applied. A call dispatched again under its call id (a re-send, a retry after an
//! approval) is one call of the account, with its latest outcome and the attempts of all its
//! dispatches summed; another call the model made with the same key is a call of its own
//! (replayed). Entries hold no arguments and no outputs: an account is safe to show the
//! model and an operator.
//!
//! Entries are JSON texts kept in the store, read by whichever idem reads the account: a
//! field added later has a default (an entry written before idem kept classes and attempts
//! reads with neither), and an outcome this idem does not know reads as
//! [`CallOutcome::Unrecognized`] rather than dropping the call.

use std::time::Duration;

use idem_core::store::approvals;
use idem_core::{Outcome, RecordKey, RecordState, StoreError, Timestamp, ToolClass};
use serde::{Deserialize, Serialize};

use super::Dispatcher;
use super::call::{Dispatched, LimitUse, ToolCall};
use super::error::DispatchError;
use crate::run::RunContext;

/// How long a run's account is kept unless [`Dispatcher::with_run_accounts`] says: a week.
pub const DEFAULT_ACCOUNT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// What became of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallOutcome {
    /// A write's body ran and its effect is recorded (or a verify hook found it applied).
    Applied,
    /// A `read` ran and answered: no effect, and nothing recorded to replay.
    Answered,
    /// A recorded outcome was replayed: no effect happened in this call.
    Replayed,
    /// Nothing was applied: refused before the body (authorization, arguments, approval
    /// denied, a reused key), by the body or its precondition, or given back.
    Refused {
        /// Why, as the caller was told.
        why: String,
    },
    /// The effect may or may not have happened.
    Unknown {
        /// Since when (the store's clock).
        since: Timestamp,
        /// When a verify hook may settle it; `None`: a person must.
        retry_after: Option<Timestamp>,
        /// Why.
        why: String,
    },
    /// Waiting for a person's approval; nothing ran.
    PendingApproval,
    /// Sent to a person ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)), who
    /// decides what became of it (see the entry's `decided`).
    Escalated {
        /// Since when (the store's clock).
        since: Timestamp,
        /// How it ended and why.
        why: String,
    },
    /// A later step failed for good and the completed ones were undone.
    Compensated {
        /// The steps undone, in the order they were.
        undone: Vec<String>,
        /// The failure that was compensated, as the caller was told.
        why: String,
    },
    /// Another dispatch held the call when this one stopped waiting.
    InProgress,
    /// An outcome written by a newer idem, which this one cannot tell: the call is listed
    /// with what its entry says besides (tool, class, attempts), never dropped.
    #[serde(other)]
    Unrecognized,
}

impl CallOutcome {
    /// Its name, as the account and the CLI print it.
    pub fn name(&self) -> &'static str {
        match self {
            CallOutcome::Applied => "applied",
            CallOutcome::Answered => "answered",
            CallOutcome::Replayed => "replayed",
            CallOutcome::Refused { .. } => "refused",
            CallOutcome::Unknown { .. } => "unknown",
            CallOutcome::PendingApproval => "pending_approval",
            CallOutcome::Escalated { .. } => "escalated",
            CallOutcome::Compensated { .. } => "compensated",
            CallOutcome::InProgress => "in_progress",
            CallOutcome::Unrecognized => "unrecognized",
        }
    }

    /// Whether the record may still change it.
    fn unsettled(&self) -> bool {
        matches!(
            self,
            CallOutcome::Unknown { .. }
                | CallOutcome::PendingApproval
                | CallOutcome::InProgress
                | CallOutcome::Escalated { .. }
        )
    }

    /// What a dispatch's result says of the call.
    fn of(result: &Result<Dispatched, DispatchError>) -> CallOutcome {
        match result {
            Ok(d) if d.deduplicated => CallOutcome::Replayed,
            Ok(d) if d.class == ToolClass::Read => CallOutcome::Answered,
            Ok(_) => CallOutcome::Applied,
            Err(DispatchError::ToolFailed { error, .. }) => match compensated(error) {
                Some(undone) => CallOutcome::Compensated {
                    undone,
                    why: error.message().to_owned(),
                },
                None => CallOutcome::Refused {
                    why: error.message().to_owned(),
                },
            },
            Err(DispatchError::OutcomeUnknown {
                since,
                retry_after,
                reason,
                ..
            }) => CallOutcome::Unknown {
                since: *since,
                retry_after: *retry_after,
                why: reason.clone(),
            },
            Err(DispatchError::Escalated { since, case, .. }) => CallOutcome::Escalated {
                since: *since,
                why: case.summary(),
            },
            Err(DispatchError::ApprovalRequired { .. }) => CallOutcome::PendingApproval,
            Err(DispatchError::InProgress { .. }) => CallOutcome::InProgress,
            Err(e) => CallOutcome::Refused { why: e.to_string() },
        }
    }

    /// What a record says of its call now, if it settled it.
    fn of_record(state: &RecordState, steps: &[idem_core::JournalEntry]) -> CallOutcome {
        match state {
            RecordState::Completed {
                outcome: Outcome::Success(_),
                ..
            } => CallOutcome::Applied,
            RecordState::Completed {
                outcome: Outcome::Failure(error),
                ..
            } => match compensated(error) {
                Some(_) => CallOutcome::Compensated {
                    undone: super::journal::undone_steps(steps),
                    why: error.message().to_owned(),
                },
                None => CallOutcome::Refused {
                    why: error.message().to_owned(),
                },
            },
            RecordState::Unknown { since, last_error } => {
                match super::case::Escalation::of_recorded(last_error) {
                    Some(case) => CallOutcome::Escalated {
                        since: *since,
                        why: case.summary(),
                    },
                    None => CallOutcome::Unknown {
                        since: *since,
                        retry_after: None,
                        why: last_error.clone(),
                    },
                }
            }
            RecordState::InProgress { .. } => CallOutcome::InProgress,
        }
    }
}

/// How many times a dispatch ran the body, if its result says: `Some(0)` for a refusal
/// before the body; `None` where the body may have run and the error does not say how often
/// (left Unknown, fenced, the store failing).
fn attempts(result: &Result<Dispatched, DispatchError>) -> Option<u32> {
    match result {
        Ok(d) => Some(d.attempts),
        Err(DispatchError::ToolFailed { attempts, .. }) => Some(*attempts),
        // Sent to a person by this dispatch, after its attempts; answered from the case: none.
        Err(DispatchError::Escalated {
            deduplicated: true, ..
        }) => Some(0),
        Err(DispatchError::Escalated { case, .. }) => case.attempts,
        Err(
            DispatchError::UnknownTool { .. }
            | DispatchError::InvalidArguments { .. }
            | DispatchError::PermissionDenied { .. }
            | DispatchError::NotAuthorized { .. }
            | DispatchError::SecretKeyMissing { .. }
            | DispatchError::MissingKey { .. }
            | DispatchError::ApprovalRequired { .. }
            | DispatchError::ApprovalRefused { .. }
            | DispatchError::ApprovalDenied { .. }
            | DispatchError::ApprovalEdited { .. }
            | DispatchError::KeyReused { .. }
            | DispatchError::InProgress { .. },
        ) => Some(0),
        Err(_) => None,
    }
}

/// The steps a compensated failure undid, if it is one.
fn compensated(error: &idem_core::ToolError) -> Option<Vec<String>> {
    let undone = error.details()?.get("compensated")?;
    serde_json::from_value(undone.clone()).ok()
}

/// One call of a run, as its account keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AccountEntry {
    /// When the dispatch ended (the store's clock).
    pub at: Timestamp,
    /// The tool.
    pub tool: String,
    /// The tool's class; `None` for a call of no known tool, and in entries written before
    /// idem kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ToolClass>,
    /// The provider's call id, if the call had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The run's step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The key handed downstream, if the call had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The record key, to bring the outcome up to date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordKey>,
    /// How many times the body ran for this call: every attempt of every dispatch of it (a
    /// re-send's added; 0 for a replay or a refusal before the body). `None` when not known:
    /// a dispatch left the call Unknown, lost its key or met a failing store (the body may
    /// have run), or an entry predates attempts. Executions by a take-over outside these
    /// dispatches (`Dispatcher::recover`) are not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// A person's decision on the call, if it was sent to one (`Dispatcher::cases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<super::case::CaseDecided>,
    /// What became of the call's undo, once its run was undone (`undone`, `failed`,
    /// `unknown`, `escalated`, `in_progress`): read from the undo's own entry
    /// (`<tool>.undo`), never written with the call's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<String>,
    /// Where the call's limits stood once it took its shares ([`LimitUse`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitUse>,
    /// The standing grant that let the call run without asking, in a few words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted: Option<String>,
    /// What became of the call.
    #[serde(flatten)]
    pub outcome: CallOutcome,
}

/// Every call of one run, in the order their dispatches ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunAccount {
    /// The tenant.
    pub tenant: String,
    /// The run.
    pub run_id: String,
    /// Its calls.
    pub calls: Vec<AccountEntry>,
}

impl RunAccount {
    /// How many calls had each outcome, by name, in the order each outcome first appears
    /// among the calls.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        for call in &self.calls {
            let name = call.outcome.name();
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        }
        counts
    }

    /// Where each limit the run's calls took a share of stands, by the latest call that took
    /// one: its name, what is used and what is left.
    pub fn limits(&self) -> Vec<&LimitUse> {
        let mut latest: Vec<&LimitUse> = Vec::new();
        for used in self.calls.iter().flat_map(|c| &c.limits) {
            match latest.iter_mut().find(|l| l.limit == used.limit) {
                Some(l) => *l = used,
                None => latest.push(used),
            }
        }
        latest
    }

    /// The calls that need a person: Unknown with no verify hook to settle them, waiting
    /// for an approval, or sent to a person who has not decided yet.
    pub fn needing_a_person(&self) -> impl Iterator<Item = &AccountEntry> {
        self.calls.iter().filter(|c| match c.outcome {
            CallOutcome::Unknown {
                retry_after: None, ..
            }
            | CallOutcome::PendingApproval => true,
            CallOutcome::Escalated { .. } => c.decided.is_none(),
            _ => false,
        })
    }
}

impl Dispatcher {
    /// Keep an account of every run (calls whose [`RunContext`] has a run id, or is
    /// [accounted under one](RunContext::accounted_as)), each kept for
    /// `retention` after its last call: one store write more per dispatch of such a call.
    /// Read it with [`Dispatcher::run_account`].
    pub fn with_run_accounts(mut self, retention: Duration) -> Self {
        self.accounts = Some(retention);
        self
    }

    /// Whether this dispatcher keeps run accounts.
    pub fn keeps_run_accounts(&self) -> bool {
        self.accounts.is_some()
    }

    /// Append the dispatch of `call` to its run's account, if accounts are kept and the run
    /// has an id. A store that cannot take it is logged, not the caller's failure: the
    /// call's outcome stands.
    pub(super) async fn account(
        &self,
        call: &ToolCall,
        run: &RunContext,
        record: Option<&RecordKey>,
        result: &Result<Dispatched, DispatchError>,
        granted: Option<String>,
    ) {
        self.account_as(call, run, record, result, None, granted)
            .await
    }

    /// [`Dispatcher::account`], the entry saying who asked for the call (a run's undo).
    pub(super) async fn account_as(
        &self,
        call: &ToolCall,
        run: &RunContext,
        record: Option<&RecordKey>,
        result: &Result<Dispatched, DispatchError>,
        decided: Option<super::case::CaseDecided>,
        granted: Option<String>,
    ) {
        let run_id = run.run_id.as_deref().or(run.account_as.as_deref());
        let (Some(retention), Some(run_id)) = (self.accounts, run_id) else {
            return;
        };
        let at = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
        let key = match result {
            Ok(d) => d.key.as_ref().map(|k| k.as_str().to_owned()),
            Err(_) => record.and_then(|r| {
                idem_core::IdempotencyKey::of_record(r).map(|k| k.as_str().to_owned())
            }),
        };
        // An error does not carry the class: the registry says it.
        let class = match result {
            Ok(d) => Some(d.class),
            Err(_) => self.registry.get(&call.name).map(|t| t.class),
        };
        let entry = AccountEntry {
            at,
            tool: call.name.clone(),
            class,
            call_id: call.call_id.clone(),
            step: run.step,
            key,
            record: record.cloned(),
            attempts: attempts(result),
            decided,
            undo: None,
            limits: match result {
                Ok(d) => d.limits.clone(),
                Err(_) => Vec::new(),
            },
            granted,
            outcome: CallOutcome::of(result),
        };
        append_entry(&*self.store, &run.tenant, run_id, &entry, retention).await;
    }

    /// The account of `tenant`'s run `run_id`: every call dispatched in it, in order, with
    /// its outcome as the store knows it now. A run nobody dispatched in has no calls.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use idem::{Dispatcher, MemoryStore, Registry, RunContext, ToolCall};
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let note = ToolDef::builder("add_note", ToolClass::NonIdempotentWrite)
    ///     .description("Add a note.")
    ///     .input_schema(json!({"type": "object"}))
    ///     .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("ok")) })
    ///     .build()
    ///     .unwrap();
    /// let registry = Registry::builder().add(note).build().unwrap();
    /// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new()))
    ///     .unwrap()
    ///     .with_run_accounts(Duration::from_secs(3600));
    /// let run = RunContext::new("tenant-a").with_run("run-1", 0);
    /// let note = json!({"text": "hi"});
    /// let call = ToolCall::new("add_note", note.clone()).with_call_id("c1").with_key("note-1");
    /// dispatcher.dispatch(&call, &run).await.unwrap();
    /// // The model calls again "to be sure": another call, the same key.
    /// let again = ToolCall::new("add_note", note).with_call_id("c2").with_key("note-1");
    /// dispatcher.dispatch(&again, &run).await.unwrap();
    /// let account = dispatcher.run_account("tenant-a", "run-1").await.unwrap();
    /// assert_eq!(account.counts(), vec![("applied", 1), ("replayed", 1)]);
    /// # }
    /// ```
    pub async fn run_account(&self, tenant: &str, run_id: &str) -> Result<RunAccount, StoreError> {
        run_account(&*self.store, tenant, run_id).await
    }
}

/// The run's applied calls, newest first, each record once. A call whose applying dispatch
/// died after recording its outcome and before its entry was appended is known to the run
/// only by the replay its resumed call was answered: a replayed record that no entry of the
/// run applied counts as the run's (its effect happened, for this run's call under its key).
pub(crate) fn applied_calls(calls: &[AccountEntry]) -> Vec<&AccountEntry> {
    use std::collections::HashSet;
    // The records an entry of the run applied, read once (an account may be long).
    let applied_here: HashSet<&RecordKey> = calls
        .iter()
        .filter(|c| c.outcome == CallOutcome::Applied)
        .filter_map(|c| c.record.as_ref())
        .collect();
    let mut taken: HashSet<&RecordKey> = HashSet::new();
    let mut applied = Vec::new();
    for entry in calls.iter().rev() {
        let Some(record) = &entry.record else {
            continue;
        };
        let counts = match entry.outcome {
            CallOutcome::Applied => true,
            CallOutcome::Replayed => !applied_here.contains(record),
            _ => false,
        };
        if counts && taken.insert(record) {
            applied.push(entry);
        }
    }
    applied
}

/// Append `entry` to the account of `tenant`'s run `run_id`, kept `retention`. A store that
/// cannot take it is logged, not the caller's failure: what the entry tells stands.
pub(super) async fn append_entry(
    store: &dyn idem_core::Store,
    tenant: &str,
    run_id: &str,
    entry: &AccountEntry,
    retention: Duration,
) {
    let text = match serde_json::to_string(entry) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "a run's account entry could not be written as JSON");
            return;
        }
    };
    if let Err(e) = store
        .append_run_entry(tenant, run_id, &text, retention)
        .await
    {
        tracing::warn!(error = %e, run = run_id, tool = %entry.tool, "an entry could not be added to its run's account");
    }
}

/// The account of `tenant`'s run `run_id` in `store` (what [`Dispatcher::run_account`]
/// reads, for an operator without the tools).
pub async fn run_account(
    store: &dyn idem_core::Store,
    tenant: &str,
    run_id: &str,
) -> Result<RunAccount, StoreError> {
    let mut calls = Vec::new();
    for text in store.run_entries(tenant, run_id).await? {
        let entry: AccountEntry = match serde_json::from_str(&text) {
            Ok(e) => e,
            // Written by a newer idem in a shape this one cannot read whole: listed with what
            // it can read, its outcome unrecognized, never dropped.
            Err(e) => match unrecognized(&text) {
                Some(entry) => entry,
                None => {
                    tracing::warn!(error = %e, run = run_id, "an entry of a run's account could not be read");
                    continue;
                }
            },
        };
        // The same call dispatched again (a re-send, the loop's retry after an approval) is
        // one call: its latest word, unless that is a replay of its own outcome; the body ran
        // as often as all its dispatches ran it.
        let same = calls.iter_mut().find(|c: &&mut AccountEntry| {
            (entry.call_id.is_some() && c.call_id == entry.call_id && c.tool == entry.tool)
                || (entry.decided.is_some() && entry.record.is_some() && c.record == entry.record)
        });
        if let Some(earlier) = same {
            earlier.attempts = match (earlier.attempts, entry.attempts) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
            earlier.class = entry.class.or(earlier.class);
            earlier.decided = entry.decided.or(earlier.decided.take());
            if !entry.limits.is_empty() {
                earlier.limits = entry.limits;
            }
            if entry.outcome != CallOutcome::Replayed || earlier.outcome.unsettled() {
                earlier.outcome = entry.outcome;
                earlier.at = entry.at;
                earlier.record = entry.record.or(earlier.record.take());
                earlier.key = entry.key.or(earlier.key.take());
            }
            continue;
        }
        calls.push(entry);
    }
    for entry in &mut calls {
        if entry.outcome.unsettled()
            && let Some(key) = &entry.record
        {
            entry.outcome = now_outcome(store, key, entry.outcome.clone()).await?;
        }
    }
    mark_undone(&mut calls);
    Ok(RunAccount {
        tenant: tenant.to_owned(),
        run_id: run_id.to_owned(),
        calls,
    })
}

/// What the store says now of a call whose outcome was `then`.
async fn now_outcome(
    store: &dyn idem_core::Store,
    key: &RecordKey,
    then: CallOutcome,
) -> Result<CallOutcome, StoreError> {
    if let Some(record) = store.get(key).await? {
        let now = CallOutcome::of_record(&record.state, &record.steps);
        return Ok(match (now, then) {
            // The record does not know when a hook may be asked: keep what the call was told.
            (CallOutcome::Unknown { since, why, .. }, CallOutcome::Unknown { retry_after, .. }) => {
                CallOutcome::Unknown {
                    since,
                    retry_after,
                    why,
                }
            }
            (now, _) => now,
        });
    }
    if then == CallOutcome::PendingApproval
        && let Some(entry) = approvals::get(store, key).await?
        && let Some(decision) = entry.decision
        && let approvals::Verdict::Denied { reason } = decision.verdict
    {
        return Ok(CallOutcome::Refused {
            why: format!("denied by {}: {reason}", decision.by),
        });
    }
    Ok(then)
}

// How entries read back: one a newer idem wrote, and the calls a run's undo undid.
#[path = "account_read.rs"]
mod read;
use read::{mark_undone, unrecognized};

#[cfg(test)]
#[path = "account_tests.rs"]
mod tests;

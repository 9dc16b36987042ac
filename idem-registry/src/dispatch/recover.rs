//! Recovery without a caller: a pass over the records whose holder died or whose outcome is
//! Unknown, settling each by its class, so that nothing waits for a caller that may never
//! come back.
//!
//! A pass lists the InProgress and Unknown records (of one tenant, or all) and, for each:
//!
//! | record | class that applies (`idem_core::contract`) | what the pass does |
//! |---|---|---|
//! | InProgress, lease live | any | nothing: its holder is at work |
//! | InProgress, lease expired | `idempotent_write` | takes it over (fenced like any holder) and runs the body from the stored arguments, with the same downstream key and the journal of the dead holder |
//! | InProgress, lease expired | `non_idempotent_write`, `irreversible` | turns it Unknown (never re-run); a later pass verifies it once its settle delay passed |
//! | Unknown, past its settle delay | a tool with a verify hook | asks the hook: applied → completed; not applied → released (the next call runs it), and an `idempotent_write` is re-run at once |
//! | Unknown, past its settle delay | `idempotent_write` without a hook | released and re-run with the same downstream key |
//! | Unknown | otherwise | reported, for an operator |
//!
//! Reported, never guessed: a record whose tool is no longer registered, whose arguments were
//! sealed (a tool with `#[secret]` parameters: the stored arguments hold seals, not values)
//! or were not stored, whose arguments no longer fit the tool, or that a handler of another
//! version made and only its hook could settle. Several recovery workers at once never run
//! one record twice: each run is a claim, and a claim is won once.
//!
//! A re-run's context has the record's tenant, no run id and no step (the record does not
//! keep them), and is not authorised against scopes: recovery acts for the service.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{
    Claim, ClaimRequest, Contract, Fingerprint, IdempotencyKey, ListCursor, ListFilter,
    OrphanPolicy, Reconciled, Record, RecordKey, RecordState, StateKind, StoreError, Timestamp,
    UnknownCause,
};
use serde_json::Value;

use super::error::DispatchError;
use super::guard::{ClaimGuard, WonClaim};
use super::verify::{UnknownRecord, Verification};
use super::{Dispatcher, KeyedCall, Watch, arguments, decide};
use crate::context::FencedKey;
use crate::run::RunContext;
use crate::tool::ToolDef;

/// Which records a recovery pass looks at.
///
/// ```
/// use idem::dispatch::RecoveryOptions;
/// let options = RecoveryOptions { tenant: Some("acme".into()), ..RecoveryOptions::default() };
/// assert_eq!(options.limit, 1_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryOptions {
    /// Only this tenant's records (`None`: every tenant's).
    pub tenant: Option<String>,
    /// How many records are listed at a time (the pass reads every InProgress and Unknown
    /// record, a page of this many at a time, oldest first). On Redis each page walks the
    /// whole prefix: keep it large.
    pub limit: usize,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            tenant: None,
            limit: 1_000,
        }
    }
}

/// What one recovery pass did, record by record (records with a live holder are left out).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoveryReport {
    /// Every record the pass acted on or left for an operator.
    pub records: Vec<Recovered>,
}

impl RecoveryReport {
    /// The records left for an operator, with why.
    pub fn reported(&self) -> impl Iterator<Item = (&Recovered, &Unrecoverable)> {
        self.records.iter().filter_map(|r| match &r.action {
            RecoveryAction::Reported(why) => Some((r, why)),
            _ => None,
        })
    }
}

/// One record of a [`RecoveryReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    /// Its key.
    pub key: RecordKey,
    /// Its tool, as recorded.
    pub tool: String,
    /// Its tenant.
    pub tenant: String,
    /// What the pass did.
    pub action: RecoveryAction,
}

/// What a recovery pass did with one record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RecoveryAction {
    /// Run again from its stored arguments under its downstream key `key`: its outcome is
    /// recorded (`Ok`), or the run ended in the error given (a failure recorded, or the
    /// record given back as the class says).
    ReRan {
        /// The downstream key the body was handed, the same as the first attempt's.
        key: IdempotencyKey,
        /// The outcome: `Ok` with the output recorded, or the dispatch error's text.
        outcome: Result<Value, String>,
    },
    /// The tool's verify hook answered: the effect happened (completed with its answer) or
    /// not (the record released, so that the next call runs it).
    Verified {
        /// Whether the effect happened.
        applied: bool,
    },
    /// An orphan of a class that never re-runs, turned Unknown; a pass after its settle
    /// delay asks its verify hook, if it has one.
    MarkedUnknown,
    /// Left as it is, for an operator (or a later pass).
    Reported(Unrecoverable),
    /// Another worker holds or settled it first.
    Raced,
}

/// Why a recovery pass left a record as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unrecoverable {
    /// Its settle delay has not passed: a later pass settles it (asks its hook, or re-runs an
    /// `idempotent_write`).
    #[error("its settle delay ends at {}: a later pass settles it", retry_after.to_rfc3339())]
    NotYet {
        /// When, on the store's clock.
        retry_after: Timestamp,
    },
    /// Unknown, of a class that never re-runs, and the tool has no verify hook (or journaled
    /// steps make the effect partial).
    #[error("its outcome is unknown and no verify hook can settle it: resolve it as an operator")]
    NoVerifyHook,
    /// Made by a handler of another version, whose effect only that version's hook could
    /// judge.
    #[error(
        "made by handler version {recorded:?}, now {current:?}: the new hook is not asked, resolve it as an operator"
    )]
    VersionChanged {
        /// The version it was made under.
        recorded: String,
        /// The tool's version now.
        current: String,
    },
    /// The tool has secret parameters: the stored arguments hold their seals, not the values.
    #[error("its arguments were stored with their secrets sealed, so it cannot be run again")]
    ArgumentsSealed,
    /// No arguments were stored with the record.
    #[error("no arguments were stored with it, so it cannot be run again")]
    NoArguments,
    /// The stored arguments do not fit the tool as it is now, or are not the record's.
    #[error("its stored arguments cannot be run again: {0}")]
    ArgumentsInvalid(String),
    /// No tool of that name is registered.
    #[error("no tool of its name is registered")]
    ToolNotRegistered,
    /// The tool is a `read` now and the record has no contract saying what it was made as.
    #[error("the tool records nothing now and the record does not say what it was made as")]
    NotRecorded,
    /// The call was sent to a person ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)):
    /// their decision settles it.
    #[error("it was sent to a person, whose decision settles it (`idem cases`)")]
    Escalated,
    /// The verify hook failed, or the store did.
    #[error("{0}")]
    Failed(String),
}

impl Dispatcher {
    /// One recovery pass (module docs): settle what can be settled by the class, report the
    /// rest. Fails only if the store cannot list the records; a record the pass could not
    /// settle is reported, and the others are still settled.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use idem::*;
    /// use idem::dispatch::RecoveryOptions;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let registry = Registry::builder().build().unwrap();
    /// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap();
    /// let report = dispatcher.recover(&RecoveryOptions::default()).await.unwrap();
    /// for (record, why) in report.reported() {
    ///     eprintln!("{} ({}): {why}", record.key, record.tool);
    /// }
    /// # }
    /// ```
    pub async fn recover(&self, options: &RecoveryOptions) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        // An orphan turned Unknown by this pass is listed again with the Unknown records: it
        // is settled once per pass.
        let mut seen = std::collections::HashSet::new();
        // Records created after the pass began are the next pass's: a steady stream of new
        // calls cannot keep one pass going.
        let began = self.store.now().await?;
        for state in [StateKind::InProgress, StateKind::Unknown] {
            let mut filter = ListFilter {
                state: Some(state),
                tenant: options.tenant.clone(),
                limit: options.limit.max(1),
                after: None,
            };
            loop {
                let page = self.store.list(filter.clone()).await?;
                let Some(last) = page.last() else { break };
                let more = page.len() >= filter.limit && last.created_at <= began;
                filter.after = Some(ListCursor::after(last));
                let page = page.into_iter().filter(|r| r.created_at <= began).collect();
                self.recover_page(page, &mut seen, &mut report).await;
                if !more {
                    break;
                }
            }
        }
        Ok(report)
    }

    /// Settle each record of a page, once per pass.
    async fn recover_page(
        &self,
        records: Vec<Record>,
        seen: &mut std::collections::HashSet<RecordKey>,
        report: &mut RecoveryReport,
    ) {
        {
            for record in records {
                if !seen.insert(record.key.clone()) {
                    continue;
                }
                let (key, tool, tenant) = (
                    record.key.clone(),
                    record.tool.clone(),
                    record.tenant.clone(),
                );
                if let Some(action) = self.recover_record(record).await {
                    report.records.push(Recovered {
                        key,
                        tool,
                        tenant,
                        action,
                    });
                }
            }
        }
    }

    /// Recovery passes every `every`, for as long as the future is polled: spawn it in a
    /// service. Each reported record is logged (a warning) with why; a pass that cannot list
    /// the records is logged and the next one tried. Each pass also carries out the run
    /// undos people asked for from the command line or the inbox
    /// ([`Dispatcher::undo_requested`]).
    ///
    /// ```no_run
    /// # fn spawn(dispatcher: idem::Dispatcher) {
    /// use std::time::Duration;
    /// tokio::spawn(dispatcher.recover_every(Duration::from_secs(30), idem::dispatch::RecoveryOptions::default()));
    /// # }
    /// ```
    pub async fn recover_every(self, every: Duration, options: RecoveryOptions) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match self.recover(&options).await {
                Ok(report) => {
                    for (record, why) in report.reported() {
                        match why {
                            Unrecoverable::NotYet { .. } => {
                                tracing::debug!(key = %record.key, tool = %record.tool, tenant = %record.tenant, "recovery waits: {why}")
                            }
                            _ => {
                                tracing::warn!(key = %record.key, tool = %record.tool, tenant = %record.tenant, "recovery left a record for an operator: {why}")
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "a recovery pass could not list the records"),
            }
            // The run undos people asked for where the tools are not (`undo_requests.rs`).
            self.undo_requested_logged().await;
        }
    }

    /// Settle one record, or say why not; `None` for a record with a live holder.
    async fn recover_record(&self, record: Record) -> Option<RecoveryAction> {
        let now = match self.store.now().await {
            Ok(now) => now,
            Err(e) => {
                return Some(RecoveryAction::Reported(Unrecoverable::Failed(
                    e.to_string(),
                )));
            }
        };
        let Some(tool) = self.registry.get(&record.tool) else {
            return Some(RecoveryAction::Reported(Unrecoverable::ToolNotRegistered));
        };
        let current = tool.contract(self.record_ttl(tool, None));
        let rule = match &record.contract {
            Some(made) => made.reconcile(&current),
            None if !tool.class.records() => {
                return Some(RecoveryAction::Reported(Unrecoverable::NotRecorded));
            }
            None => current.reconcile(&current),
        };
        let reported = |why| Some(RecoveryAction::Reported(why));
        if let RecordState::Unknown { last_error, .. } = &record.state
            && UnknownCause::of(last_error).case().is_some()
        {
            return reported(Unrecoverable::Escalated);
        }
        let policy = &tool.policy;
        let (state, since, last_error) = match &record.state {
            RecordState::Completed { .. } => (decide::Found::Completed, None, ""),
            RecordState::InProgress { lease_until } => (
                decide::Found::InProgress {
                    lease_until: *lease_until,
                },
                None,
                "",
            ),
            RecordState::Unknown { since, last_error } => (
                decide::Found::Unknown {
                    since: *since,
                    orphaned: UnknownCause::of(last_error) == UnknownCause::Orphaned,
                },
                Some(*since),
                last_error.as_str(),
            ),
        };
        let facts = decide::RecoveryFacts {
            state,
            now,
            // A compensation its holder left is resumed by whoever takes the call over.
            may_rerun: rule.may_rerun()
                || (tool.compensate.is_some() && super::journal::compensating(&record.steps)),
            version_changed: rule.version_changed,
            has_hook: tool.verify.is_some(),
            has_steps: super::tool_steps(&record.steps),
            verify_after: policy.verify_after,
            lease: decide::settle_lease(policy.lease, record.contract.as_ref().map(|c| c.lease)),
        };
        match decide::recovery(&facts) {
            decide::Recovery::Leave => None,
            decide::Recovery::Rerun => Some(self.rerun(tool, &record, &current, &rule).await),
            decide::Recovery::MarkUnknown => {
                // Turned Unknown at the fence it was read at, as a caller's duplicate would
                // turn it. Its lease had lapsed, so only a claim or its holder's own last
                // write can change it meanwhile: of two recoverers that read it, the store
                // lets the first do it, and the other lost the race.
                let marked = self
                    .store
                    .mark_unknown(&record.key, record.fence, idem_core::ORPHANED)
                    .await;
                Some(match marked {
                    Ok(()) => RecoveryAction::MarkedUnknown,
                    Err(StoreError::Fenced { .. }) => RecoveryAction::Raced,
                    Err(e) => RecoveryAction::Reported(Unrecoverable::Failed(e.to_string())),
                })
            }
            decide::Recovery::Verify => {
                let since = since?;
                Some(
                    self.verify_unknown(tool, &record, since, last_error, &current, &rule)
                        .await,
                )
            }
            decide::Recovery::NotYet { retry_after } => {
                reported(Unrecoverable::NotYet { retry_after })
            }
            decide::Recovery::NoVerifyHook => reported(Unrecoverable::NoVerifyHook),
            decide::Recovery::VersionChanged => {
                let recorded = record.contract.as_ref().map(|c| c.version.clone());
                reported(Unrecoverable::VersionChanged {
                    recorded: recorded.unwrap_or_default(),
                    current: current.version.clone(),
                })
            }
            decide::Recovery::ReleaseAndRerun => {
                // An idempotent write: give the Unknown record back (fenced: once) and run it
                // again under the same downstream key; first make sure it can be run again,
                // so that nothing is released that is then reported.
                if let Err(why) = Prepared::of(tool, &record) {
                    return reported(why);
                }
                match self
                    .store
                    .settle_unknown(&record.key, record.fence, None, rule.ttl)
                    .await
                {
                    Ok(true) => Some(self.rerun(tool, &record, &current, &rule).await),
                    Ok(false) => Some(RecoveryAction::Raced),
                    Err(e) => reported(Unrecoverable::Failed(e.to_string())),
                }
            }
        }
    }

    /// Ask the hook about an Unknown record past its settle delay; a record released by a
    /// "not applied" is re-run at once when the class allows it.
    async fn verify_unknown(
        &self,
        tool: &ToolDef,
        record: &Record,
        since: Timestamp,
        last_error: &str,
        current: &Arc<Contract>,
        rule: &Reconciled,
    ) -> RecoveryAction {
        let prepared = match Prepared::of(tool, record) {
            Ok(p) => p,
            Err(why) => return RecoveryAction::Reported(why),
        };
        let run = RunContext::new(record.tenant.clone());
        let call = prepared.call(tool, &run, record, rule);
        let watch = self.watch(tool);
        let settled = self
            .verify(
                &call,
                UnknownRecord {
                    fence: record.fence,
                    steps: record.steps.clone(),
                    since,
                    last_error,
                    // Recovery's call is made of the recorded arguments already.
                    arguments: None,
                },
                rule.ttl,
                &watch,
            )
            .await;
        match settled {
            Ok(Verification::Applied(_)) => RecoveryAction::Verified { applied: true },
            Ok(Verification::Released) if rule.may_rerun() => {
                self.rerun(tool, record, current, rule).await
            }
            Ok(Verification::Released) => RecoveryAction::Verified { applied: false },
            Ok(Verification::Raced) => RecoveryAction::Raced,
            Err(e) => RecoveryAction::Reported(Unrecoverable::Failed(e.to_string())),
        }
    }

    /// Claim the record's key and run its body from the stored arguments.
    async fn rerun(
        &self,
        tool: &ToolDef,
        record: &Record,
        current: &Arc<Contract>,
        rule: &Reconciled,
    ) -> RecoveryAction {
        let mut prepared = match Prepared::of(tool, record) {
            Ok(p) => p,
            Err(why) => return RecoveryAction::Reported(why),
        };
        let typed = prepared.typed.take();
        let run = RunContext::new(record.tenant.clone());
        let call = prepared.call(tool, &run, record, rule);
        let request = claim_request(tool, record, current, OrphanPolicy::TakeOver);
        let (fence, steps, takeover) = match self.claim_cancel_safe(request).await {
            Ok((
                Claim::Acquired {
                    fence,
                    steps,
                    takeover,
                },
                _,
            )) => (fence, steps, takeover),
            Ok((Claim::Existing(_), _)) => return RecoveryAction::Raced,
            Err(e) => return RecoveryAction::Reported(Unrecoverable::Failed(e.to_string())),
        };
        let watch = self.watch(tool);
        let held = WonClaim {
            hold: ClaimGuard::new(
                FencedKey {
                    store: self.store.clone(),
                    key: record.key.clone(),
                    fence,
                },
                tool.class,
            ),
            steps,
            takeover,
            ttl: rule.ttl,
        };
        let outcome = self
            .execute_held(&call, held, typed, &watch)
            .await
            .map(|d| d.output)
            .map_err(|e: DispatchError| e.to_string());
        RecoveryAction::ReRan {
            key: call.downstream.clone(),
            outcome,
        }
    }

    fn watch<'a>(&'a self, tool: &'a ToolDef) -> Watch<'a> {
        Watch {
            observers: &self.observers,
            started: Instant::now(),
            tool: &tool.name,
        }
    }
}

/// The claim a recovery makes of a record's key.
fn claim_request(
    tool: &ToolDef,
    record: &Record,
    current: &Arc<Contract>,
    orphans: OrphanPolicy,
) -> ClaimRequest {
    ClaimRequest {
        key: record.key.clone(),
        tool: record.tool.clone(),
        tenant: record.tenant.clone(),
        fingerprint: record.fingerprint,
        lease: tool.policy.lease,
        orphans,
        arguments: record.arguments.clone(),
        contract: Some(current.clone()),
    }
}

/// A record's stored arguments, checked and parsed for the tool as it is now.
struct Prepared {
    args: Value,
    typed: Option<crate::tool::TypedArguments>,
    downstream: IdempotencyKey,
}

impl Prepared {
    fn of(tool: &ToolDef, record: &Record) -> Result<Prepared, Unrecoverable> {
        let Some(text) = &record.arguments else {
            return Err(Unrecoverable::NoArguments);
        };
        // Sealed now, or when the record was made (a deploy may have dropped a `#[secret]`).
        if !tool.secrets.is_empty() || text.contains(crate::redact::SEAL_PREFIX) {
            return Err(Unrecoverable::ArgumentsSealed);
        }
        if Fingerprint::of_canonical(text) != record.fingerprint {
            return Err(Unrecoverable::ArgumentsInvalid(
                "they do not match the record's fingerprint".into(),
            ));
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Unrecoverable::ArgumentsInvalid(format!("they are not JSON: {e}")))?;
        let prepared = arguments::validate(tool, &value)
            .map_err(|e| Unrecoverable::ArgumentsInvalid(e.to_string()))?;
        let typed = prepared.typed;
        let args = prepared.arguments.into_owned();
        let downstream = IdempotencyKey::of_record(&record.key).ok_or_else(|| {
            Unrecoverable::ArgumentsInvalid(format!("{} is not a record key", record.key))
        })?;
        Ok(Prepared {
            args,
            typed,
            downstream,
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a ToolDef,
        run: &'a RunContext,
        record: &Record,
        rule: &Reconciled,
    ) -> KeyedCall<'a> {
        KeyedCall {
            tool,
            run,
            call_id: None,
            args: std::borrow::Cow::Borrowed(&self.args),
            record_key: record.key.clone(),
            downstream: self.downstream.clone(),
            fingerprint: record.fingerprint,
            source: None,
            ttl: rule.ttl,
            approval: None,
        }
    }
}

//! A run that undoes itself: [`Dispatcher::undo_run`] reads a run's account and undoes its
//! applied calls, newest first, with each tool's undo ([`ToolBuilder::undo`]).
//!
//! Each undo is a recorded call of its own: tool `<tool>.undo`, class `idempotent_write`,
//! keyed by a key derived from the undone call's record key. So the claim, record, fence
//! and take-over stages make it happen once: a second `undo_run` replays it, a worker that
//! died mid-undo leaves a claim the next `undo_run` takes over once its lease lapsed (and
//! runs the undo again under the same downstream key, which the provider dedupes), and two
//! hosts undoing the same run at once wait for each other. An undo whose outcome is not
//! certain is Unknown, listed for a person with the store's other Unknown records.
//!
//! The undo of the newest call may be what lets an older one be undone (a capture refunded
//! before its reservation is released): undoing stops at the first undo that did not
//! succeed, and the calls after it are reported as not reached. Running `undo_run` again
//! replays what was undone and resumes there.
//!
//! A tool built with `on_failure_undo_run` undoes its run this way when one of its calls
//! fails for good, before the dispatcher answers (`undo_after_failure`, called at the end of
//! [`Dispatcher::dispatch`]); the answer's message and details say what was undone.
//!
//! [`ToolBuilder::undo`]: crate::ToolBuilder::undo

use idem_core::KeySource;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use idem_core::{
    Fingerprint, IdempotencyKey, KeyMaterial, Outcome, RecordKey, RecordState, StoreError,
    ToolClass, ToolError, canonical_json,
};
use serde_json::{Value, json};

use super::account::{AccountEntry, applied_calls};
use super::call::{Dispatched, ToolCall};
use super::claim::Claimed;
use super::error::DispatchError;
use super::observe::Watch;
use super::{Dispatcher, KeyedCall};
use crate::run::RunContext;
use crate::tool::{AppliedCall, ToolDef, UNDO_TOOL_SUFFIX, UndoOptions, Undoer};

/// What became of one applied call's undo.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum UndoOutcome {
    /// Undone: now (`replayed: false`), or by an earlier `undo_run` (`replayed: true`).
    Undone {
        /// Whether an earlier undo of the run did it.
        replayed: bool,
    },
    /// The undo failed: nothing says it undid the call. A recorded failure replays to every
    /// later `undo_run`; a person decides what to do with the call.
    Failed {
        /// Why, as the undo said.
        why: String,
    },
    /// The undo may or may not have happened: listed for a person with the store's other
    /// Unknown records (`idem records --state unknown`).
    Unknown {
        /// Why.
        why: String,
    },
    /// Another host is undoing it now.
    InProgress,
    /// Not tried: an undo before it did not succeed.
    NotReached,
}

impl UndoOutcome {
    /// Its name, as a report prints it.
    pub fn name(&self) -> &'static str {
        match self {
            UndoOutcome::Undone { .. } => "undone",
            UndoOutcome::Failed { .. } => "failed",
            UndoOutcome::Unknown { .. } => "unknown",
            UndoOutcome::InProgress => "in_progress",
            UndoOutcome::NotReached => "not_reached",
        }
    }
}

/// One applied call of the run and what became of its undo.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UndoneCall {
    /// The undone call's tool.
    pub tool: String,
    /// Its call id, if it had one.
    pub call_id: Option<String>,
    /// Its record key.
    pub record: RecordKey,
    /// The record key of its undo (tool `<tool>.undo`), where the undo's outcome is kept.
    pub undo_record: Option<RecordKey>,
    /// What became of the undo.
    pub outcome: UndoOutcome,
}

/// What [`Dispatcher::undo_run`] did, call by call, newest first.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunUndo {
    /// The tenant.
    pub tenant: String,
    /// The run.
    pub run_id: String,
    /// The applied calls it undid or tried to, newest first.
    pub calls: Vec<UndoneCall>,
    /// Applied calls of writes that declare no undo, or of tools this dispatcher does not
    /// have (their effect stays), newest first.
    pub skipped: Vec<AccountEntry>,
}

impl RunUndo {
    /// Whether every applied call it was asked to undo is undone.
    pub fn is_complete(&self) -> bool {
        self.calls
            .iter()
            .all(|c| matches!(c.outcome, UndoOutcome::Undone { .. }))
    }

    /// The calls whose undo had this outcome name (`"undone"`, `"failed"`, ...).
    pub fn with_outcome<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a UndoneCall> {
        self.calls.iter().filter(move |c| c.outcome.name() == name)
    }
}

impl fmt::Display for RunUndo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undo of run `{}`:", self.run_id)?;
        for c in &self.calls {
            write!(f, " {} {}", c.tool, c.outcome.name())?;
            match &c.outcome {
                UndoOutcome::Failed { why } | UndoOutcome::Unknown { why } => {
                    write!(f, " ({why}; a person must settle it)")?
                }
                UndoOutcome::Undone { replayed: true } => write!(f, " (earlier)")?,
                _ => {}
            }
            write!(f, ";")?;
        }
        for s in &self.skipped {
            write!(f, " {} kept (no undo declared);", s.tool)?;
        }
        Ok(())
    }
}

/// Why a run could not be undone at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UndoRunError {
    /// The dispatcher keeps no run accounts, so it cannot tell which calls a run applied.
    #[error(
        "this dispatcher keeps no run accounts, so it cannot tell which calls run `{run_id}` applied: build it with `Dispatcher::with_run_accounts(retention)`"
    )]
    NoAccounts {
        /// The run.
        run_id: String,
    },
    /// The store could not be read.
    #[error("run `{run_id}`'s account or records could not be read: {error}")]
    Store {
        /// The run.
        run_id: String,
        /// What the store said.
        error: StoreError,
    },
}

impl Dispatcher {
    /// Undo `tenant`'s run `run_id`: its applied calls (as its account tells them; needs
    /// [`Dispatcher::with_run_accounts`]) of tools that declare an undo
    /// ([`ToolBuilder::undo`](crate::ToolBuilder::undo)), or of `options`' tools only, newest
    /// first, each at most once across crashes, take-overs and concurrent hosts: a second
    /// `undo_run` replays what the first undid. Stops at the first undo that did not
    /// succeed (the module docs say why); every call's outcome is in the [`RunUndo`], none
    /// dropped. The undos are calls of the run's account, as tool `<tool>.undo`.
    pub async fn undo_run(
        &self,
        tenant: &str,
        run_id: &str,
        options: &UndoOptions,
    ) -> Result<RunUndo, UndoRunError> {
        if self.accounts.is_none() {
            return Err(UndoRunError::NoAccounts {
                run_id: run_id.to_owned(),
            });
        }
        let store_error = |error| UndoRunError::Store {
            run_id: run_id.to_owned(),
            error,
        };
        let account = self
            .run_account(tenant, run_id)
            .await
            .map_err(store_error)?;
        let mut report = RunUndo {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            calls: Vec::new(),
            skipped: Vec::new(),
        };
        let mut stopped = false;
        for entry in applied_calls(&account.calls) {
            // An undo is not undone (`<tool>.undo`: its own entries of the account).
            if !options.includes(&entry.tool) || entry.tool.ends_with(UNDO_TOOL_SUFFIX) {
                continue;
            }
            let Some(tool) = self.registry.get(&entry.tool) else {
                // A tool this dispatcher does not have: its effect stays, and is said.
                report.skipped.push(entry.clone());
                continue;
            };
            let (Some(undo), Some(record)) = (&tool.undo, &entry.record) else {
                if tool.class.records() {
                    report.skipped.push(entry.clone());
                }
                continue;
            };
            let mut call = UndoneCall {
                tool: entry.tool.clone(),
                call_id: entry.call_id.clone(),
                record: record.clone(),
                undo_record: None,
                outcome: UndoOutcome::NotReached,
            };
            if !stopped {
                let applied = self
                    .applied_call(entry, record)
                    .await
                    .map_err(store_error)?;
                let (undo_record, outcome) = match applied {
                    Ok(applied) => {
                        let by = options.by.as_deref();
                        self.undo_one(tool, undo, applied, tenant, run_id, by).await
                    }
                    Err(why) => (None, UndoOutcome::Failed { why }),
                };
                call.undo_record = undo_record;
                call.outcome = outcome;
                stopped = !matches!(call.outcome, UndoOutcome::Undone { .. });
            }
            report.calls.push(call);
        }
        Ok(report)
    }

    /// The applied call as its record keeps it; `Err(why)` if the record cannot say.
    async fn applied_call(
        &self,
        entry: &AccountEntry,
        record: &RecordKey,
    ) -> Result<Result<AppliedCall, String>, StoreError> {
        let Some(stored) = self.store.get(record).await? else {
            return Ok(Err(format!(
                "the record of the `{}` call is gone (past its TTL): what it applied is not known",
                entry.tool
            )));
        };
        let output = match &stored.state {
            RecordState::Completed {
                outcome: Outcome::Success(text),
                ..
            } => serde_json::from_str(text).unwrap_or(Value::String(text.clone())),
            _ => {
                return Ok(Err(format!(
                    "the record of the `{}` call no longer says it applied",
                    entry.tool
                )));
            }
        };
        let arguments = stored
            .arguments
            .as_deref()
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or(Value::Null);
        let downstream_key = match IdempotencyKey::of_record(record) {
            Some(key) => key,
            None => return Ok(Err(format!("`{record}` is not a record key"))),
        };
        Ok(Ok(AppliedCall {
            tool: entry.tool.clone(),
            call_id: entry.call_id.clone(),
            arguments,
            output,
            downstream_key,
            record: record.clone(),
        }))
    }

    /// Undo one applied call as a recorded call of its own, through the claim and execute
    /// stages, and account for it in the run.
    async fn undo_one(
        &self,
        tool: &ToolDef,
        undo: &Undoer,
        applied: AppliedCall,
        tenant: &str,
        run_id: &str,
        by: Option<&str>,
    ) -> (Option<RecordKey>, UndoOutcome) {
        let def = undo_tool(tool, undo, applied.clone());
        let run = RunContext::new(tenant).with_run(run_id, 0);
        let material = KeyMaterial::Explicit {
            key: format!("idem:undo:{}", applied.record),
        };
        let (record_key, downstream) = self.keys(&def, &run, &material);
        let args = json!({"undoes": applied.record.as_str()});
        let canonical = canonical_json(&args);
        let call_id = format!(
            "undo:{}",
            applied
                .call_id
                .as_deref()
                .unwrap_or(super::key_hash(&applied.record))
        );
        let account_call = ToolCall::new(def.name.to_string(), args.clone()).with_call_id(call_id);
        let watch = Watch {
            observers: &self.observers,
            started: Instant::now(),
            tool: &def.name,
        };
        let keyed = KeyedCall {
            tool: &def,
            run: &run,
            call_id: account_call.call_id.as_deref(),
            args: Cow::Owned(args),
            record_key: record_key.clone(),
            downstream,
            fingerprint: Fingerprint::of_canonical(&canonical),
            source: Some(KeySource::Explicit),
            ttl: self.record_ttl(&def, None),
            approval: None,
        };
        let result = match self.claim(&keyed, canonical, &watch).await {
            Ok(Claimed::WonClaim(held)) => self.execute_held(&keyed, held, None, &watch).await,
            Ok(Claimed::Settled(dispatched)) => Ok(dispatched),
            Err(e) => Err(e),
        };
        let by = by.unwrap_or("the host").to_owned();
        let decided = super::case::CaseDecided {
            said: format!("undone at the word of {by}"),
            by,
            at: self
                .store
                .now()
                .await
                .unwrap_or_else(|_| idem_core::Timestamp::now()),
            decision: "undo_run".to_owned(),
        };
        self.account_as(
            &account_call,
            &run,
            Some(&record_key),
            &result,
            Some(decided),
            None,
        )
        .await;
        (Some(record_key), outcome_of(result))
    }
}

impl Dispatcher {
    /// The failure policy of [`ToolBuilder::on_failure_undo_run`]: a call of such a tool
    /// that failed for good undoes its run's applied calls, and its answer says so.
    ///
    /// [`ToolBuilder::on_failure_undo_run`]: crate::ToolBuilder::on_failure_undo_run
    pub(super) async fn undo_after_failure(
        &self,
        call: &ToolCall,
        run: &RunContext,
        result: Result<Dispatched, DispatchError>,
    ) -> Result<Dispatched, DispatchError> {
        let Err(DispatchError::ToolFailed {
            tool,
            error,
            attempts,
            deduplicated,
        }) = result
        else {
            return result;
        };
        let options = self
            .registry
            .get(&call.name)
            .and_then(|t| t.on_failure_undo.as_ref());
        let run_id = run.run_id.as_deref().or(run.account_as.as_deref());
        let (Some(options), Some(run_id), Some(_)) = (options, run_id, self.accounts) else {
            return Err(DispatchError::ToolFailed {
                tool,
                error,
                attempts,
                deduplicated,
            });
        };
        let failed = match &call.call_id {
            Some(id) => format!("the failure of `{}` [{id}]", call.name),
            None => format!("the failure of `{}`", call.name),
        };
        let options = options.clone().by(options.by.clone().unwrap_or(failed));
        let (said, details) = match self.undo_run(&run.tenant, run_id, &options).await {
            Ok(undone) => {
                let said = match undone.is_complete() {
                    true => format!(
                        "the run's applied calls were undone ({})",
                        undone
                            .calls
                            .iter()
                            .map(|c| c.tool.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    false => format!("the run's undo did not complete: {undone}"),
                };
                let details = json!({
                    "complete": undone.is_complete(),
                    "calls": undone.calls.iter().map(|c| json!({
                        "tool": c.tool,
                        "call_id": c.call_id,
                        "outcome": c.outcome.name(),
                    })).collect::<Vec<_>>(),
                });
                (said, details)
            }
            Err(e) => (
                format!("the run could not be undone: {e}"),
                json!({"complete": false, "error": e.to_string()}),
            ),
        };
        let mut all = match error.details() {
            Some(Value::Object(map)) => map.clone(),
            Some(other) => serde_json::Map::from_iter([("details".to_owned(), other.clone())]),
            None => serde_json::Map::new(),
        };
        all.insert("run_undo".to_owned(), details);
        let error = ToolError::new(error.kind(), format!("{}; {said}", error.message()))
            .with_details(Value::Object(all));
        Err(DispatchError::ToolFailed {
            tool,
            error,
            attempts,
            deduplicated,
        })
    }
}

/// The undo of `tool`'s applied call as a tool of its own: the undone tool's lease, retries
/// and TTL, class `idempotent_write` (a take-over runs it again under the same downstream
/// key, which the provider dedupes), and none of its checks (the undo is the host's act,
/// not the model's).
fn undo_tool(tool: &ToolDef, undo: &Undoer, applied: AppliedCall) -> ToolDef {
    let mut def = tool.clone();
    def.name = Cow::Owned(format!("{}{UNDO_TOOL_SUFFIX}", tool.name));
    def.class = ToolClass::IdempotentWrite;
    let undo = undo.clone();
    def.handler = Arc::new(move |ctx, _, _| {
        let (undo, applied) = (undo.clone(), applied.clone());
        Box::pin(async move {
            let record = applied.record.to_string();
            undo(ctx, applied).await?;
            Ok(json!({"undone": record}))
        })
    });
    def.natural_key = None;
    def.verify = None;
    def.secrets = Vec::new();
    def.authorize = Vec::new();
    def.approve_when = Vec::new();
    def.approvers_when = Vec::new();
    def.rules = Arc::default();
    def.has_precondition = false;
    def.compensate = None;
    def.undo = None;
    def.on_failure_undo = None;
    // An undo that fails or whose outcome is not known waits for a person, never silent.
    def.escalate = Some(crate::tool::Escalate::FailuresAndUnknown);
    def.contract = Arc::default();
    def.validator = Arc::default();
    def
}

/// What an undo's dispatch says of it.
fn outcome_of(result: Result<Dispatched, DispatchError>) -> UndoOutcome {
    match result {
        Ok(d) => UndoOutcome::Undone {
            replayed: d.deduplicated,
        },
        Err(DispatchError::OutcomeUnknown { reason, .. }) => UndoOutcome::Unknown { why: reason },
        // An undo that ended badly waits for a person (`undo_tool` escalates both).
        Err(DispatchError::Escalated { case, .. }) => match case.kind {
            super::case::EscalationKind::Failure => UndoOutcome::Failed {
                why: case.error.message().to_owned(),
            },
            _ => UndoOutcome::Unknown {
                why: case.error.message().to_owned(),
            },
        },
        Err(DispatchError::InProgress { .. }) => UndoOutcome::InProgress,
        Err(DispatchError::ToolFailed { error, .. }) => UndoOutcome::Failed {
            why: error.message().to_owned(),
        },
        Err(e) => UndoOutcome::Failed { why: e.to_string() },
    }
}

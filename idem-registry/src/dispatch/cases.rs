//! The case desk: where a person decides the calls sent to them (`escalate.rs`).
//!
//! A case is an Unknown record whose cause is [`ESCALATED`](idem::record::ESCALATED). A decision
//! settles the record at the fence the person was shown (`Store::settle_unknown`), so it lands
//! once, and only on the case as shown; it is then appended to the run's account, who and
//! what, and every door answers the call by it: run again (the record is gone, the next call
//! under the key runs the body), resolved (the person's outcome is replayed), or the run
//! undone (the call is answered as failed, saying so).

use std::time::Duration;

use idem_core::{
    IdempotencyKey, ListFilter, Outcome, RecordKey, RecordState, StateKind, Store, StoreError,
    Timestamp, ToolError,
};
use serde_json::Value;

use idem_core::store::decisions::{self, Action, Decision, LogError};

use super::Dispatcher;
use super::account::{AccountEntry, CallOutcome, DEFAULT_ACCOUNT_RETENTION};
use super::case::{CaseDecided, Escalation};
use super::undo_requests;
use crate::tool::UndoOptions;

/// How long a decided case's outcome replays when its record does not say: a day.
const DEFAULT_DECIDED_TTL: Duration = Duration::from_secs(24 * 3600);

/// A call waiting for a person's decision.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Case {
    /// Its record key (what a decision names).
    pub record: RecordKey,
    /// The fence the case is at: a decision lands only while the record is still there.
    pub fence: idem_core::Fence,
    /// The tenant it acted for.
    pub tenant: String,
    /// The tool.
    pub tool: String,
    /// Its arguments as recorded (secrets sealed).
    pub arguments: Option<Value>,
    /// Since when it waits (the store's clock).
    pub since: Timestamp,
    /// What the person is shown: the error, the run, what the run applied before it.
    pub escalation: Escalation,
}

impl Case {
    /// The case a record is, if it is one.
    pub fn of_record(record: &idem_core::Record) -> Option<Case> {
        let RecordState::Unknown { since, last_error } = &record.state else {
            return None;
        };
        Some(Case {
            record: record.key.clone(),
            fence: record.fence,
            tenant: record.tenant.clone(),
            tool: record.tool.clone(),
            arguments: record
                .arguments
                .as_deref()
                .and_then(|a| serde_json::from_str(a).ok()),
            since: *since,
            escalation: Escalation::of_recorded(last_error)?,
        })
    }
}

/// What a person decides of a case.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CaseDecision {
    /// Run the call again: the next call under its key runs the body, with the same
    /// downstream key.
    Retry,
    /// Say what happened: `Outcome::Success` (it applied, with this output) or
    /// `Outcome::Failure` (it did not); replayed to every call under its key.
    Resolve(Outcome),
    /// Undo the run's applied calls ([`Dispatcher::undo_run`]); the call is answered as
    /// failed, saying so. A desk without the tools ([`CaseDesk::over`]) asks for the undo,
    /// which the agent's dispatcher carries out ([`Dispatcher::undo_requested`]).
    UndoRun,
}

impl CaseDecision {
    /// Its name, as the account and the command line print it.
    pub fn name(&self) -> &'static str {
        match self {
            CaseDecision::Retry => "retry",
            CaseDecision::Resolve(_) => "resolved",
            CaseDecision::UndoRun => "undo_run",
        }
    }
}

/// Why a decision was not recorded; nothing changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaseError {
    /// No case under the key: never one, or decided already, or changed since it was shown.
    #[error(
        "no case waits under key {0} (decided already, or changed since it was shown): nothing changed; list the cases again"
    )]
    NotPending(RecordKey),
    /// Undoing the run needs the call's run, and the case has none.
    #[error("the case under key {0} has no run to undo: resolve it, or run it again")]
    NoRun(RecordKey),
    /// The outcome given cannot be replayed (a success that is not JSON).
    #[error("the outcome given for key {key} cannot be replayed: {reason}")]
    InvalidOutcome {
        /// The key.
        key: RecordKey,
        /// Why.
        reason: String,
    },
    /// The store failed; nothing is known to have changed.
    #[error("the store failed: {0}")]
    Store(#[from] StoreError),
    /// The case was decided, and the decision log could not take it.
    #[error(
        "the case under key {key} was decided, and the decision log could not take it: {error}"
    )]
    NotLogged {
        /// The key.
        key: RecordKey,
        /// Why the log refused.
        error: LogError,
    },
}

/// The one place a person decides the calls sent to them: it lists them and settles one as
/// it was shown. Opened by a dispatcher ([`Dispatcher::cases`]) it has the tools and undoes a
/// run itself; over a store alone ([`CaseDesk::over`], the command line and the inbox) it
/// asks for the undo, which the agent's dispatcher carries out.
///
/// ```
/// use idem::dispatch::CaseDesk;
/// use idem::store::memory::MemoryStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStore::new();
/// assert!(CaseDesk::over(&store).pending(None, 100).await.unwrap().is_empty());
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct CaseDesk<'a> {
    store: &'a dyn Store,
    dispatcher: Option<&'a Dispatcher>,
    /// The door the decisions come through, as the decision log names it.
    door: &'a str,
}

impl Dispatcher {
    /// The case desk over this dispatcher's store, with its tools.
    pub fn cases(&self) -> CaseDesk<'_> {
        CaseDesk {
            store: &*self.store,
            dispatcher: Some(self),
            door: decisions::DEFAULT_DOOR,
        }
    }
}

impl<'a> CaseDesk<'a> {
    /// A desk over `store` alone, without the agent's tools.
    pub fn over(store: &'a dyn Store) -> Self {
        CaseDesk {
            store,
            dispatcher: None,
            door: decisions::DEFAULT_DOOR,
        }
    }

    /// The desk with its decisions logged as made through `door` (`inbox`, `cli`, ...): every
    /// decision is appended to the store's decision log ([`idem_core::store::decisions`]).
    pub fn through(mut self, door: &'a str) -> Self {
        self.door = door;
        self
    }

    /// The cases waiting, oldest first, of `tenant` (`None`: every tenant's), at most `limit`.
    pub async fn pending(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Case>, StoreError> {
        let mut filter = ListFilter {
            state: Some(StateKind::Unknown),
            tenant: tenant.map(str::to_owned),
            limit: 500,
            after: None,
        };
        let mut cases = Vec::new();
        loop {
            let page = self.store.list(filter.clone()).await?;
            cases.extend(page.iter().filter_map(Case::of_record));
            match page.last() {
                Some(last) if page.len() == filter.limit && cases.len() < limit => {
                    filter.after = Some(idem_core::ListCursor::after(last));
                }
                _ => break,
            }
        }
        cases.truncate(limit);
        Ok(cases)
    }

    /// The case under `key`, if one waits there.
    pub async fn get(&self, key: &RecordKey) -> Result<Option<Case>, StoreError> {
        Ok(self
            .store
            .get(key)
            .await?
            .as_ref()
            .and_then(Case::of_record))
    }

    /// Decide `case` as it was shown, as `by`: it lands only if the case is still there at
    /// the fence shown. Returns what the account keeps of it.
    pub async fn decide(
        &self,
        case: &Case,
        by: &str,
        decision: CaseDecision,
    ) -> Result<CaseDecided, CaseError> {
        let key = &case.record;
        let ttl = match self.store.get(key).await? {
            Some(r) if Case::of_record(&r).is_some_and(|c| c.fence == case.fence) => {
                r.contract.as_ref().map_or(DEFAULT_DECIDED_TTL, |c| c.ttl)
            }
            _ => return Err(CaseError::NotPending(key.clone())),
        };
        let (outcome, said) = match &decision {
            CaseDecision::Retry => (None, "runs again when called under its key".to_owned()),
            CaseDecision::Resolve(outcome) => {
                if let Outcome::Success(text) = outcome
                    && let Err(e) = serde_json::from_str::<Value>(text)
                {
                    return Err(CaseError::InvalidOutcome {
                        key: key.clone(),
                        reason: format!("a success's output must be JSON: {e}"),
                    });
                }
                let said = match outcome {
                    Outcome::Success(_) => "resolved as applied".to_owned(),
                    Outcome::Failure(e) => format!("resolved as failed: {}", e.message()),
                };
                (Some(outcome.clone()), said)
            }
            CaseDecision::UndoRun => {
                let said = self.undo_run(case, by).await?;
                let message = format!("{}; {said}", case.escalation.error.message());
                (Some(Outcome::Failure(ToolError::terminal(message))), said)
            }
        };
        if !self
            .store
            .settle_unknown(key, case.fence, outcome.as_ref(), ttl)
            .await?
        {
            return Err(CaseError::NotPending(key.clone()));
        }
        let decided = CaseDecided {
            by: by.to_owned(),
            at: self.store.now().await.unwrap_or_else(|_| Timestamp::now()),
            decision: decision.name().to_owned(),
            said,
        };
        tracing::info!(key = %key, tool = %case.tool, by, decision = decision.name(), "a case was decided");
        self.account(case, &decided, outcome.as_ref()).await;
        let action = match decision {
            CaseDecision::Retry => Action::Retry,
            CaseDecision::Resolve(_) => Action::Resolve,
            CaseDecision::UndoRun => Action::UndoRun,
        };
        let logged = Decision::new(by, action, self.door, &case.tenant)
            .about(&case.tool, key.as_str())
            .detail(&decided.said);
        if let Err(error) = decisions::append(self.store, &logged).await {
            return Err(CaseError::NotLogged {
                key: key.clone(),
                error,
            });
        }
        Ok(decided)
    }

    /// Undo the case's run, or ask for it; what was done, in words.
    async fn undo_run(&self, case: &Case, by: &str) -> Result<String, CaseError> {
        let Some(run_id) = case.escalation.run_id.as_deref() else {
            return Err(CaseError::NoRun(case.record.clone()));
        };
        let Some(dispatcher) = self.dispatcher else {
            undo_requests::request(self.store, &case.tenant, run_id, by).await?;
            return Ok(format!(
                "{by} asked for run `{run_id}` to be undone: the agent's dispatcher undoes it"
            ));
        };
        Ok(
            match dispatcher
                .undo_run(&case.tenant, run_id, &UndoOptions::all().by(by))
                .await
            {
                Ok(undone) if undone.is_complete() => {
                    format!("{by} had run `{run_id}` undone: {undone}")
                }
                Ok(undone) => format!(
                    "{by} asked for run `{run_id}` to be undone, and it did not complete: {undone}"
                ),
                Err(e) => {
                    format!("{by} asked for run `{run_id}` to be undone, and it could not be: {e}")
                }
            },
        )
    }

    /// Append the decision to the call's run's account (a store that cannot take it is
    /// logged: the decision stands).
    async fn account(&self, case: &Case, decided: &CaseDecided, outcome: Option<&Outcome>) {
        let Some(run_id) = case.escalation.run_id.as_deref() else {
            return;
        };
        let outcome = match outcome {
            None => CallOutcome::Escalated {
                since: case.since,
                why: case.escalation.summary(),
            },
            Some(Outcome::Success(_)) => CallOutcome::Applied,
            Some(Outcome::Failure(e)) => CallOutcome::Refused {
                why: e.message().to_owned(),
            },
        };
        let entry = AccountEntry {
            at: decided.at,
            tool: case.tool.clone(),
            class: None,
            call_id: case.escalation.call_id.clone(),
            step: None,
            key: IdempotencyKey::of_record(&case.record).map(|k| k.as_str().to_owned()),
            record: Some(case.record.clone()),
            attempts: Some(0),
            decided: Some(decided.clone()),
            undo: None,
            limits: Vec::new(),
            granted: None,
            outcome,
        };
        let retention = self
            .dispatcher
            .and_then(|d| d.accounts)
            .unwrap_or(DEFAULT_ACCOUNT_RETENTION);
        super::account::append_entry(self.store, &case.tenant, run_id, &entry, retention).await;
    }
}

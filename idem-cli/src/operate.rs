//! What an operator does to a store, shared by the command line and the inbox: each
//! operation reads what it will change first, and fails naming the store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use idem_core::Fingerprint;
use idem_core::IdempotencyKey;
use idem_core::ListFilter;
use idem_core::Outcome;
use idem_core::PurgeFilter;
use idem_core::Record;
use idem_core::RecordKey;
use idem_core::RecordState;
use idem_core::StateKind;
use idem_core::Store;
use idem_core::Timestamp;
use idem_core::store::ListCursor;
use idem_core::store::approvals::{self, ApprovalFilter, PendingApproval};
use idem_core::store::decisions::{self, Action, Decision};
use idem_registry::Approver;
use idem_registry::approval::ApprovalDesk;
use serde_json::{Value, json};

use crate::exit::{Exit, Failure};
use crate::present::{approval_status, state_name};

/// How long a resolved record replays when its contract does not say (a dispatcher's
/// default TTL).
const DEFAULT_RESOLVED_TTL: Duration = Duration::from_secs(24 * 3600);

/// The longest reason a denial gives.
const MAX_REASON_CHARS: usize = 2000;

/// A denial's reason, told to the agent's model: said, and not too long.
pub fn denial_reason(reason: &str) -> Result<(), Failure> {
    if reason.trim().is_empty() {
        return Err(Failure::new(
            Exit::Usage,
            "a denial needs a reason: the agent's model is told it",
        ));
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "a denial's reason is told to the model: keep it under {MAX_REASON_CHARS} characters"
            ),
        ));
    }
    Ok(())
}

/// Records are read this many at a time.
const PAGE: usize = 500;

/// A store, and its name for messages.
#[derive(Clone)]
pub struct Operator {
    pub store: Arc<dyn Store>,
    pub name: String,
    /// What to say when a listing finds nothing: a Redis prefix is never checked (Redis
    /// creates nothing under it), so a mistyped one lists an empty store.
    empty: Option<String>,
    /// The door the decisions come through, as the store's decision log names it: `cli`,
    /// or `inbox` for the inbox's.
    pub door: &'static str,
}

/// Which records a listing shows.
#[derive(Debug, Clone)]
pub struct RecordQuery {
    /// The states, each listed in turn (`None`: InProgress and Unknown).
    pub states: Vec<Option<StateKind>>,
    pub tenant: Option<String>,
    pub tool: Option<String>,
    /// Only records created at least this long ago (the store's clock).
    pub older_than: Option<Duration>,
    pub limit: usize,
}

impl Operator {
    pub async fn open(spec: &str, prefix: &str) -> Result<Self, Failure> {
        let (store, name) = crate::store::open_existing(spec, prefix).await?;
        let empty = spec.starts_with("redis").then(|| {
            format!(
                "(nothing under the key prefix `{prefix}`: if your dispatchers' RedisStore was given another, name it with --prefix)"
            )
        });
        Ok(Operator {
            store,
            name,
            empty,
            door: "cli",
        })
    }

    /// Say, on standard error, why a listing may have found nothing.
    pub fn found_nothing(&self) {
        if let Some(note) = &self.empty {
            eprintln!("{note}");
        }
    }

    fn failed(&self, e: idem_core::StoreError) -> Failure {
        Failure::store(&self.name, e)
    }

    pub async fn now(&self) -> Result<Timestamp, Failure> {
        self.store.now().await.map_err(|e| self.failed(e))
    }

    /// The records `query` admits, oldest first within each state; `seen` is told how many
    /// were read so far.
    pub async fn records(
        &self,
        query: &RecordQuery,
        seen: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Record>, Failure> {
        let now = self.now().await?;
        let mut found = Vec::new();
        let mut read = 0;
        for state in &query.states {
            let mut filter = ListFilter {
                state: *state,
                tenant: query.tenant.clone(),
                limit: PAGE,
                after: None,
            };
            loop {
                let page = self
                    .store
                    .list(filter.clone())
                    .await
                    .map_err(|e| self.failed(e))?;
                read += page.len();
                seen(read);
                let full = page.len() == PAGE;
                let last = page.last().map(ListCursor::after);
                for record in page {
                    if admits(query, &record, now) {
                        found.push(record);
                        if found.len() >= query.limit {
                            return Ok(found);
                        }
                    }
                }
                match last {
                    Some(last) if full => filter.after = Some(last),
                    _ => break,
                }
            }
        }
        Ok(found)
    }

    /// The record under `key`.
    pub async fn record(&self, key: &str) -> Result<Record, Failure> {
        let key = RecordKey::from_stored(key);
        self.store
            .get(&key)
            .await
            .map_err(|e| self.failed(e))?
            .ok_or_else(|| {
                Failure::new(
                    Exit::NotFound,
                    format!(
                        "{}: no record under key {key} (`idem records list --state all` lists the keys)",
                        self.name
                    ),
                )
            })
    }

    /// Whether `record` may be settled: not a completed one, and an in-progress one (whose
    /// worker may be alive) only with `force`. Asked before a confirmation, and again by
    /// [`settle`](Self::settle).
    pub fn settleable(&self, record: &Record, force: bool) -> Result<(), Failure> {
        match &record.state {
            RecordState::Completed { .. } => Err(completed_refusal(&self.name, &record.key)),
            RecordState::InProgress { lease_until } if !force => Err(Failure::new(
                Exit::Refused,
                format!(
                    "{}: the record under key {} is in progress: a worker may still be running the call (its lease ends at {}); once the lease ends, the caller's retry or a recovery pass turns it Unknown. Pass --force only if you know its worker is gone",
                    self.name,
                    record.key,
                    lease_until.to_rfc3339()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Settle `record`, as it was shown, with `outcome` (`None`: forget it, so that the call
    /// runs again when called). An Unknown record is settled only if it is still Unknown at
    /// the fence shown: one a verify hook settled meanwhile, or that a new call claimed, is
    /// left alone. An in-progress one may have a live worker: it is settled (fencing the
    /// worker out) only with `force`.
    pub async fn settle(
        &self,
        record: &Record,
        outcome: Option<&Outcome>,
        ttl: Option<Duration>,
        force: bool,
        by: &str,
    ) -> Result<(), Failure> {
        let ttl = ttl
            .or(record.contract.as_ref().map(|c| c.ttl))
            .unwrap_or(DEFAULT_RESOLVED_TTL);
        self.settleable(record, force)?;
        let key = &record.key;
        let settled = match &record.state {
            RecordState::Completed { .. } => false,
            RecordState::Unknown { .. } => self
                .store
                .settle_unknown(key, record.fence, outcome, ttl)
                .await
                .map_err(|e| self.failed(e))?,
            // Fenced as a holder's own completion or release: a record claimed again since it
            // was shown (another fence) is left alone.
            RecordState::InProgress { .. } => match outcome {
                Some(outcome) => match self.store.complete(key, record.fence, outcome, ttl).await {
                    Ok(()) => true,
                    Err(idem_core::StoreError::Fenced { .. }) => false,
                    Err(e) => return Err(self.failed(e)),
                },
                None => self
                    .store
                    .release(key, record.fence)
                    .await
                    .map_err(|e| self.failed(e))?,
            },
        };
        if settled {
            let (action, detail) = match outcome {
                Some(Outcome::Success(_)) => (Action::Resolve, "resolved as applied".to_owned()),
                Some(Outcome::Failure(e)) => (
                    Action::Resolve,
                    format!("resolved as failed: {}", e.message()),
                ),
                None => (
                    Action::Release,
                    "released: the call runs again when called".into(),
                ),
            };
            let decision = Decision::new(by, action, self.door, &record.tenant)
                .about(&record.tool, key.as_str())
                .detail(detail);
            return decisions::append(&*self.store, &decision)
                .await
                .map(|_| ())
                .map_err(|e| {
                    Failure::new(
                        Exit::Store,
                        format!(
                            "{}: the record under key {key} was settled, and the decision log could not take it: {e}",
                            self.name
                        ),
                    )
                });
        }
        let now = match self.store.get(key).await {
            Ok(Some(r)) => format!("it is now {}", state_name(r.state.kind())),
            Ok(None) => "it is gone".into(),
            Err(_) => "it could not be read again".into(),
        };
        Err(Failure::new(
            Exit::Refused,
            format!(
                "{}: the record under key {key} changed since it was shown ({now}): nothing changed; look again with `idem records show {key}`",
                self.name
            ),
        ))
    }

    /// Delete expired records a batch at a time; `deleted` is told the count so far. A
    /// failure says how many were deleted before it.
    pub async fn purge(
        &self,
        filter: &PurgeFilter,
        deleted: &(dyn Fn(usize) + Sync),
    ) -> Result<usize, Failure> {
        let mut total = 0;
        loop {
            let n = self.store.purge_expired(filter).await.map_err(|e| {
                let mut failure = self.failed(e);
                failure.message = format!(
                    "{} (stopped after deleting {total} expired record(s); run purge again once the store answers)",
                    failure.message
                );
                failure
            })?;
            total += n;
            deleted(total);
            if n < filter.limit || n == 0 {
                return Ok(total);
            }
        }
    }

    /// Delete the approval requests that expired more than `retention` ago (their
    /// decisions with them).
    pub async fn purge_approvals(&self, retention: Duration) -> Result<usize, Failure> {
        approvals::purge(&*self.store, retention, usize::MAX)
            .await
            .map_err(|e| self.failed(e))
    }

    /// The approvals `filter` admits.
    pub async fn approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<PendingApproval>, Failure> {
        ApprovalDesk::over(&*self.store)
            .through(self.door)
            .pending(filter)
            .await
            .map_err(|e| self.failed(e))
    }

    /// Of `entries`, those still awaiting a decision (their call has not run meanwhile).
    pub async fn not_yet_run(
        &self,
        entries: Vec<PendingApproval>,
    ) -> Result<Vec<PendingApproval>, Failure> {
        ApprovalDesk::over(&*self.store)
            .through(self.door)
            .awaiting(entries)
            .await
            .map_err(|e| self.failed(e))
    }

    /// The approval entry of the call `key` names: its record key (what `idem approvals
    /// list` prints) or its downstream key (what the agent's refusal names). The two never
    /// share text, so either is found without saying which it is.
    pub async fn approval(&self, key: &str) -> Result<PendingApproval, Failure> {
        let desk = ApprovalDesk::over(&*self.store).through(self.door);
        let record = RecordKey::from_stored(key);
        let mut found = desk.find(&record).await.map_err(|e| self.failed(e))?;
        if found.is_none() {
            let downstream = IdempotencyKey::new(key);
            found = desk.find(&downstream).await.map_err(|e| self.failed(e))?;
        }
        found.ok_or_else(|| {
            Failure::new(
                Exit::NotFound,
                format!(
                    "{}: no approval was requested under key {key}: give the record key `idem approvals list --all` prints, or the downstream key (`idem-...`) the agent's refusal names",
                    self.name
                ),
            )
        })
    }

    /// The request under `key`, if it still awaits a decision, and the store's time: a
    /// decided or expired one is refused before anyone is asked to confirm.
    pub async fn undecided(&self, key: &str) -> Result<(PendingApproval, Timestamp), Failure> {
        let entry = self.approval(key).await?;
        let now = self.now().await?;
        self.refuse_decided(&entry, now)?;
        Ok((entry, now))
    }

    /// A decided or expired request is refused before anyone is asked to confirm (the
    /// store refuses it too, if it changes in between).
    fn refuse_decided(&self, entry: &PendingApproval, now: Timestamp) -> Result<(), Failure> {
        let status = approval_status(entry, now);
        let refused = |why: String| Failure::new(Exit::Refused, format!("{}: {why}", self.name));
        match (status, &entry.decision) {
            ("expired", _) => Err(refused(format!(
                "the approval request under key {} expired at {}; the agent must call again",
                entry.key,
                entry.expires_at.to_rfc3339()
            ))),
            (_, Some(d)) => Err(refused(format!(
                "the approval under key {} was already decided ({status}) by {} at {}",
                entry.key,
                d.by,
                d.at.to_rfc3339()
            ))),
            _ => Ok(()),
        }
    }

    /// Approve the request under `entry`'s key, if its arguments are still the ones whose
    /// fingerprint was `shown`.
    pub async fn approve(
        &self,
        entry: &PendingApproval,
        shown: Fingerprint,
        approver: &Approver,
        edited: Option<&Value>,
    ) -> Result<PendingApproval, Failure> {
        ApprovalDesk::over(&*self.store)
            .through(self.door)
            .approve(&entry.key, approver, edited, Some(shown))
            .await
            .map_err(|e| Failure::decision(&self.name, e))
    }

    /// Deny the request under `entry`'s key, if its arguments are still the ones whose
    /// fingerprint was `shown`.
    pub async fn deny(
        &self,
        entry: &PendingApproval,
        shown: Fingerprint,
        by: &str,
        reason: &str,
    ) -> Result<PendingApproval, Failure> {
        denial_reason(reason)?;
        ApprovalDesk::over(&*self.store)
            .through(self.door)
            .deny(&entry.key, by, reason, Some(shown))
            .await
            .map_err(|e| Failure::decision(&self.name, e))
    }

    /// Counts over every record (of `tenant`), and the pending approvals.
    pub async fn stats(
        &self,
        tenant: Option<&str>,
        seen: &(dyn Fn(usize) + Sync),
    ) -> Result<Stats, Failure> {
        let query = RecordQuery {
            states: vec![
                Some(StateKind::InProgress),
                Some(StateKind::Unknown),
                Some(StateKind::Completed),
            ],
            tenant: tenant.map(str::to_owned),
            tool: None,
            older_than: None,
            limit: usize::MAX,
        };
        let records = self.records(&query, seen).await?;
        let pending = self
            .approvals(&ApprovalFilter {
                tenant: tenant.map(str::to_owned),
                limit: usize::MAX,
                ..ApprovalFilter::default()
            })
            .await?;
        let mut stats = Stats {
            pending_approvals: pending.len(),
            ..Stats::default()
        };
        for record in &records {
            let state = state_name(record.state.kind());
            *stats.by_state.entry(state).or_default() += 1;
            *stats
                .by_tool
                .entry(record.tool.clone())
                .or_default()
                .entry(state)
                .or_default() += 1;
            *stats
                .by_tenant
                .entry(record.tenant.clone())
                .or_default()
                .entry(state)
                .or_default() += 1;
            if let RecordState::Unknown { since, .. } = record.state
                && stats
                    .oldest_unknown
                    .as_ref()
                    .is_none_or(|(_, at)| since < *at)
            {
                stats.oldest_unknown = Some((record.clone(), since));
            }
        }
        Ok(stats)
    }
}

/// Why a completed record is not released.
fn completed_refusal(store: &str, key: &RecordKey) -> Failure {
    Failure::new(
        Exit::Refused,
        format!(
            "{store}: the record under key {key} is already completed: nothing changed (every call with its key replays its outcome until it expires; `idem records purge` deletes expired ones)"
        ),
    )
}

fn admits(query: &RecordQuery, record: &Record, now: Timestamp) -> bool {
    query.tool.as_ref().is_none_or(|t| *t == record.tool)
        && query
            .older_than
            .is_none_or(|age| crate::present::at_least(record.created_at, age, now))
}

/// Counts by state, tool and tenant.
#[derive(Debug, Default)]
pub struct Stats {
    pub by_state: BTreeMap<&'static str, usize>,
    pub by_tool: BTreeMap<String, BTreeMap<&'static str, usize>>,
    pub by_tenant: BTreeMap<String, BTreeMap<&'static str, usize>>,
    pub oldest_unknown: Option<(Record, Timestamp)>,
    pub pending_approvals: usize,
}

/// The states, in the order they are shown.
pub const STATES: [&str; 3] = [
    StateKind::ALL[0].as_str(),
    StateKind::ALL[1].as_str(),
    StateKind::ALL[2].as_str(),
];

impl Stats {
    /// The documented JSON shape of `idem stats --json`.
    pub fn to_json(&self) -> Value {
        let counts = |m: &BTreeMap<&'static str, usize>| {
            let mut o = serde_json::Map::new();
            for s in STATES {
                o.insert(s.into(), json!(m.get(s).copied().unwrap_or(0)));
            }
            Value::Object(o)
        };
        json!({
            "records": counts(&self.by_state),
            "by_tool": self.by_tool.iter().map(|(k, v)| (k.clone(), counts(v))).collect::<serde_json::Map<_, _>>(),
            "by_tenant": self.by_tenant.iter().map(|(k, v)| (k.clone(), counts(v))).collect::<serde_json::Map<_, _>>(),
            "oldest_unknown": self.oldest_unknown.as_ref().map(|(r, since)| json!({
                "key": r.key.as_str(),
                "tool": r.tool,
                "tenant": r.tenant,
                "since": since.to_rfc3339(),
            })),
            "pending_approvals": self.pending_approvals,
        })
    }
}

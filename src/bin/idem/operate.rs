//! What an operator does to a store, shared by the command line and the inbox: each
//! operation reads what it will change first, and fails naming the store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use idem::dispatch::{approve_stored, deny_stored, pending_stored};
use idem::store::ListCursor;
use idem::store::approvals::{self, ApprovalFilter, PendingApproval, Verdict};
use idem::{
    Approver, Fingerprint, ListFilter, Outcome, PurgeFilter, Record, RecordKey, RecordState,
    StateKind, Store, Timestamp,
};
use serde_json::{Value, json};

use crate::exit::{Exit, Failure};

/// How long a resolved record replays when its contract does not say (a dispatcher's
/// default TTL).
const DEFAULT_RESOLVED_TTL: Duration = Duration::from_secs(24 * 3600);

/// Records are read this many at a time.
const PAGE: usize = 500;

/// A store, and its name for messages.
#[derive(Clone)]
pub struct Operator {
    pub store: Arc<dyn Store>,
    pub name: String,
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
        Ok(Operator { store, name })
    }

    fn failed(&self, e: idem::StoreError) -> Failure {
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
            RecordState::InProgress { .. } => match outcome {
                Some(outcome) => self
                    .store
                    .resolve(key, outcome, ttl)
                    .await
                    .map(|_| true)
                    .map_err(|e| self.failed(e))?,
                None => self
                    .store
                    .force_release(key)
                    .await
                    .map_err(|e| self.failed(e))?,
            },
        };
        if settled {
            return Ok(());
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

    /// The approvals `filter` admits.
    pub async fn approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<PendingApproval>, Failure> {
        pending_stored(&*self.store, filter)
            .await
            .map_err(|e| self.failed(e))
    }

    /// The approval entry under `key`.
    pub async fn approval(&self, key: &str) -> Result<PendingApproval, Failure> {
        let key = RecordKey::from_stored(key);
        approvals::get(&*self.store, &key)
            .await
            .map_err(|e| self.failed(e))?
            .ok_or_else(|| {
                Failure::new(
                    Exit::NotFound,
                    format!(
                        "{}: no approval was requested under key {key} (`idem approvals list --all` lists them)",
                        self.name
                    ),
                )
            })
    }

    /// The request under the key has the arguments the person deciding was shown.
    pub fn check_shown(
        &self,
        entry: &PendingApproval,
        shown: Option<Fingerprint>,
    ) -> Result<(), Failure> {
        if shown == Some(entry.fingerprint) {
            return Ok(());
        }
        Err(Failure::new(
            Exit::Refused,
            format!(
                "{}: the call pending under key {} has other arguments than the ones shown: nothing was decided; look at it again",
                self.name, entry.key
            ),
        ))
    }

    /// A decided or expired request is refused before anyone is asked to confirm (the
    /// store refuses it too, if it changes in between).
    pub fn refuse_decided(&self, entry: &PendingApproval, now: Timestamp) -> Result<(), Failure> {
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

    pub async fn approve(
        &self,
        entry: &PendingApproval,
        approver: &Approver,
        edited: Option<&Value>,
    ) -> Result<PendingApproval, Failure> {
        approve_stored(
            &*self.store,
            &entry.key,
            approver,
            edited,
            Some(entry.fingerprint),
        )
        .await
        .map_err(|e| Failure::decision(&self.name, e))
    }

    pub async fn deny(
        &self,
        entry: &PendingApproval,
        by: &str,
        reason: &str,
    ) -> Result<PendingApproval, Failure> {
        if reason.trim().is_empty() {
            return Err(Failure::new(
                Exit::Usage,
                "a denial needs a reason: the agent's model is told it",
            ));
        }
        // Deny the request that was shown, not another made under the key since.
        let now = self.approval(entry.key.as_str()).await?;
        self.check_shown(&now, Some(entry.fingerprint))?;
        deny_stored(&*self.store, &entry.key, by, reason)
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
        && query.older_than.is_none_or(|age| {
            let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            now.as_millis()
                .saturating_sub(record.created_at.as_millis())
                >= age
        })
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
pub const STATES: [&str; 3] = ["in_progress", "unknown", "completed"];

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

pub fn state_name(kind: StateKind) -> &'static str {
    match kind {
        StateKind::InProgress => "in_progress",
        StateKind::Completed => "completed",
        StateKind::Unknown => "unknown",
    }
}

/// The documented JSON shape of a record.
pub fn record_json(record: &Record) -> Value {
    let arguments = record
        .arguments
        .as_deref()
        .map(|text| serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!(text)));
    let (lease_until, expires_at, since, last_error, outcome) = match &record.state {
        RecordState::InProgress { lease_until } => {
            (Some(lease_until.to_rfc3339()), None, None, None, None)
        }
        RecordState::Completed {
            outcome,
            expires_at,
        } => (
            None,
            Some(expires_at.to_rfc3339()),
            None,
            None,
            Some(outcome_json(outcome)),
        ),
        RecordState::Unknown { since, last_error } => (
            None,
            None,
            Some(since.to_rfc3339()),
            Some(last_error.clone()),
            None,
        ),
    };
    json!({
        "key": record.key.as_str(),
        "tool": record.tool,
        "tenant": record.tenant,
        "state": state_name(record.state.kind()),
        "fence": record.fence,
        "created_at": record.created_at.to_rfc3339(),
        "updated_at": record.updated_at.to_rfc3339(),
        "lease_until": lease_until,
        "expires_at": expires_at,
        "unknown_since": since,
        "last_error": last_error,
        "outcome": outcome,
        "arguments": arguments,
        "class": record.contract.as_ref().map(|c| c.class.to_string()),
        "version": record.contract.as_ref().map(|c| c.version.clone()),
        "steps": record.steps.iter().map(|s| s.step.clone()).collect::<Vec<_>>(),
    })
}

fn outcome_json(outcome: &Outcome) -> Value {
    match outcome {
        Outcome::Success(text) => json!({
            "success": serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!(text)),
        }),
        Outcome::Failure(e) => json!({
            "failure": {"kind": e.kind().to_string(), "message": e.message(), "details": e.details()},
        }),
    }
}

/// What became of an approval request at `now`.
pub fn approval_status(entry: &PendingApproval, now: Timestamp) -> &'static str {
    match &entry.decision {
        _ if !entry.stands(now) => "expired",
        None => "pending",
        Some(d) => match d.verdict {
            Verdict::Approved { .. } => "approved",
            Verdict::Denied { .. } => "denied",
        },
    }
}

/// The documented JSON shape of an approval request.
pub fn approval_json(entry: &PendingApproval, now: Timestamp) -> Value {
    let decision = entry.decision.as_ref().map(|d| {
        let (verdict, reason, arguments) = match &d.verdict {
            Verdict::Approved {
                arguments,
                fingerprint,
                ..
            } => {
                let edited = (*fingerprint != entry.fingerprint).then(|| arguments.clone());
                ("approved", None, edited)
            }
            Verdict::Denied { reason } => ("denied", Some(reason.clone()), None),
        };
        json!({
            "verdict": verdict,
            "by": d.by,
            "at": d.at.to_rfc3339(),
            "reason": reason,
            "edited_arguments": arguments,
        })
    });
    json!({
        "key": entry.key.as_str(),
        "status": approval_status(entry, now),
        "namespace": entry.namespace,
        "tenant": entry.tenant,
        "tool": entry.tool,
        "downstream_key": entry.downstream_key,
        "fingerprint": entry.fingerprint.to_hex(),
        "arguments": entry.arguments,
        "requested_at": entry.requested_at.to_rfc3339(),
        "expires_at": entry.expires_at.to_rfc3339(),
        "decision": decision,
    })
}

/// How long from `now` until `at`, or since, for people: `3m 20s`, `2h 5m`, `4d 1h`.
pub fn span(from: Timestamp, to: Timestamp) -> String {
    let secs = to.as_millis().saturating_sub(from.as_millis()) / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// A duration as written on the command line: a number and `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!(
            "`{text}` is not a duration: write a number and a unit, e.g. `90s`, `15m`, `2h`, `7d`"
        )
    })?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "`{other}` in `{text}` is not a unit: use s, m, h or d (e.g. `7d`)"
            ));
        }
    };
    Ok(Duration::from_secs(n.saturating_mul(unit)))
}

/// Edited arguments as a person wrote them: a JSON object, as a call's are.
pub fn edited_arguments(text: &str, source: &str) -> Result<Value, Failure> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Failure::new(Exit::Usage, format!("{source}: not JSON: {e}")))?;
    if !value.is_object() {
        return Err(Failure::new(
            Exit::Usage,
            format!("{source}: edited arguments are a JSON object, as the call's are"),
        ));
    }
    Ok(value)
}

/// How every seal of a secret argument begins.
const SEAL_PREFIX: &str = "[secret hmac-sha256:";

/// Whether arguments hold a secret's seal: they are approved as called, never edited.
pub fn sealed(arguments: &Value) -> bool {
    match arguments {
        Value::String(s) => s.starts_with(SEAL_PREFIX),
        Value::Array(items) => items.iter().any(sealed),
        Value::Object(fields) => fields.values().any(sealed),
        _ => false,
    }
}

/// Whether a character is invisible or changes how the text around it reads: control
/// characters, bidirectional overrides and isolates, zero-width and other format characters.
fn deceptive(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(
            c,
            '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// `text` as a person deciding should see it: every [`deceptive`] character written as its
/// JSON escape (`\u202e`), which inside a JSON string still means the same character, so
/// that what is shown is what is decided.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(deceptive) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 12);
    for c in text.chars() {
        if deceptive(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A fingerprint given back by a form, as shown.
pub fn fingerprint_of_form(text: &str) -> Option<Fingerprint> {
    Fingerprint::from_hex(text.trim())
}

/// Whether a record holds arguments an operator may read (they are sealed where secret).
pub fn arguments_text(record: &Record) -> String {
    match &record.arguments {
        Some(text) => serde_json::from_str::<Value>(text)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| text.clone()),
        None => "(not kept)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_a_number_and_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration(" 7d "), Ok(Duration::from_secs(7 * 86_400)));
        assert!(parse_duration("7").unwrap_err().contains("not a unit"));
        assert!(parse_duration("7w").unwrap_err().contains("`w`"));
        assert!(parse_duration("d").unwrap_err().contains("not a duration"));
        assert!(
            parse_duration("-1h")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    #[test]
    fn what_could_read_as_other_text_is_shown_by_its_code() {
        assert_eq!(visible("cus_99"), "cus_99");
        assert_eq!(
            visible("pay \u{202e}001$ \u{202c}"),
            "pay \\u202e001$ \\u202c"
        );
        assert_eq!(visible("a\u{200b}b\u{1b}[31m"), "a\\u200bb\\u001b[31m");
        assert_eq!(visible("tag\u{e0041}"), "tag\\udb40\\udc41");
        assert_eq!(visible("two\nlines"), "two\nlines");
        // Inside JSON text the escape is the same character again.
        let shown = visible("{\"to\":\"\u{202e}moc.live@x\"}");
        let back: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["to"], "\u{202e}moc.live@x");
    }

    #[test]
    fn spans_read_as_people_say_them() {
        let at = |s: u64| Timestamp(s * 1000);
        assert_eq!(span(at(0), at(42)), "42s");
        assert_eq!(span(at(0), at(200)), "3m 20s");
        assert_eq!(span(at(0), at(7500)), "2h 5m");
        assert_eq!(span(at(0), at(4 * 86_400 + 3600)), "4d 1h");
        assert_eq!(span(at(10), at(0)), "0s");
    }
}

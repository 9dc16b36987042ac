//! The inbox's cases: calls a tool sent to a person (`escalate`), each shown with its error,
//! its run and what the run applied before it, and decided as the page showed it (the
//! record's fence): run it again, say what happened, or have its run undone. The same
//! decision `idem cases` makes, on the same desk.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::Response;
use idem_core::{Fence, RecordKey, Timestamp};
use idem_registry::dispatch::{Case, CaseDecision, CaseDesk, CaseError};
use serde::Deserialize;

use super::Inbox;
use super::decide::{Posted, admit, answer, given};
use super::html::{esc, pretty};
use crate::exit::{Exit, Failure};
use crate::present;

/// Where a case's decision is posted.
pub(super) const PATH: &str = "/case";

/// The table of cases, oldest first (at most `rows`).
pub(super) fn table(body: &mut String, cases: &[Case], now: Timestamp, csrf: &str, rows: usize) {
    body.push_str("<h2>Sent to a person</h2>");
    if cases.is_empty() {
        body.push_str("<p class=empty id=no-cases>No call waits for a person's decision.</p>");
        return;
    }
    body.push_str("<table id=cases><tr><th>Tool</th><th>Tenant and run</th><th>Since</th><th>What happened</th><th>Applied before it</th><th>Arguments</th><th>Decide</th></tr>");
    for case in cases.iter().take(rows) {
        row(body, case, now, csrf);
    }
    body.push_str("</table>");
}

fn row(body: &mut String, case: &Case, now: Timestamp, csrf: &str) {
    let e = &case.escalation;
    let key = esc(case.record.as_str());
    let hidden = format!(
        "<input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=fence value=\"{}\">",
        case.fence
    );
    let applied: Vec<String> = e.applied_before.iter().map(|a| esc(&a.tool)).collect();
    let undo = match &e.run_id {
        Some(_) => format!(
            "<form method=post action=\"{PATH}\">{hidden}<input type=hidden name=decision value=undo_run><button type=submit class=deny title=\"Undo the run's applied calls, newest first; the agent's dispatcher carries it out\">Undo the run</button></form>"
        ),
        None => String::new(),
    };
    let details = e
        .error
        .details()
        .map(|d| format!("<pre>{}</pre>", esc(&pretty(d))))
        .unwrap_or_default();
    let _ = write!(
        body,
        "<tr data-key=\"{key}\"><td><b>{tool}</b><br><code>{key}</code></td><td>{tenant}<br><span class=muted>run {run}</span></td><td>{since} ago</td><td class=status>{what}{details}</td><td>{applied}</td><td><pre>{args}</pre></td><td>\
<form method=post action=\"{PATH}\">{hidden}<input type=hidden name=decision value=retry><button type=submit class=approve title=\"The agent's next call under its key runs the tool again\">Run again</button></form>\
<form method=post action=\"{PATH}\">{hidden}<input type=hidden name=decision value=resolve><input type=text name=value placeholder='it applied: result as JSON' aria-label=\"result as JSON\"><input type=text name=failure placeholder=\"or: it failed, why\" aria-label=\"failure message\"><button type=submit>Resolve</button></form>{undo}</td></tr>",
        tool = esc(&case.tool),
        tenant = esc(&case.tenant),
        run = esc(e.run_id.as_deref().unwrap_or("(none)")),
        since = present::span(case.since, now),
        what = esc(&e.summary()),
        applied = applied.join(", "),
        args = esc(&case.arguments.as_ref().map(pretty).unwrap_or_default()),
    );
}

#[derive(Deserialize)]
pub(super) struct CaseForm {
    /// Absent from a script's form (a bearer caller needs none).
    #[serde(default)]
    csrf: String,
    key: String,
    /// The fence of the case as the page showed it.
    fence: Fence,
    /// `retry`, `resolve` or `undo_run`.
    decision: String,
    value: Option<String>,
    failure: Option<String>,
}

impl Posted for CaseForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(super) async fn decide(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<CaseForm>, FormRejection>,
) -> Response {
    let (form, caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let decided = async {
        let op = &inbox.op;
        let decision = decision_of(&form)?;
        let desk = CaseDesk::over(&*op.store).through(op.door);
        let key = RecordKey::from_stored(&form.key);
        let changed = || {
            Failure::new(
                Exit::Refused,
                format!(
                    "{}: the case under key {} was decided or changed since the page showed it: nothing changed; reload the inbox",
                    op.name, form.key
                ),
            )
        };
        let case = desk
            .get(&key)
            .await
            .map_err(|e| Failure::store(&op.name, e))?
            .filter(|c| c.fence == form.fence)
            .ok_or_else(changed)?;
        let decided = desk
            .decide(&case, who, decision)
            .await
            .map_err(|e| match e {
                CaseError::Store(e) => Failure::store(&op.name, e),
                CaseError::NotPending(_) => changed(),
                e @ CaseError::NotLogged { .. } => Failure::new(Exit::Store, format!("{}: {e}", op.name)),
                other => Failure::new(Exit::Refused, format!("{}: {other}", op.name)),
            })?;
        tracing::info!(key = %case.record, by = %who, decision = %decided.decision, "a case was decided in the inbox");
        Ok(format!(
            "Decided {} for {} by {who}: {}.",
            case.tool, case.tenant, decided.said
        ))
    }
    .await;
    answer(&inbox, &caller, decided)
}

fn decision_of(form: &CaseForm) -> Result<CaseDecision, Failure> {
    match form.decision.as_str() {
        "retry" => Ok(CaseDecision::Retry),
        "undo_run" => Ok(CaseDecision::UndoRun),
        "resolve" => Ok(CaseDecision::Resolve(present::outcome_of(
            given(&form.value),
            given(&form.failure),
            "the result",
            "\"text\"",
        )?)),
        other => Err(Failure::new(
            Exit::Usage,
            format!("`{other}` is not a decision on a case: retry, resolve or undo_run"),
        )),
    }
}

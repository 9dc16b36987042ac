//! The inbox's pages: server-rendered HTML, every text escaped.

use std::fmt::Write as _;

use axum::response::Html;
use idem_core::RecordState;
use idem_core::store::approvals::{ApprovalFilter, PendingApproval, Verdict};

use super::Inbox;

/// How many decided and expired requests the page shows, latest first.
const SHOWN_DECIDED: usize = 50;

/// How many pending requests, and how many Unknown records, the page shows (oldest first).
const SHOWN_ROWS: usize = 200;

/// A line under a table that shows only the first [`SHOWN_ROWS`] of `total`.
fn more(body: &mut String, total: usize, command: &str) {
    if total > SHOWN_ROWS {
        let _ = write!(
            body,
            "<p class=muted>{} more not shown: <code>{command}</code> lists them all.</p>",
            total - SHOWN_ROWS
        );
    }
}
pub(super) use super::html::{
    esc, layout, login_body, login_body_next, page_error, pretty, pretty_text, refused_login,
};
use crate::exit::Failure;
use crate::operate::RecordQuery;
use crate::present;

pub(super) async fn login_page() -> Html<String> {
    Html(login_body(None))
}

pub(super) async fn render(
    inbox: &Inbox,
    who: &str,
    csrf: &str,
    done: Option<&str>,
) -> Result<String, Failure> {
    let op = &inbox.op;
    let now = op.now().await?;
    // Every entry (a page's worth of decisions is the latest few), and the open records
    // only: a page load never reads the completed ones, the bulk of a store.
    let all = op
        .approvals(&ApprovalFilter {
            pending_only: false,
            limit: usize::MAX,
            ..ApprovalFilter::default()
        })
        .await?;
    let pending = op
        .not_yet_run(all.iter().filter(|e| e.is_pending(now)).cloned().collect())
        .await?;
    let open = op
        .records(
            &RecordQuery {
                states: vec![None],
                tenant: None,
                tool: None,
                older_than: None,
                limit: usize::MAX,
            },
            &|_| {},
        )
        .await?;
    // A call sent to a person is listed as a case, not as an unknown outcome.
    let cases: Vec<idem_registry::dispatch::Case> = open
        .iter()
        .filter_map(idem_registry::dispatch::Case::of_record)
        .collect();
    let unknown: Vec<&idem_core::Record> = open
        .iter()
        .filter(|r| matches!(r.state, RecordState::Unknown { .. }))
        .filter(|r| !cases.iter().any(|c| c.record == r.key))
        .collect();
    let csrf = esc(csrf);
    let mut body = String::new();
    let _ = write!(
        body,
        "<header><h1>idem inbox</h1><span class=stat id=stat-pending><b>{}</b> pending approvals</span><span class=stat id=stat-cases><b>{}</b> sent to a person</span><span class=stat id=stat-unknown><b>{}</b> unknown</span><span class=stat><b>{}</b> in progress</span><span class=muted>{} · you are <b>{}</b></span><form method=post action=\"/logout\" style=\"margin-left:auto\"><input type=hidden name=csrf value=\"{csrf}\"><button type=submit>Sign out</button></form></header><main>",
        pending.len(),
        cases.len(),
        unknown.len(),
        open.len() - unknown.len() - cases.len(),
        esc(&op.name),
        esc(who)
    );
    if let Some(done) = done {
        let _ = write!(
            body,
            "<div class=notice role=status id=notice>{}</div>",
            esc(done)
        );
    }
    let oldest = unknown.iter().filter_map(|r| match r.state {
        RecordState::Unknown { since, .. } => Some((r, since)),
        _ => None,
    });
    if let Some((r, since)) = oldest.min_by_key(|(_, since)| *since) {
        let _ = write!(
            body,
            "<p class=muted>Oldest unknown outcome: {} for {}, since {} ({} ago).</p>",
            esc(&r.tool),
            esc(&r.tenant),
            esc(&since.to_rfc3339()),
            present::span(since, now)
        );
    }
    body.push_str("<h2>Waiting for approval</h2>");
    if inbox.signing.is_none() {
        body.push_str("<p class=error>No signing key: this inbox can deny but not approve (start it with IDEM_APPROVAL_KEY).</p>");
    }
    if pending.is_empty() {
        body.push_str("<p class=empty id=no-pending>Nothing is waiting for a decision.</p>");
    } else {
        body.push_str("<table id=pending><tr><th>Tool</th><th>Tenant</th><th>Requested</th><th>Expires in</th><th>Arguments</th><th>Decide</th></tr>");
        for e in pending.iter().take(SHOWN_ROWS) {
            pending_row(&mut body, e, now, &csrf, inbox.signing.is_some());
        }
        body.push_str("</table>");
        super::batch::form(&mut body, &csrf, inbox.signing.is_some());
        more(&mut body, pending.len(), "idem approvals list");
    }
    super::cases::table(&mut body, &cases, now, &csrf, SHOWN_ROWS);
    let grants = idem_registry::approval::ApprovalDesk::over(&*op.store)
        .grants(None)
        .await
        .map_err(|e| {
            crate::exit::Failure::new(crate::exit::Exit::Store, format!("{}: {e}", op.name))
        })?;
    super::grants::table(&mut body, &grants, now, &csrf, SHOWN_ROWS);
    more(&mut body, cases.len(), "idem cases list");
    body.push_str("<h2>Unknown outcomes</h2>");
    if unknown.is_empty() {
        body.push_str("<p class=empty id=no-unknown>No call has an unknown outcome.</p>");
    } else {
        body.push_str("<table id=unknown><tr><th>Tool</th><th>Tenant</th><th>Since</th><th>Why</th><th>Arguments</th><th>Settle</th></tr>");
        for r in unknown.iter().take(SHOWN_ROWS) {
            let (since, why) = match &r.state {
                RecordState::Unknown { since, last_error } => (*since, last_error.as_str()),
                _ => (r.updated_at, ""),
            };
            let key = esc(r.key.as_str());
            let _ = write!(
                body,
                "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td>{} ago</td><td>{}</td><td><pre>{}</pre></td><td>\
<form method=post action=\"/resolve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=fence value=\"{fence}\"><input type=text name=value placeholder='result as JSON, e.g. {{\"sent\": true}}' aria-label=\"result as JSON\"><input type=text name=failure placeholder=\"or: failure message\" aria-label=\"failure message\"><button type=submit>Resolve</button></form>\
<form method=post action=\"/release\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=fence value=\"{fence}\"><button type=submit title=\"Only if the effect did not happen: the call runs again when called\">Release (run again)</button></form></td></tr>",
                esc(&r.tool),
                esc(&r.tenant),
                present::span(since, now),
                esc(why),
                esc(&pretty_text(r.arguments.as_deref())),
                fence = r.fence,
            );
        }
        body.push_str("</table>");
        more(
            &mut body,
            unknown.len(),
            "idem records list --state unknown",
        );
    }
    // The latest decisions first, as many as a page can show.
    let decided: Vec<&PendingApproval> = all
        .iter()
        .rev()
        .filter(|e| !e.is_pending(now))
        .take(SHOWN_DECIDED)
        .collect();
    if !decided.is_empty() {
        body.push_str("<h2>Decided and expired</h2><table id=decided><tr><th>Tool</th><th>Tenant</th><th>Status</th><th>By</th><th>Arguments</th></tr>");
        for e in decided {
            let (by, why) = match &e.decision {
                Some(d) => match &d.verdict {
                    Verdict::Denied { reason } => (d.by.as_str(), format!(": {reason}")),
                    Verdict::Approved { .. } => (d.by.as_str(), String::new()),
                },
                None => ("", String::new()),
            };
            let key = esc(e.key.as_str());
            let _ = write!(
                body,
                "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td class=status>{}{}</td><td>{}</td><td><pre>{}</pre></td></tr>",
                esc(&e.tool),
                esc(&e.tenant),
                present::approval_status(e, now),
                esc(&why),
                esc(by),
                esc(&pretty(&e.arguments)),
            );
        }
        body.push_str("</table>");
    }
    body.push_str("</main>");
    Ok(layout("idem inbox", &body))
}

pub(super) fn pending_row(
    body: &mut String,
    e: &PendingApproval,
    now: idem_core::Timestamp,
    csrf: &str,
    can_approve: bool,
) {
    let key = esc(e.key.as_str());
    let shown = esc(&e.fingerprint.to_hex());
    let args = esc(&pretty(&e.arguments));
    let mut approve = String::new();
    if let Some(line) = present::approvers_line(e) {
        let _ = write!(
            approve,
            "<p class=approvers data-approvers=\"{}\" data-awaiting=\"{}\">{}</p>",
            e.approvers,
            e.awaiting(),
            esc(&line)
        );
    }
    if can_approve {
        let _ = write!(
            approve,
            "<form method=post action=\"/approve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><button type=submit class=approve>Approve</button></form>"
        );
        // Sealed arguments are approved as called: an approver sees only their seals; and
        // the approvers of a call that needs several all approve it as called.
        if idem_registry::approval::ApprovalDesk::editable(e) && e.approvers <= 1 {
            let _ = write!(
                approve,
                "<details><summary>Approve edited arguments</summary><form method=post action=\"/approve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><textarea name=edited rows=5 aria-label=\"edited arguments\">{args}</textarea><button type=submit>Approve these arguments</button></form></details>"
            );
        }
    }
    let _ = write!(
        body,
        "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td>{}<br><span class=muted>{} ago</span></td><td>{}</td><td><pre>{args}</pre></td><td>{}{approve}\
<form method=post action=\"/deny\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><input type=text name=reason required placeholder=\"reason (the agent is told)\" aria-label=\"reason\"><button type=submit class=deny>Deny</button></form></td></tr>",
        esc(&e.tool),
        esc(&e.tenant),
        esc(&e.requested_at.to_rfc3339()),
        present::span(e.requested_at, now),
        present::span(now, e.expires_at),
        super::batch::pick(e.key.as_str(), &e.fingerprint.to_hex(), &e.tool, &e.tenant),
    );
}

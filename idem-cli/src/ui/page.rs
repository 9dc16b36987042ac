//! The inbox's pages: server-rendered HTML, every text escaped.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use idem_core::RecordState;
use idem_core::store::approvals::{ApprovalFilter, PendingApproval, Verdict};
use serde_json::Value;

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
use crate::exit::Failure;
use crate::operate::RecordQuery;
use crate::present;

/// `text` for HTML, with every character that could make it read as other text shown by
/// its code ([`present::visible`]).
pub(super) fn esc(text: &str) -> String {
    let text = present::visible(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encoding for a message in a redirect's query.
pub(super) fn encode(text: &str) -> String {
    text.bytes().fold(String::new(), |mut s, b| {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            s.push(b as char);
        } else {
            let _ = write!(s, "%{b:02X}");
        }
        s
    })
}

pub(super) const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2433;background:#f6f7f9}
header{background:#1d2433;color:#fff;padding:14px 28px;display:flex;gap:28px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0} header .stat b{font-size:18px} header .muted{color:#b8bfcc}
main{padding:8px 28px 40px;max-width:1200px}
h2{font-size:16px;margin:28px 0 10px}
table{border-collapse:collapse;width:100%;background:#fff;box-shadow:0 1px 2px #0002}
th,td{text-align:left;vertical-align:top;padding:9px 10px;border-bottom:1px solid #e4e6eb}
th{font-size:12px;text-transform:uppercase;color:#5b6475;background:#fafbfc;white-space:nowrap}
td:nth-child(2),td:nth-child(3):not(.status),#decided td:nth-child(4){white-space:nowrap}
#pending td:last-child,#unknown td:last-child{min-width:15em}
pre{margin:0;font:13px/1.35 ui-monospace,monospace;white-space:pre-wrap;max-width:380px;min-width:30ch}
code{font:12px ui-monospace,monospace;color:#5b6475;word-break:break-all} td code{display:block;width:32ch}
form{margin:0 0 6px} input[type=text],textarea{font:13px ui-monospace,monospace;width:100%;box-sizing:border-box}
button{font:inherit;padding:4px 12px;border-radius:4px;border:1px solid #8890a0;background:#fff;cursor:pointer}
button.approve{background:#1f7a3f;color:#fff;border-color:#1f7a3f} button.deny{background:#a8231c;color:#fff;border-color:#a8231c}
.notice{background:#e6f4ea;border:1px solid #1f7a3f;padding:10px 14px;margin:16px 0}
.error{background:#fbe9e7;border:1px solid #a8231c;padding:10px 14px;margin:16px 0}
.muted{color:#5b6475} .empty{color:#5b6475;padding:12px;background:#fff}
";

pub(super) fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    )
}

pub(super) fn page_error(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<main><div class=error role=alert id=error>{}</div><p><a href=\"/\">Back to the inbox</a></p></main>",
        esc(message)
    );
    (status, Html(layout("idem: refused", &body))).into_response()
}

pub(super) fn login_body(message: Option<&str>) -> String {
    login_body_next(message, "")
}

/// The sign-in page, returning to `next` (a link's page) once signed in.
pub(super) fn login_body_next(message: Option<&str>, next: &str) -> String {
    let note = message
        .map(|m| format!("<div class=error role=alert id=error>{}</div>", esc(m)))
        .unwrap_or_default();
    let back = match next {
        "" => String::new(),
        next => format!("<input type=hidden name=next value=\"{}\">", esc(next)),
    };
    layout(
        "idem: sign in",
        &format!(
            "<main><h2>idem approval inbox</h2>{note}<form method=post action=\"/login\">{back}<p><label>Access token <input type=password name=token autocomplete=off autofocus></label></p><p><button type=submit>Open the inbox</button></p></form></main>"
        ),
    )
}

pub(super) fn refused_login() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(login_body(Some("The inbox needs its access token."))),
    )
        .into_response()
}

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
        more(&mut body, pending.len(), "idem approvals list");
    }
    super::cases::table(&mut body, &cases, now, &csrf, SHOWN_ROWS);
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
    if can_approve {
        let _ = write!(
            approve,
            "<form method=post action=\"/approve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><button type=submit class=approve>Approve</button></form>"
        );
        // Sealed arguments are approved as called: an approver sees only their seals.
        if idem_registry::dispatch::ApprovalDesk::editable(e) {
            let _ = write!(
                approve,
                "<details><summary>Approve edited arguments</summary><form method=post action=\"/approve\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><textarea name=edited rows=5 aria-label=\"edited arguments\">{args}</textarea><button type=submit>Approve these arguments</button></form></details>"
            );
        }
    }
    let _ = write!(
        body,
        "<tr data-key=\"{key}\"><td><b>{}</b><br><code>{key}</code></td><td>{}</td><td>{}<br><span class=muted>{} ago</span></td><td>{}</td><td><pre>{args}</pre></td><td>{approve}\
<form method=post action=\"/deny\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=key value=\"{key}\"><input type=hidden name=shown value=\"{shown}\"><input type=text name=reason required placeholder=\"reason (the agent is told)\" aria-label=\"reason\"><button type=submit class=deny>Deny</button></form></td></tr>",
        esc(&e.tool),
        esc(&e.tenant),
        esc(&e.requested_at.to_rfc3339()),
        present::span(e.requested_at, now),
        present::span(now, e.expires_at),
    );
}

pub(super) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

pub(super) fn pretty_text(text: Option<&str>) -> String {
    match text {
        Some(text) => serde_json::from_str::<Value>(text)
            .map(|v| pretty(&v))
            .unwrap_or_else(|_| text.to_owned()),
        None => "(not kept)".into(),
    }
}

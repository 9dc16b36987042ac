//! The inbox's standing grants: each grant that stands (a tool's calls for a tenant, a run or
//! a session, within bounds, until it expires), with who granted it, and a Revoke button.
//! The same revocation `idem grants revoke` makes, on the same desk.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::Response;
use idem_core::Timestamp;
use idem_registry::approval::{ApprovalDesk, Grant, GrantError};
use serde::Deserialize;

use super::Inbox;
use super::decide::{Posted, admit, answer};
use super::html::esc;
use crate::exit::{Exit, Failure};
use crate::present;

/// Where a revocation is posted.
pub(super) const PATH: &str = "/grant/revoke";

/// The table of standing grants (at most `rows`).
pub(super) fn table(body: &mut String, grants: &[Grant], now: Timestamp, csrf: &str, rows: usize) {
    body.push_str("<h2>Standing grants</h2>");
    let standing: Vec<&Grant> = grants.iter().filter(|g| g.stands(now)).collect();
    if standing.is_empty() {
        body.push_str("<p class=empty id=no-grants>No standing grant: every call that needs approval asks (grant with <code>idem grants add</code>).</p>");
        return;
    }
    body.push_str("<table id=grants><tr><th>Tool</th><th>Tenant and scope</th><th>Within</th><th>Granted by</th><th>Expires in</th><th>Revoke</th></tr>");
    for g in standing.iter().take(rows) {
        let bounds: Vec<String> = g.bounds.iter().map(ToString::to_string).collect();
        let within = match bounds.is_empty() {
            true => "any arguments".to_owned(),
            false => bounds.join("; "),
        };
        let id = esc(&g.id);
        let _ = write!(
            body,
            "<tr data-grant=\"{id}\"><td><b>{tool}</b><br><code>{id}</code></td><td>{tenant}<br><span class=muted>{scope}</span></td><td class=bounds>{within}</td><td>{by}<br><span class=muted>{at}</span></td><td>{left}</td><td>\
<form method=post action=\"{PATH}\"><input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=id value=\"{id}\"><button type=submit class=deny>Revoke</button></form></td></tr>",
            tool = esc(&g.tool),
            tenant = esc(&g.tenant),
            scope = esc(&g.scope.to_string()),
            within = esc(&within),
            by = esc(&g.by),
            at = esc(&g.granted_at.to_rfc3339()),
            left = present::span(now, g.expires_at),
        );
    }
    body.push_str("</table>");
}

#[derive(Deserialize)]
pub(super) struct RevokeForm {
    /// Absent from a script's form (a bearer caller needs none).
    #[serde(default)]
    csrf: String,
    id: String,
}

impl Posted for RevokeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /grant/revoke`: the grant lets nothing through from now on.
pub(super) async fn revoke(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<RevokeForm>, FormRejection>,
) -> Response {
    let (form, caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let op = &inbox.op;
    let revoked = ApprovalDesk::over(&*op.store)
        .through(op.door)
        .revoke(&form.id, who)
        .await
        .map_err(|e| {
            let code = match &e {
                GrantError::NotFound(_) => Exit::NotFound,
                GrantError::AlreadyRevoked { .. } => Exit::Refused,
                GrantError::Store(_) | GrantError::NotLogged { .. } => Exit::Store,
                _ => Exit::Failed,
            };
            Failure::new(code, format!("{}: {e}", op.name))
        })
        .map(|g| {
            tracing::info!(grant = %g.id, by = %who, "a grant was revoked in the inbox");
            format!("Revoked {} by {who}: it lets nothing through.", g.summary())
        });
    answer(&inbox, &caller, revoked)
}

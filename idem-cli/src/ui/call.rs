//! The page of one pending call, as an MCP client's approval link names it
//! (`idem_registry::approval::ApprovalLink`): shown only as the link was issued (signed with the
//! inbox's approval key, unexpired, for the tenant and the arguments pending under its key),
//! and decided by the signed-in person with the same forms as the inbox's list.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use idem_registry::ApprovalKeys;
use idem_registry::approval::{ApprovalLink, LinkRefused};

use super::Inbox;
use super::page::{esc, layout, login_body_next, page_error, pending_row};
use super::session::Caller;

/// Where a link's page lives; a sign-in may return only here.
pub(super) const PATH: &str = "/approval";

/// `GET /approval?...`: the call a link names, with its decision forms.
pub(super) async fn approval_page(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let Some(caller) = inbox.auth.caller(&headers) else {
        let back = format!("{PATH}?{query}");
        let body = login_body_next(Some("Sign in to decide this call."), &back);
        return (StatusCode::UNAUTHORIZED, Html(body)).into_response();
    };
    let Some(key) = &inbox.signing else {
        return page_error(
            StatusCode::CONFLICT,
            "this inbox has no approval key (IDEM_APPROVAL_KEY), so it can check no approval link: start it with the key the MCP server signs its links with",
        );
    };
    let op = &inbox.op;
    let now = match op.now().await {
        Ok(now) => now,
        Err(e) => return page_error(StatusCode::SERVICE_UNAVAILABLE, &e.message),
    };
    let link = match ApprovalLink::verify(&query, &ApprovalKeys::new([key.clone()]), now) {
        Ok(link) => link,
        Err(refused) => {
            tracing::warn!(%refused, "an approval link was refused");
            let status = match refused {
                LinkRefused::Expired => StatusCode::GONE,
                LinkRefused::Malformed(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::FORBIDDEN,
            };
            return page_error(status, &refused.to_string());
        }
    };
    let entry = match op.approval(&link.record_key).await {
        Ok(entry) => entry,
        Err(e) => return page_error(StatusCode::NOT_FOUND, &e.message),
    };
    if entry.tenant != link.tenant {
        return page_error(
            StatusCode::FORBIDDEN,
            "this approval link names a call of another tenant than the one pending under its key: nothing is shown",
        );
    }
    if entry.fingerprint != link.fingerprint {
        return page_error(
            StatusCode::CONFLICT,
            "the call pending under this link's key now has other arguments than the ones the link was issued for: nothing is shown; ask the agent to call again for a new link",
        );
    }
    let csrf = match &caller {
        Caller::Session(session, _) => inbox.auth.csrf_of(session),
        Caller::Bearer(_) => String::new(),
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<header><h1>idem: one call to decide</h1><span class=muted>{} · you are <b>{}</b></span></header><main>",
        esc(&op.name),
        esc(caller.who())
    );
    match &entry.decision {
        Some(decision) => {
            let _ = write!(
                body,
                "<p class=notice role=status id=decided>This call was already {} by {} at {}.</p>",
                crate::present::approval_status(&entry, now),
                esc(&decision.by),
                esc(&decision.at.to_rfc3339())
            );
        }
        None if !entry.is_pending(now) => {
            body.push_str("<p class=error role=alert id=expired>This request expired before anyone decided it: the agent must call again.</p>");
        }
        None => {
            body.push_str("<table id=pending><tr><th>Tool</th><th>Tenant</th><th>Requested</th><th>Expires in</th><th>Arguments</th><th>Decide</th></tr>");
            pending_row(&mut body, &entry, now, &esc(&csrf), inbox.signing.is_some());
            body.push_str("</table>");
        }
    }
    body.push_str("<p><a href=\"/\">The whole inbox</a></p></main>");
    Html(layout("idem: decide a call", &body)).into_response()
}

/// Where a sign-in returns: a link's page, else the inbox (never another site).
pub(super) fn after_sign_in(next: &str) -> &str {
    let safe = next.starts_with(&format!("{PATH}?"))
        && !next.contains("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control);
    if safe { next } else { "/" }
}

#[cfg(test)]
mod tests {
    use super::after_sign_in;

    #[test]
    fn a_sign_in_returns_only_to_a_links_page() {
        for (next, to) in [
            ("/approval?tenant=a&key=b", "/approval?tenant=a&key=b"),
            ("", "/"),
            ("/", "/"),
            ("https://evil.example/approval?x", "/"),
            ("//evil.example/approval?x", "/"),
            ("/approval?x=//evil.example", "/"),
            ("/approval?x\\y", "/"),
            ("/approval", "/"),
            ("/approval?a\nb", "/"),
        ] {
            assert_eq!(after_sign_in(next), to, "{next:?}");
        }
    }
}

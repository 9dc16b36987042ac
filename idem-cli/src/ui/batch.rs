//! Several pending calls decided at once from the inbox: each row's checkbox carries the
//! fingerprint of the arguments that row showed, and each call is decided on it, so a call
//! that changed since the page was drawn is refused alone while the others are decided.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::Inbox;
use super::decide::{Posted, admit, answer, shown_of};
use super::html::esc;
use crate::exit::{Exit, Failure};

/// Where the batch form posts.
pub(super) const PATH: &str = "/batch";

/// The name of a row's checkbox: this prefix and the call's record key; its value is the
/// fingerprint of the arguments the row showed.
const PICK: &str = "pick:";

/// The checkbox of one pending row, bound to the batch form below the table.
pub(super) fn pick(key: &str, shown: &str, tool: &str, tenant: &str) -> String {
    format!(
        "<label class=pick><input type=checkbox form=batch name=\"{PICK}{}\" value=\"{}\" aria-label=\"select {} for {}\"> select</label>",
        esc(key),
        esc(shown),
        esc(tool),
        esc(tenant)
    )
}

/// The batch form, after the pending table: approve (with a signing key) or deny, with a
/// reason, every selected call.
pub(super) fn form(body: &mut String, csrf: &str, can_approve: bool) {
    let _ = write!(
        body,
        "<form id=batch method=post action=\"{PATH}\" class=batch><input type=hidden name=csrf value=\"{csrf}\">"
    );
    if can_approve {
        body.push_str(
            "<button type=submit name=verdict value=approve class=approve-selected>Approve selected</button>",
        );
    }
    body.push_str("<input type=text name=reason placeholder=\"reason, to deny the selected (the agent is told)\" aria-label=\"reason for the selected\"><button type=submit name=verdict value=deny class=deny-selected>Deny selected</button></form>");
}

/// The batch form's fields: the anti-forgery token, the verdict, a reason, and one
/// `pick:<key>` per selected row.
#[derive(Deserialize)]
#[serde(transparent)]
pub(super) struct BatchForm(BTreeMap<String, String>);

impl Posted for BatchForm {
    fn csrf(&self) -> &str {
        self.0.get("csrf").map_or("", String::as_str)
    }
}

pub(super) async fn decide(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<BatchForm>, FormRejection>,
) -> Response {
    let (BatchForm(fields), caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let decided = async {
        let op = &inbox.op;
        let picked: Vec<(&str, &str)> = fields
            .iter()
            .filter_map(|(name, shown)| Some((name.strip_prefix(PICK)?, shown.as_str())))
            .collect();
        if picked.is_empty() {
            return Err(Failure::new(
                Exit::Usage,
                "no call was selected: tick the calls to decide, then approve or deny them",
            ));
        }
        let approve = match fields.get("verdict").map(String::as_str) {
            Some("approve") => true,
            Some("deny") => false,
            _ => {
                return Err(Failure::new(
                    Exit::Usage,
                    "the form says neither approve nor deny: nothing was decided",
                ));
            }
        };
        let reason = fields.get("reason").map_or("", |r| r.trim());
        let approver = if approve {
            Some(inbox.approver(&caller).ok_or_else(|| {
                Failure::new(
                    Exit::Usage,
                    "this inbox has no signing key (IDEM_APPROVAL_KEY): it cannot approve",
                )
            })?)
        } else {
            crate::operate::denial_reason(reason)?;
            None
        };
        let verb = if approve { "Approved" } else { "Denied" };
        let (mut done, mut refused) = (Vec::new(), Vec::new());
        for (key, shown) in &picked {
            let one = async {
                let shown = shown_of(op, key, shown)?;
                let (entry, _) = op.undecided(key).await?;
                match &approver {
                    Some(approver) => op.approve(&entry, shown, approver, None).await,
                    None => op.deny(&entry, shown, who, reason).await,
                }
            }
            .await;
            match one {
                Ok(decided) => {
                    tracing::info!(key = %decided.key, by = %who, "{} in the inbox (a batch)", verb.to_lowercase());
                    done.push(format!("{} for {}", decided.tool, decided.tenant));
                }
                Err(failure) if failure.decided => {
                    done.push(format!("key {key} (not in the decision log: {})", failure.message));
                }
                Err(failure) => refused.push(format!("key {key}: {}", failure.message)),
            }
        }
        let mut message = format!(
            "{verb} {} of {} selected by {who}",
            done.len(),
            picked.len()
        );
        if !done.is_empty() {
            let _ = write!(message, ": {}", done.join(", "));
        }
        if !approve && !done.is_empty() {
            let _ = write!(message, " ({reason})");
        }
        if !refused.is_empty() {
            let _ = write!(
                message,
                ". Not {}: {}",
                verb.to_lowercase(),
                refused.join("; ")
            );
        }
        Ok(message)
    }
    .await;
    answer(&inbox, &caller, decided)
}

//! The inbox's decisions: each form admitted (session first, then the form, its
//! anti-forgery token and origin), then the same operation the command line makes, on what
//! the page showed (the arguments' fingerprint, the record's fence), recorded with the
//! inbox's identity.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use idem_core::Fence;
use idem_core::Fingerprint;
use idem_core::RecordState;
use serde::Deserialize;

use super::Inbox;
use super::html::{encode, page_error};
use super::session::Caller;
use crate::exit::{Exit, Failure};
use crate::present;

/// A form of the inbox: it carries the anti-forgery token.
pub(super) trait Posted {
    fn csrf(&self) -> &str;
}

/// The form, if the request may be answered: signed in first (an unauthenticated request
/// learns nothing of the form's fields), then a well-formed form, with this session's
/// anti-forgery token, from this origin.
pub(super) fn admit<T: Posted>(
    inbox: &Inbox,
    headers: &HeaderMap,
    form: Result<Form<T>, FormRejection>,
) -> Result<(T, Caller), Box<Response>> {
    let Some(caller) = inbox.auth.caller(headers) else {
        return Err(Box::new(super::html::refused_login()));
    };
    let Form(form) = form.map_err(|e| {
        Box::new(page_error(
            StatusCode::BAD_REQUEST,
            &format!("the form is incomplete: {e}"),
        ))
    })?;
    inbox.auth.check_post(headers, &caller, form.csrf())?;
    Ok((form, caller))
}

pub(super) fn failed(f: Failure) -> Response {
    let status = match f.code {
        Exit::NotFound => StatusCode::NOT_FOUND,
        Exit::Refused => StatusCode::CONFLICT,
        Exit::Usage => StatusCode::BAD_REQUEST,
        Exit::Store => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    page_error(status, &f.message)
}

pub(super) fn done(inbox: &Inbox, caller: &Caller, message: String) -> Response {
    let tag = inbox.auth.notice_tag(caller, &message);
    Redirect::to(&format!("/?done={}&tag={tag}", encode(&message))).into_response()
}

pub(super) fn answer(inbox: &Inbox, caller: &Caller, outcome: Result<String, Failure>) -> Response {
    match outcome {
        Ok(message) => done(inbox, caller, message),
        Err(f) => failed(f),
    }
}

/// A form's text field, if it was filled in.
pub(super) fn given(field: &Option<String>) -> Option<&str> {
    field.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// The fingerprint of the arguments the page showed, as its form gives it back.
pub(super) fn shown_of(
    op: &crate::operate::Operator,
    key: &str,
    shown: &str,
) -> Result<Fingerprint, Failure> {
    present::fingerprint_of_form(shown).ok_or_else(|| {
        Failure::new(
            Exit::Refused,
            format!(
                "{}: the form for key {key} does not say which arguments it showed: nothing was decided; reload the inbox",
                op.name
            ),
        )
    })
}

#[derive(Deserialize)]
pub(super) struct ApproveForm {
    /// Absent from a script's form (a bearer caller needs none).
    #[serde(default)]
    csrf: String,
    key: String,
    shown: String,
    edited: Option<String>,
}

impl Posted for ApproveForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(super) async fn approve(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<ApproveForm>, FormRejection>,
) -> Response {
    let (form, caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let decided = async {
        let Some(approver) = inbox.approver(&caller) else {
            return Err(Failure::new(
                Exit::Usage,
                "this inbox has no signing key (IDEM_APPROVAL_KEY): it cannot approve",
            ));
        };
        let op = &inbox.op;
        let shown = shown_of(op, &form.key, &form.shown)?;
        let (entry, _) = op.undecided(&form.key).await?;
        let edited = match form.edited.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(present::edited_arguments(text, "the edited arguments")?)
                .filter(|edited| *edited != entry.arguments),
        };
        let decided = op.approve(&entry, shown, &approver, edited.as_ref()).await?;
        tracing::info!(key = %decided.key, by = %who, edited = edited.is_some(), "approved in the inbox");
        if decided.awaiting() > 0 {
            let line = present::approvers_line(&decided).unwrap_or_default();
            return Ok(format!(
                "Your approval of {} for {} is recorded: {line}.",
                decided.tool, decided.tenant
            ));
        }
        Ok(match edited {
            None => format!(
                "Approved {} for {} by {}: the agent's next call runs it once.",
                decided.tool, decided.tenant, who
            ),
            Some(_) => format!(
                "Approved {} for {} with edited arguments by {}: the agent's call is refused with them, and runs once called with them.",
                decided.tool, decided.tenant, who
            ),
        })
    }
    .await;
    answer(&inbox, &caller, decided)
}

#[derive(Deserialize)]
pub(super) struct DenyForm {
    /// Absent from a script's form (a bearer caller needs none).
    #[serde(default)]
    csrf: String,
    key: String,
    shown: String,
    reason: String,
}

impl Posted for DenyForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(super) async fn deny(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<DenyForm>, FormRejection>,
) -> Response {
    let (form, caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let decided = async {
        let op = &inbox.op;
        let shown = shown_of(op, &form.key, &form.shown)?;
        let (entry, _) = op.undecided(&form.key).await?;
        let reason = form.reason.trim();
        let decided = op.deny(&entry, shown, who, reason).await?;
        tracing::info!(key = %decided.key, by = %who, "denied in the inbox");
        Ok(format!(
            "Denied {} for {} by {}: {reason}",
            decided.tool, decided.tenant, who
        ))
    }
    .await;
    answer(&inbox, &caller, decided)
}

#[derive(Deserialize)]
pub(super) struct SettleForm {
    /// Absent from a script's form (a bearer caller needs none).
    #[serde(default)]
    csrf: String,
    key: String,
    /// The fence of the record as the page showed it.
    fence: Fence,
    value: Option<String>,
    failure: Option<String>,
}

impl Posted for SettleForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The Unknown record the page showed, as it still is (the inbox settles nothing else).
async fn shown_unknown(inbox: &Inbox, form: &SettleForm) -> Result<idem_core::Record, Failure> {
    let op = &inbox.op;
    let record = op.record(&form.key).await?;
    if record.fence != form.fence || !matches!(record.state, RecordState::Unknown { .. }) {
        return Err(Failure::new(
            Exit::Refused,
            format!(
                "{}: the record under key {} changed since the page showed it (it is now {}): nothing changed; reload the inbox",
                op.name,
                record.key,
                present::state_name(record.state.kind())
            ),
        ));
    }
    Ok(record)
}

pub(super) async fn resolve(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<SettleForm>, FormRejection>,
) -> Response {
    let (form, caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let resolved = async {
        let outcome = present::outcome_of(
            given(&form.value),
            given(&form.failure),
            "the result",
            "\"text\"",
        )?;
        let record = shown_unknown(&inbox, &form).await?;
        inbox
            .op
            .settle(&record, Some(&outcome), None, false, who)
            .await?;
        tracing::info!(key = %record.key, by = %who, "resolved in the inbox");
        Ok(format!(
            "Resolved {} for {} by {}: every call with its key replays that outcome.",
            record.tool, record.tenant, who
        ))
    }
    .await;
    answer(&inbox, &caller, resolved)
}

pub(super) async fn release(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    form: Result<Form<SettleForm>, FormRejection>,
) -> Response {
    let (form, caller) = match admit(&inbox, &headers, form) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let who = caller.who();
    let released = async {
        let record = shown_unknown(&inbox, &form).await?;
        inbox.op.settle(&record, None, None, false, who).await?;
        tracing::info!(key = %record.key, by = %who, "released in the inbox");
        Ok(format!(
            "Released {} for {} by {}: the call runs again when called.",
            record.tool, record.tenant, who
        ))
    }
    .await;
    answer(&inbox, &caller, released)
}

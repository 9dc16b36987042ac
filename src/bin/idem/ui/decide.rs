//! The inbox's decisions: each form checked (session, anti-forgery token, origin), then
//! the same operation the command line makes, recorded with the inbox's identity.

use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use idem::{Outcome, RecordState, ToolError};
use serde::Deserialize;
use serde_json::Value;

use super::Inbox;
use super::page::{encode, page_error};
use crate::exit::{Exit, Failure};
use crate::operate;

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

pub(super) fn done(inbox: &Inbox, message: String) -> Response {
    let tag = inbox.notice_tag(&message);
    Redirect::to(&format!("/?done={}&tag={tag}", encode(&message))).into_response()
}

#[derive(Deserialize)]
pub(super) struct ApproveForm {
    csrf: String,
    key: String,
    shown: String,
    edited: Option<String>,
}

pub(super) async fn approve(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<ApproveForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let Some(approver) = &inbox.approver else {
        return failed(Failure::new(
            Exit::Usage,
            "this inbox has no signing key (IDEM_APPROVAL_KEY): it cannot approve",
        ));
    };
    let decided = async {
        let op = &inbox.op;
        let entry = op.approval(&form.key).await?;
        if operate::fingerprint_of_form(&form.shown) != Some(entry.fingerprint) {
            return Err(Failure::new(
                Exit::Refused,
                format!(
                    "{}: the call pending under key {} has other arguments than the ones you were shown: nothing was approved; reload the inbox",
                    op.name, entry.key
                ),
            ));
        }
        let now = op.now().await?;
        op.refuse_decided(&entry, now)?;
        let edited = match form.edited.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => {
                let value: Value = serde_json::from_str(text).map_err(|e| {
                    Failure::new(Exit::Usage, format!("the edited arguments are not JSON: {e}"))
                })?;
                if !value.is_object() {
                    return Err(Failure::new(
                        Exit::Usage,
                        "the edited arguments are a JSON object, as the call's are",
                    ));
                }
                (value != entry.arguments).then_some(value)
            }
        };
        let decided = op.approve(&entry, approver, edited.as_ref()).await?;
        tracing::info!(key = %decided.key, by = %inbox.who, edited = edited.is_some(), "approved in the inbox");
        Ok::<_, Failure>((decided, edited.is_some()))
    }
    .await;
    match decided {
        Ok((e, edited)) => done(
            &inbox,
            format!(
                "Approved {} for {}{} by {}: the agent's next call runs it once.",
                e.tool,
                e.tenant,
                if edited { " with edited arguments" } else { "" },
                inbox.who
            ),
        ),
        Err(f) => failed(f),
    }
}

#[derive(Deserialize)]
pub(super) struct DenyForm {
    csrf: String,
    key: String,
    reason: String,
}

pub(super) async fn deny(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<DenyForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let decided = async {
        let op = &inbox.op;
        let entry = op.approval(&form.key).await?;
        let now = op.now().await?;
        op.refuse_decided(&entry, now)?;
        let decided = op.deny(&entry, &inbox.who, form.reason.trim()).await?;
        tracing::info!(key = %decided.key, by = %inbox.who, "denied in the inbox");
        Ok::<_, Failure>(decided)
    }
    .await;
    match decided {
        Ok(e) => done(
            &inbox,
            format!(
                "Denied {} for {} by {}: {}",
                e.tool,
                e.tenant,
                inbox.who,
                form.reason.trim()
            ),
        ),
        Err(f) => failed(f),
    }
}

#[derive(Deserialize)]
pub(super) struct ResolveForm {
    csrf: String,
    key: String,
    value: Option<String>,
    failure: Option<String>,
}

pub(super) async fn resolve(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<ResolveForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let value = form
        .value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let failure = form
        .failure
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let resolved = async {
        let outcome = match (value, failure) {
            (Some(value), None) => {
                let value: Value = serde_json::from_str(value).map_err(|e| {
                    Failure::new(Exit::Usage, format!("the result is not JSON ({e}): quote a string as \"text\""))
                })?;
                Outcome::success(&value)
            }
            (None, Some(message)) => Outcome::Failure(ToolError::terminal(message)),
            _ => {
                return Err(Failure::new(
                    Exit::Usage,
                    "give either the call's result as JSON or a failure message, not both or neither",
                ));
            }
        };
        let op = &inbox.op;
        let record = op.record(&form.key).await?;
        if !matches!(record.state, RecordState::Unknown { .. } | RecordState::InProgress { .. }) {
            return Err(Failure::new(
                Exit::Refused,
                format!("{}: the record under key {} is already completed; nothing changed", op.name, record.key),
            ));
        }
        let resolved = op.resolve(&record, &outcome, None).await?;
        tracing::info!(key = %resolved.key, by = %inbox.who, "resolved in the inbox");
        Ok::<_, Failure>(resolved)
    }
    .await;
    match resolved {
        Ok(r) => done(
            &inbox,
            format!(
                "Resolved {} for {} by {}: every call with its key replays that outcome.",
                r.tool, r.tenant, inbox.who
            ),
        ),
        Err(f) => failed(f),
    }
}

#[derive(Deserialize)]
pub(super) struct ReleaseForm {
    csrf: String,
    key: String,
}

pub(super) async fn release(
    State(inbox): State<Arc<Inbox>>,
    headers: HeaderMap,
    Form(form): Form<ReleaseForm>,
) -> Response {
    if let Some(refused) = inbox.check_post(&headers, &form.csrf) {
        return refused;
    }
    let released = async {
        let op = &inbox.op;
        let record = op.record(&form.key).await?;
        op.release(&record).await?;
        tracing::info!(key = %record.key, by = %inbox.who, "released in the inbox");
        Ok::<_, Failure>(record)
    }
    .await;
    match released {
        Ok(r) => done(
            &inbox,
            format!(
                "Released {} for {} by {}: the call runs again when called.",
                r.tool, r.tenant, inbox.who
            ),
        ),
        Err(f) => failed(f),
    }
}

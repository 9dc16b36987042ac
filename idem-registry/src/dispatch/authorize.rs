//! The authorize stage: the run's scopes, and the tool's authorization checks and rules over
//! the call's arguments and the run; then, for a call about to act, the checks that may read
//! (`authorize_async`). Nothing is recorded before it passes.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde_json::Value;

use super::error::DispatchError;
use super::{Dispatcher, Scopes, ToolCall, arguments, context_parts};
use crate::context::{Start, ToolContext};
use crate::run::RunContext;
use crate::tool::{PreparedArguments, ToolDef};

impl Dispatcher {
    /// The checks up to this stage, in their order: resolve the tool, validate its
    /// arguments, authorize the run (unless `scopes` says the key alone is wanted). The
    /// synchronous half of [`Dispatcher::check`].
    pub(super) fn authorized<'a>(
        &'a self,
        call: &'a ToolCall,
        run: &RunContext,
        scopes: Scopes,
    ) -> Result<(&'a ToolDef, PreparedArguments<'a>), DispatchError> {
        let tool = self.lookup(&call.name)?;
        let prepared = arguments::validate(tool, &call.arguments)?;
        if scopes == Scopes::Checked {
            authorize(tool, run, &prepared.arguments)?;
        }
        Ok((tool, prepared))
    }
}

/// The authorize stage: the run holds every scope the tool requires, and the call passes
/// every authorization check and rule of the tool (which read its arguments and the run).
pub(super) fn authorize(
    tool: &ToolDef,
    run: &RunContext,
    args: &Value,
) -> Result<(), DispatchError> {
    let scopes = &tool.policy.scopes;
    if !scopes.iter().all(|s| run.scopes.contains(s)) {
        return Err(DispatchError::PermissionDenied {
            tool: tool.name.to_string(),
            missing: scopes
                .iter()
                .filter(|s| !run.scopes.contains(*s))
                .cloned()
                .collect(),
        });
    }
    for check in &tool.authorize {
        if let Err(rule) = check(args, run) {
            return Err(not_authorized(tool, args, rule));
        }
    }
    Ok(())
}

/// The end of the authorize stage, for a call about to act (a dispatch, not `record_key`):
/// each of the tool's checks that may read (`authorize_async`), in the order given, after
/// the synchronous ones passed and before the call is keyed. Each is given a context of the
/// run (tenant, run and step, whom it acts for, its limits) and the call's arguments.
///
/// An `Err` refuses the call, naming the check's words. A check that panics refuses it too:
/// a check that could not be made never lets a call through. Either way nothing is recorded
/// and nothing runs, so the same call may be made again.
pub(super) async fn authorize_async(
    tool: &ToolDef,
    run: &RunContext,
    args: &Value,
) -> Result<(), DispatchError> {
    if tool.authorize_async.is_empty() {
        return Ok(());
    }
    // The call has no key yet: the context's is one of its own, for reads, never the call's.
    let key = super::key::unkeyed();
    for check in &tool.authorize_async {
        let ctx = ToolContext::new(context_parts(tool, run, &key), Start::default());
        // Made inside the future, so that a check panicking before its first await is caught.
        let verdict = AssertUnwindSafe(async { check(ctx, args).await })
            .catch_unwind()
            .await;
        let refusal = match verdict {
            Ok(Ok(())) => continue,
            Ok(Err(rule)) => rule,
            Err(_) => "the authorization check failed (it panicked), so the call is refused; \
                       nothing was recorded or run"
                .to_owned(),
        };
        return Err(not_authorized(tool, args, refusal));
    }
    Ok(())
}

/// The refusal of a check: it may quote what the check was given, so no secret leaves in it.
fn not_authorized(tool: &ToolDef, args: &Value, rule: String) -> DispatchError {
    let rule = match tool.secrets.is_empty() {
        true => rule,
        false => crate::redact::scrub(&rule, args, &tool.secrets),
    };
    DispatchError::NotAuthorized {
        tool: tool.name.to_string(),
        rule,
    }
}

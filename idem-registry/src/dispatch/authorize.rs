//! The authorize stage: the run's scopes, and the tool's authorization checks and rules over
//! the call's arguments and the run. Nothing is recorded before it passes.

use serde_json::Value;

use super::error::DispatchError;
use crate::run::RunContext;
use crate::tool::ToolDef;

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
            // The refusal may quote what the check was given: no secret leaves in it.
            let rule = match tool.secrets.is_empty() {
                true => rule,
                false => crate::redact::scrub(&rule, args, &tool.secrets),
            };
            return Err(DispatchError::NotAuthorized {
                tool: tool.name.to_string(),
                rule,
            });
        }
    }
    Ok(())
}

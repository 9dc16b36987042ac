//! Approvals: an irreversible call runs only with an approval bound to its key and its
//! exact arguments.

use idem_core::{Fingerprint, IdempotencyKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A human's (or a policy engine's) yes to one specific irreversible call.
///
/// It is bound to the tool, the call's key and the fingerprint of its arguments, so it
/// cannot be replayed for another call or with other arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Approval {
    /// The tool.
    pub tool: String,
    /// The call's downstream key.
    pub key: IdempotencyKey,
    /// The fingerprint of the approved arguments.
    pub fingerprint: Fingerprint,
}

/// What must be approved before an irreversible call may run: returned inside
/// [`DispatchError::ApprovalRequired`](crate::DispatchError::ApprovalRequired).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The tool.
    pub tool: String,
    /// The call's downstream key.
    pub key: IdempotencyKey,
    /// The fingerprint of the arguments.
    pub fingerprint: Fingerprint,
    /// The normalised arguments, to show the approver.
    pub arguments: Value,
}

impl ApprovalRequest {
    /// Approve exactly this call.
    pub fn approve(&self) -> Approval {
        Approval {
            tool: self.tool.clone(),
            key: self.key.clone(),
            fingerprint: self.fingerprint,
        }
    }
}

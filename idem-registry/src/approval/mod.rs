//! Approvals: an irreversible call (and a call an `approve_when` rule selects) runs only with
//! an approval that a holder of an approval key signed for exactly that call, that has not
//! expired on the store's clock; and the desk where a person decides.
//!
//! An [`Approver`] (a person's tool, an operator service, a policy engine) holds an
//! [`ApprovalKey`]: an id and a secret of at least 32 bytes. It turns an
//! [`ApprovalRequest`] (what the dispatcher's [`ApprovalRequired`] carries) into an
//! [`Approval`]. The dispatcher verifies it against the keys it was built with
//! ([`ApprovalKeys`]). [`ApprovalDesk`] lists what waits for a person and records each
//! decision, bound to the arguments it showed.
//!
//! [`ApprovalRequired`]: crate::DispatchError::ApprovalRequired

mod desk;
pub(crate) mod grants;

pub use crate::grant::{
    GRANT_STEP, GRANTS_SCOPE, Grant, GrantError, GrantMiss, GrantScope, MAX_GRANT_VALIDITY, Revoked,
};
pub use crate::signed::*;
pub use desk::{ApprovalDesk, DecisionError};
pub use grants::GrantTerms;

//! Which pending call a decision is about, named by what the person deciding has in hand: the
//! refusal the agent got, the entry they were shown, or one of the call's two keys.

use idem_core::store::approvals::PendingApproval;
use idem_core::{Fingerprint, IdempotencyKey, RecordKey};

use super::ApprovalRequest;

/// The pending call an [`ApprovalDesk`](crate::approval::ApprovalDesk) decision is about.
///
/// A call has two keys: the record key it is stored under (what
/// [`ApprovalDesk::pending`](crate::approval::ApprovalDesk::pending) lists and
/// `idem approvals list` prints) and the downstream key (`idem-` and 40 hex digits) a refusal
/// names. The desk takes either, or the refusal's request itself, and each is made from a
/// reference with `From`, so a decision is one call whatever the person holds:
/// `desk.approve(&request, ..)`, `desk.approve(&entry, ..)`, `desk.approve(&entry.key, ..)`.
///
/// A request or a listed entry also binds the arguments: the decision lands only if the call
/// pending under the key still has the arguments it was refused with, or shown with. A bare
/// key decides whatever is pending under it.
///
/// ```
/// use idem::approval::{ApprovalRequest, PendingCall};
/// use idem::key::Fingerprint; use idem::IdempotencyKey;
///
/// let request = ApprovalRequest {
///     namespace: "default".into(),
///     tenant: "acme".into(),
///     tool: "close_account".into(),
///     key: IdempotencyKey::new("idem-58b62c8834c7597ad58886f738865f29ebcd6cbc"),
///     fingerprint: Fingerprint::from_bytes([7; 32]),
///     arguments: serde_json::json!({"customer": "cus_1"}),
/// };
/// let refused = PendingCall::from(&request);
/// assert!(matches!(refused, PendingCall::Refused(r) if r.key == request.key));
/// assert_eq!(refused.shown(), Some(request.fingerprint));
/// assert_eq!(PendingCall::from(&request.key).shown(), None, "a key binds no arguments");
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum PendingCall<'a> {
    /// The call stored under this record key, whatever its arguments.
    Record(&'a RecordKey),
    /// The call whose downstream key this is (what a refusal names), whatever its arguments.
    Downstream(&'a IdempotencyKey),
    /// The entry a person was shown: the call under its record key, only with the arguments
    /// shown.
    Listed(&'a PendingApproval),
    /// What [`DispatchError::ApprovalRequired`](crate::DispatchError::ApprovalRequired)
    /// handed back: the call of its namespace, tenant, tool and downstream key, only with the
    /// arguments it was refused with.
    Refused(&'a ApprovalRequest),
}

impl PendingCall<'_> {
    /// The fingerprint of the arguments the person deciding was shown, when this names them.
    pub fn shown(&self) -> Option<Fingerprint> {
        match self {
            PendingCall::Listed(entry) => Some(entry.fingerprint),
            PendingCall::Refused(request) => Some(request.fingerprint),
            PendingCall::Record(_) | PendingCall::Downstream(_) => None,
        }
    }

    /// Whether `entry` is the one this names (its arguments aside: see [`shown`](Self::shown)).
    pub fn names(&self, entry: &PendingApproval) -> bool {
        match self {
            PendingCall::Record(key) => entry.key == **key,
            PendingCall::Listed(listed) => entry.key == listed.key,
            PendingCall::Downstream(key) => entry.downstream_key == key.as_str(),
            PendingCall::Refused(request) => {
                entry.downstream_key == request.key.as_str()
                    && entry.namespace == request.namespace
                    && entry.tenant == request.tenant
                    && entry.tool == request.tool
            }
        }
    }
}

impl<'a> From<&'a RecordKey> for PendingCall<'a> {
    fn from(key: &'a RecordKey) -> Self {
        PendingCall::Record(key)
    }
}

impl<'a> From<&'a IdempotencyKey> for PendingCall<'a> {
    fn from(key: &'a IdempotencyKey) -> Self {
        PendingCall::Downstream(key)
    }
}

impl<'a> From<&'a PendingApproval> for PendingCall<'a> {
    fn from(entry: &'a PendingApproval) -> Self {
        PendingCall::Listed(entry)
    }
}

impl<'a> From<&'a ApprovalRequest> for PendingCall<'a> {
    fn from(request: &'a ApprovalRequest) -> Self {
        PendingCall::Refused(request)
    }
}

/// What `Err(DispatchError::ApprovalRequired { request })` binds, taken as it is.
impl<'a> From<&'a Box<ApprovalRequest>> for PendingCall<'a> {
    fn from(request: &'a Box<ApprovalRequest>) -> Self {
        PendingCall::Refused(request)
    }
}

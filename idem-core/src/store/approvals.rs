//! Pending approvals: an irreversible call waiting for a person's decision, kept in the store
//! so that the decision can be made from another process, hours later, and found by the
//! agent's next dispatch of the call.
//!
//! A store keeps one [`PendingApproval`] per record key, as JSON text, and offers three
//! primitives ([`Store::approval_text`], [`Store::swap_approval`], [`Store::approval_texts`]).
//! Everything else is written once, here: requesting, deciding and listing are a load, a pure
//! decision ([`requested`], [`decided`]) and a compare-and-swap, retried if another writer
//! changed the entry in between. A decision is therefore made at most once, whichever
//! process makes it.
//!
//! The store does not sign anything: an approval decided here carries the signed approval
//! (`idem::Approval`) as text, and the dispatcher verifies its signature before it believes
//! it, so whoever can write to the store cannot approve a call.

use serde::{Deserialize, Serialize};

use crate::canonical::Fingerprint;
use crate::key::RecordKey;
use crate::record::Timestamp;
use crate::store::{Store, StoreError};

/// A call waiting for approval, and the decision once one is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingApproval {
    /// The call's record key (derived from its namespace, tenant and key).
    pub key: RecordKey,
    /// The dispatcher's namespace.
    pub namespace: String,
    /// The tenant the call acts for.
    pub tenant: String,
    /// The tool.
    pub tool: String,
    /// The call's downstream key (what an approval binds).
    pub downstream_key: String,
    /// The fingerprint of the arguments as called.
    pub fingerprint: Fingerprint,
    /// The arguments as called, normalised, secrets sealed: what the approver is shown.
    pub arguments: serde_json::Value,
    /// Whether the tool has secret parameters: its arguments are approved as called, never
    /// edited (an approver would see only seals, and could type into the edit a secret the
    /// call left out). Absent from the JSON when false, as in entries from before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret_parameters: bool,
    /// The policy the call was asked under (its tool's class, handler version and
    /// controls): a decision under another policy is refused when the call comes to use it.
    /// Absent from entries written before it, and from those a store alone writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<ApprovalPolicy>,
    /// How many distinct people must approve the call before it runs (four eyes: 2). The
    /// first approvals are kept in [`approved_by`](Self::approved_by), the call is decided
    /// with the last one needed; one denial decides it. Absent from the JSON when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub approvers: u8,
    /// When more than one approver is needed: every approval given so far, oldest first
    /// (who, when, the signed approval). Each is verified by the dispatcher, and one person
    /// counts once, whatever the door they decided through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_by: Vec<GivenApproval>,
    /// When the dispatcher recorded the request (the store's clock).
    pub requested_at: Timestamp,
    /// Until when it may be decided, and a decision stands (the store's clock).
    pub expires_at: Timestamp,
    /// The decision, once made.
    pub decision: Option<ApprovalDecision>,
}

/// The policy a call was asked under, as the dispatcher described its tool when it recorded
/// the request: what made the decision right. An approval is for a call under this policy;
/// one of a tool whose policy changed since is refused, naming the change.
///
/// ```
/// use idem::store::approvals::ApprovalPolicy;
///
/// let asked = ApprovalPolicy::new("irreversible", "1", ["approve_when: /amount > 50"]);
/// let now = ApprovalPolicy::new("irreversible", "2", ["approve_when: /amount > 500"]);
/// assert_eq!(
///     asked.change_to(&now).as_deref(),
///     Some("handler version `1` became `2`; control `approve_when: /amount > 50` was removed; control `approve_when: /amount > 500` was added"),
/// );
/// assert_eq!(asked.change_to(&asked), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// The tool's class (`irreversible`, ...).
    pub class: String,
    /// The handler's version.
    pub version: String,
    /// Each control the tool had, in words (`approve_when: /amount > 50`, `precondition`,
    /// ...), in a fixed order.
    pub controls: Vec<String>,
}

impl ApprovalPolicy {
    /// A policy of `class`, handler `version` and `controls`.
    pub fn new(
        class: impl Into<String>,
        version: impl Into<String>,
        controls: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        ApprovalPolicy {
            class: class.into(),
            version: version.into(),
            controls: controls.into_iter().map(Into::into).collect(),
        }
    }

    /// What changed from this policy to `now`, in words; `None` if nothing did.
    pub fn change_to(&self, now: &ApprovalPolicy) -> Option<String> {
        let mut changes = Vec::new();
        if self.class != now.class {
            changes.push(format!("class `{}` became `{}`", self.class, now.class));
        }
        if self.version != now.version {
            changes.push(format!(
                "handler version `{}` became `{}`",
                self.version, now.version
            ));
        }
        for gone in self.controls.iter().filter(|c| !now.controls.contains(c)) {
            changes.push(format!("control `{gone}` was removed"));
        }
        for added in now.controls.iter().filter(|c| !self.controls.contains(c)) {
            changes.push(format!("control `{added}` was added"));
        }
        (!changes.is_empty()).then(|| changes.join("; "))
    }
}

fn one() -> u8 {
    1
}

fn is_one(n: &u8) -> bool {
    *n == 1
}

/// One approval of a call that needs several: who gave it, when, and the signed approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GivenApproval {
    /// The approver's identity.
    pub by: String,
    /// When (the store's clock).
    pub at: Timestamp,
    /// The signed approval, as JSON text (verified by the dispatcher, never by the store).
    pub approval: String,
}

/// Whether two identities name the same person: compared without surrounding blanks and
/// without regard to ASCII case (`Dana@Desk` and `dana@desk` count once).
///
/// ```
/// use idem::store::approvals::same_person;
/// assert!(same_person("dana@desk", " Dana@Desk"));
/// assert!(!same_person("dana@desk", "lee@desk"));
/// ```
pub fn same_person(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Who decided, when, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecision {
    /// The approver's identity.
    pub by: String,
    /// When (the store's clock).
    pub at: Timestamp,
    /// What was decided.
    pub verdict: Verdict,
}

/// An approval or a denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Verdict {
    /// Approved, for the arguments as called or as the approver edited them.
    Approved {
        /// The signed approval, as JSON text (verified by the dispatcher, never by the store).
        approval: String,
        /// The approved arguments (the call's, or the edited ones), secrets sealed.
        arguments: serde_json::Value,
        /// Their fingerprint: the call runs only with arguments of this fingerprint.
        fingerprint: Fingerprint,
    },
    /// Denied: the call is refused with the reason until the entry expires.
    Denied {
        /// Why, for the model and the audit.
        reason: String,
    },
}

impl PendingApproval {
    /// Whether a decision is still awaited at `now`.
    pub fn is_pending(&self, now: Timestamp) -> bool {
        self.decision.is_none() && now < self.expires_at
    }

    /// Whether the entry (pending, or its decision) still stands at `now`.
    pub fn stands(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }

    /// How many more approvals the call awaits before it is decided (0 once decided).
    ///
    /// ```
    /// # use idem::store::approvals::PendingApproval;
    /// # fn show(entry: &PendingApproval) {
    /// let who: Vec<&str> = entry.approved_by.iter().map(|g| g.by.as_str()).collect();
    /// println!("approved by {who:?}, awaiting {} more", entry.awaiting());
    /// # }
    /// ```
    pub fn awaiting(&self) -> u8 {
        match self.decision {
            Some(_) => 0,
            None => {
                let given = u8::try_from(self.approved_by.len()).unwrap_or(u8::MAX);
                self.approvers.max(1).saturating_sub(given)
            }
        }
    }
}

/// Which pending approvals to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFilter {
    /// Only this tenant's (`None`: every tenant's).
    pub tenant: Option<String>,
    /// Only this tool's.
    pub tool: Option<String>,
    /// Only those still awaiting a decision (`false`: decided and expired ones too).
    pub pending_only: bool,
    /// At most this many.
    pub limit: usize,
}

impl Default for ApprovalFilter {
    fn default() -> Self {
        ApprovalFilter {
            tenant: None,
            tool: None,
            pending_only: true,
            limit: 100,
        }
    }
}

impl ApprovalFilter {
    /// Whether `entry` is one this filter lists at `now`.
    pub fn admits(&self, entry: &PendingApproval, now: Timestamp) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == entry.tenant)
            && self.tool.as_ref().is_none_or(|t| *t == entry.tool)
            && (!self.pending_only || entry.is_pending(now))
    }
}

/// Why a decision could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionRefused {
    /// No request under the key.
    #[error("no approval was requested for key {0}")]
    NotRequested(RecordKey),
    /// Someone decided first.
    #[error("the approval for key {key} was already decided by {by} at {}", at.to_rfc3339())]
    AlreadyDecided {
        /// The key.
        key: RecordKey,
        /// Who decided.
        by: String,
        /// When.
        at: Timestamp,
    },
    /// The request under the key has other arguments than the ones the person deciding
    /// was shown (a new request was made under it since).
    #[error(
        "the request under key {0} has other arguments than the ones shown: nothing was decided; look at it again"
    )]
    NotShown(RecordKey),
    /// This person already approved the call, which needs approvals from distinct people.
    #[error(
        "{by} already approved the call under key {key}, which needs {approvers} distinct approvers: one person counts once, whatever the door; another approver must decide"
    )]
    ApprovedAlready {
        /// The key.
        key: RecordKey,
        /// Who.
        by: String,
        /// How many distinct approvers the call needs.
        approvers: u8,
    },
    /// Edited arguments on a call that needs several approvers: each must approve the same
    /// call, so the arguments cannot be edited.
    #[error(
        "the call under key {key} needs {approvers} distinct approvers, who all approve the arguments as called: they cannot be edited; deny the call, and the agent can call again with other arguments"
    )]
    EditNeedsOneApprover {
        /// The key.
        key: RecordKey,
        /// How many distinct approvers the call needs.
        approvers: u8,
    },
    /// The request expired before the decision.
    #[error("the approval request for key {key} expired at {}; the agent must call again", expired_at.to_rfc3339())]
    Expired {
        /// The key.
        key: RecordKey,
        /// When it expired.
        expired_at: Timestamp,
    },
}

/// What a request writes under its key: nothing while an entry stands there (the agent
/// calling again finds its decision, or the request still pending); otherwise `new`.
pub fn requested(
    existing: Option<&PendingApproval>,
    new: &PendingApproval,
    now: Timestamp,
) -> Option<PendingApproval> {
    match existing {
        Some(entry) if entry.stands(now) => None,
        _ => Some(new.clone()),
    }
}

/// The entry a decision by `by` leaves, made at `now`, or why it cannot be made: only a
/// pending request, once. On a call that needs several approvers, an approval by a person
/// who has not approved it yet is added to [`PendingApproval::approved_by`], and the call is
/// decided with the last one needed; one denial decides it.
pub fn decided(
    existing: Option<PendingApproval>,
    key: &RecordKey,
    by: &str,
    verdict: &Verdict,
    now: Timestamp,
) -> Result<PendingApproval, DecisionRefused> {
    let mut entry = existing.ok_or_else(|| DecisionRefused::NotRequested(key.clone()))?;
    if let Some(made) = &entry.decision {
        return Err(DecisionRefused::AlreadyDecided {
            key: key.clone(),
            by: made.by.clone(),
            at: made.at,
        });
    }
    if now >= entry.expires_at {
        return Err(DecisionRefused::Expired {
            key: key.clone(),
            expired_at: entry.expires_at,
        });
    }
    if let Verdict::Approved {
        approval,
        fingerprint,
        ..
    } = verdict
        && entry.approvers > 1
    {
        let approvers = entry.approvers;
        if *fingerprint != entry.fingerprint {
            return Err(DecisionRefused::EditNeedsOneApprover {
                key: key.clone(),
                approvers,
            });
        }
        if entry.approved_by.iter().any(|g| same_person(&g.by, by)) {
            return Err(DecisionRefused::ApprovedAlready {
                key: key.clone(),
                by: by.to_owned(),
                approvers,
            });
        }
        entry.approved_by.push(GivenApproval {
            by: by.to_owned(),
            at: now,
            approval: approval.clone(),
        });
        if entry.approved_by.len() < usize::from(approvers) {
            return Ok(entry);
        }
    }
    entry.decision = Some(ApprovalDecision {
        by: by.to_owned(),
        at: now,
        verdict: verdict.clone(),
    });
    Ok(entry)
}

fn decode(key: &RecordKey, text: &str) -> Result<PendingApproval, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        key: key.clone(),
        reason: format!("pending approval: {e}"),
    })
}

fn encode(entry: &PendingApproval) -> String {
    // A struct of strings, numbers and JSON values: it always serialises.
    serde_json::to_string(entry).unwrap_or_default()
}

/// How many times a compare-and-swap is retried when other writers keep changing the entry.
const SWAPS: usize = 16;

/// Load the entry under `key`, let `change` decide the new one (or refuse), and swap it in if
/// nobody changed it meanwhile; retried otherwise. `Ok(None)` from `change`: nothing to write.
async fn change<S, F, E>(
    store: &S,
    key: &RecordKey,
    mut change: F,
) -> Result<Result<PendingApproval, E>, StoreError>
where
    S: Store + ?Sized,
    F: FnMut(Option<PendingApproval>, Timestamp) -> Result<Option<PendingApproval>, E> + Send,
    E: Send,
{
    for _ in 0..SWAPS {
        let text = store.approval_text(key).await?;
        let existing = text.as_deref().map(|t| decode(key, t)).transpose()?;
        let now = store.now().await?;
        let kept = existing.clone();
        let new = match change(existing, now) {
            Ok(Some(new)) => new,
            Ok(None) => {
                return kept
                    .map(Ok)
                    .ok_or_else(|| StoreError::NotFound(key.clone()));
            }
            Err(e) => return Ok(Err(e)),
        };
        if store
            .swap_approval(key, text.as_deref(), &new, &encode(&new))
            .await?
        {
            return Ok(Ok(new));
        }
    }
    Err(StoreError::Unavailable(format!(
        "the pending approval under {key} kept changing: {SWAPS} attempts to update it lost the race"
    )))
}

/// Record `request` unless an entry under its key still stands; the entry that stands.
pub async fn request<S: Store + ?Sized>(
    store: &S,
    request: &PendingApproval,
) -> Result<PendingApproval, StoreError> {
    let outcome = change(store, &request.key, |existing, now| {
        Ok::<_, std::convert::Infallible>(requested(existing.as_ref(), request, now))
    })
    .await?;
    outcome.map_err(|never| match never {})
}

/// Replace `stale` (a request or decision that stands, and no longer holds: made under
/// another policy of the tool) with `new`, unless the entry changed since it was read; the
/// entry that stands after.
pub async fn ask_again<S: Store + ?Sized>(
    store: &S,
    stale: &PendingApproval,
    new: &PendingApproval,
) -> Result<PendingApproval, StoreError> {
    let outcome = change(store, &new.key, |existing, _| {
        let stands = existing.is_none() || existing.as_ref() == Some(stale);
        Ok::<_, std::convert::Infallible>(stands.then(|| new.clone()))
    })
    .await?;
    outcome.map_err(|never| match never {})
}

/// [`decide`], only if the entry under the key is still `read` in every field (its
/// arguments, the policy it was asked under, when it was asked): a request asked again since
/// it was read is [`DecisionRefused::NotShown`], checked in the same swap as the decision.
pub async fn decide_as_read<S: Store + ?Sized>(
    store: &S,
    read: &PendingApproval,
    by: &str,
    verdict: &Verdict,
) -> Result<Result<PendingApproval, DecisionRefused>, StoreError> {
    change(store, &read.key, |existing, now| {
        if existing.as_ref().is_some_and(|entry| entry != read) {
            return Err(DecisionRefused::NotShown(read.key.clone()));
        }
        decided(existing, &read.key, by, verdict, now).map(Some)
    })
    .await
}

/// Record `by`'s `verdict` on the pending request under `key`, at the store's time.
pub async fn decide<S: Store + ?Sized>(
    store: &S,
    key: &RecordKey,
    by: &str,
    verdict: &Verdict,
) -> Result<Result<PendingApproval, DecisionRefused>, StoreError> {
    decide_as_shown(store, key, by, verdict, None).await
}

/// [`decide`], only if the request's arguments have the fingerprint `shown` (the ones the
/// person deciding saw), checked in the same swap as the decision:
/// [`DecisionRefused::NotShown`] otherwise.
pub async fn decide_as_shown<S: Store + ?Sized>(
    store: &S,
    key: &RecordKey,
    by: &str,
    verdict: &Verdict,
    shown: Option<Fingerprint>,
) -> Result<Result<PendingApproval, DecisionRefused>, StoreError> {
    change(store, key, |existing, now| {
        if let (Some(entry), Some(shown)) = (&existing, shown)
            && entry.fingerprint != shown
        {
            return Err(DecisionRefused::NotShown(key.clone()));
        }
        decided(existing, key, by, verdict, now).map(Some)
    })
    .await
}

/// The entry under `key`.
pub async fn get<S: Store + ?Sized>(
    store: &S,
    key: &RecordKey,
) -> Result<Option<PendingApproval>, StoreError> {
    store
        .approval_text(key)
        .await?
        .map(|t| decode(key, &t))
        .transpose()
}

/// The entries `filter` admits, oldest request first.
pub async fn list<S: Store + ?Sized>(
    store: &S,
    filter: &ApprovalFilter,
) -> Result<Vec<PendingApproval>, StoreError> {
    let now = store.now().await?;
    let mut out = Vec::new();
    for (key, text) in store.approval_texts(filter).await? {
        let entry = decode(&key, &text)?;
        if filter.admits(&entry, now) {
            out.push(entry);
        }
    }
    out.sort_by(|a, b| (a.requested_at, a.key.as_str()).cmp(&(b.requested_at, b.key.as_str())));
    out.truncate(filter.limit);
    Ok(out)
}

/// How long an entry is kept after it expired unless [`purge`] is told otherwise: 30 days, the
/// audit of who decided what (the record of an approved call keeps its approval as well).
pub const DEFAULT_APPROVAL_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(30 * 24 * 3600);

/// Delete up to `limit` entries that expired more than `retention` ago (decided or not);
/// returns how many were deleted. An entry changed meanwhile is left alone.
pub async fn purge<S: Store + ?Sized>(
    store: &S,
    retention: std::time::Duration,
    limit: usize,
) -> Result<usize, StoreError> {
    let now = store.now().await?;
    let everything = ApprovalFilter {
        pending_only: false,
        limit: usize::MAX,
        ..ApprovalFilter::default()
    };
    let mut deleted = 0;
    for (key, text) in store.approval_texts(&everything).await? {
        if deleted == limit {
            break;
        }
        let entry = decode(&key, &text)?;
        if now >= entry.expires_at.plus(retention) && store.remove_approval(&key, &text).await? {
            deleted += 1;
        }
    }
    Ok(deleted)
}

#[cfg(test)]
#[path = "approvals_tests.rs"]
mod tests;

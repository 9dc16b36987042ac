//! Standing grants at the desk: a person grants a tool for a tenant, a run or a session, for
//! a time, within argument bounds; the grants are listed and revoked here, and read by the
//! approve stage (`dispatch/approve.rs`), which lets a covered call run without asking.
//!
//! The store keeps every grant in one text under the budget scope [`GRANTS_SCOPE`], changed
//! by compare-and-swap (a grant and a revocation made at once in two processes both land).
//! Each grant is signed ([`Grant`]); each grant and revocation is appended to the decision
//! log.

use std::time::Duration;

use idem_core::store::approvals::{self, ApprovalFilter, ApprovalPolicy};
use idem_core::store::decisions::{self, Action, Decision, LogError};
use idem_core::{Store, StoreError, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ApprovalDesk;
use crate::run::RunContext;
use crate::signed::{ApprovalKeys, Approver, Grant, GrantMiss, GrantScope, Revoked};
use crate::tool::{Rule, ToolDef};

/// The budget scope the grants are kept under.
pub const GRANTS_SCOPE: &str = "idem:grants";

/// The longest a grant may last: 90 days. A standing yes is reviewed at least that often.
pub const MAX_GRANT_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);

/// How long an ended grant (expired or revoked) stays listed: 30 days.
const ENDED_KEPT: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long the store keeps the text (it is rewritten at every change).
const KEPT_FOR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How many times a change is retried when other writers keep changing the grants.
const SWAPS: usize = 16;

/// What a person grants: a tool's calls for a tenant (every run, one run, one session), for
/// a time, within bounds.
///
/// ```
/// use std::time::Duration;
/// use idem::approval::GrantTerms;
/// use idem::tool::Rule;
///
/// let terms = GrantTerms::new("acme", "refund", Duration::from_secs(3600))
///     .for_run("run-7")
///     .within(serde_json::from_value::<Rule>(serde_json::json!(
///         {"pointer": "/amount", "at_most": 50}
///     )).unwrap());
/// assert_eq!(terms.bounds.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GrantTerms {
    /// The tenant whose calls it covers.
    pub tenant: String,
    /// The tool.
    pub tool: String,
    /// Which of the tenant's calls.
    pub scope: GrantScope,
    /// Each must hold for a call's arguments.
    pub bounds: Vec<Rule>,
    /// For how long, from the store's now (at most [`MAX_GRANT_VALIDITY`]).
    pub valid_for: Duration,
}

impl GrantTerms {
    /// Every call of `tool` for `tenant`, for `valid_for`, without bounds.
    pub fn new(tenant: impl Into<String>, tool: impl Into<String>, valid_for: Duration) -> Self {
        GrantTerms {
            tenant: tenant.into(),
            tool: tool.into(),
            scope: GrantScope::Tenant,
            bounds: Vec::new(),
            valid_for,
        }
    }

    /// Only the calls of run `run_id`.
    pub fn for_run(mut self, run_id: impl Into<String>) -> Self {
        self.scope = GrantScope::Run(run_id.into());
        self
    }

    /// Only the calls of session `session` (runs accounted under it).
    pub fn for_session(mut self, session: impl Into<String>) -> Self {
        self.scope = GrantScope::Session(session.into());
        self
    }

    /// Only calls for which `bound` holds.
    pub fn within(mut self, bound: Rule) -> Self {
        self.bounds.push(bound);
        self
    }
}

/// Why a grant or a revocation was not made.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The store could not be reached or answered an error.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The tool is not in this desk's registry.
    #[error("tool `{0}` is not registered with this dispatcher")]
    UnknownTool(String),
    /// No call of the tool ever needs approval: there is nothing to grant.
    #[error("no call of `{0}` needs approval: there is nothing to grant")]
    NothingToGrant(String),
    /// The tool needs several approvers: one person's grant cannot stand for them.
    #[error(
        "`{tool}` needs {approvers} distinct approvers for each call: one person's standing grant cannot stand for them; approve its calls one by one"
    )]
    FourEyes {
        /// The tool.
        tool: String,
        /// How many approvers its calls need.
        approvers: u8,
    },
    /// A desk without the tools could not tell the tool's policy: no call of it asked here.
    #[error(
        "the policy of `{0}` is unknown here: no call of it has asked for approval in this store; grant it from a desk with the tools (`Dispatcher::approvals`), or once one of its calls has asked"
    )]
    PolicyUnknown(String),
    /// A bound cannot work on the tool's arguments.
    #[error("a bound of the grant is refused: {0}")]
    InvalidBound(String),
    /// Longer than [`MAX_GRANT_VALIDITY`], or no time at all.
    #[error(
        "a grant lasts from 1 second to {} days; {}s was asked",
        MAX_GRANT_VALIDITY.as_secs() / 86400,
        .0.as_secs()
    )]
    Validity(Duration),
    /// No grant has this id.
    #[error("no grant has the id `{0}`")]
    NotFound(String),
    /// The grant was revoked already.
    #[error("grant `{id}` was revoked already, by {by}")]
    AlreadyRevoked {
        /// The grant.
        id: String,
        /// Who revoked it.
        by: String,
    },
    /// The store's text of the grants does not read.
    #[error("the grants kept in the store do not read ({0}): nothing was changed")]
    Corrupt(String),
    /// The change was made, and the decision log could not take it.
    #[error("grant `{id}` was changed, and the decision log could not take it: {error}")]
    NotLogged {
        /// The grant.
        id: String,
        /// Why the log refused.
        error: LogError,
    },
}

/// The grants as the store keeps them.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    grants: Vec<Grant>,
}

/// The grants kept, and the text they were read from (for the swap).
async fn load(store: &dyn Store) -> Result<(Option<String>, Vec<Grant>), GrantError> {
    let text = store.budget_text(GRANTS_SCOPE).await?;
    let kept: Kept = match &text {
        Some(text) => serde_json::from_str(text).map_err(|e| GrantError::Corrupt(e.to_string()))?,
        None => Kept::default(),
    };
    Ok((text, kept.grants))
}

/// Load the grants, let `change` edit them at the store's `now` (or refuse), drop those
/// ended long ago, and swap the text in unless another writer changed it; retried then.
async fn change<T>(
    store: &dyn Store,
    mut change: impl FnMut(&mut Vec<Grant>, Timestamp) -> Result<T, GrantError>,
) -> Result<T, GrantError> {
    for _ in 0..SWAPS {
        let (text, mut grants) = load(store).await?;
        let now = store.now().await?;
        let out = change(&mut grants, now)?;
        grants.retain(|g| {
            let ended = g.revoked.as_ref().map_or(g.expires_at, |r| r.at);
            now < ended.plus(ENDED_KEPT)
        });
        let new = serde_json::to_string(&Kept { grants }).unwrap_or_default();
        if store
            .swap_budget(GRANTS_SCOPE, text.as_deref(), &new, KEPT_FOR)
            .await?
        {
            return Ok(out);
        }
    }
    Err(StoreError::Unavailable(format!(
        "the grants kept changing: {SWAPS} attempts to update them lost the race"
    ))
    .into())
}

/// The grant that lets the call of `tool` with `args` in `run` through now, if one does:
/// standing, signed under `keys`, for this tool, tenant and scope, under the policy the tool
/// has now, every bound holding.
pub(crate) async fn admitting(
    store: &dyn Store,
    tool: &ToolDef,
    args: &Value,
    run: &RunContext,
    now: Timestamp,
    keys: &ApprovalKeys,
) -> Result<Option<Grant>, StoreError> {
    let Some(text) = store.budget_text(GRANTS_SCOPE).await? else {
        return Ok(None);
    };
    // Grants that do not read let nothing through: the call asks a person.
    let Ok(kept) = serde_json::from_str::<Kept>(&text) else {
        tracing::warn!("the grants kept in the store do not read; calls ask a person");
        return Ok(None);
    };
    let policy = tool.approval_policy();
    for grant in kept.grants {
        match grant.admits(tool.name(), args, run, now, &policy, keys) {
            Ok(()) => return Ok(Some(grant)),
            Err(GrantMiss::BadSignature) => {
                tracing::warn!(grant = %grant.id, "a grant in the store does not verify; ignored");
            }
            Err(_) => {}
        }
    }
    Ok(None)
}

fn new_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let mut fallback = [0u8; 16];
        crate::signed::fallback_nonce(&mut fallback);
        bytes.copy_from_slice(&fallback[8..]);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("g-{hex}")
}

impl ApprovalDesk<'_> {
    /// Grant `terms`, signed by `approver`: the calls of the tool they cover run without
    /// asking until the grant expires or is revoked, under the tool's policy as it is now
    /// (a change of policy ends it). A call outside the bounds asks a person as before; a
    /// standing denial of a call is final whatever a grant says.
    ///
    /// A desk with the tools ([`Dispatcher::approvals`](crate::Dispatcher::approvals))
    /// checks the bounds against the tool's schema and binds its policy; a desk over a store
    /// alone binds the policy under which the tool's latest call asked, and refuses a tool
    /// none of whose calls has asked ([`GrantError::PolicyUnknown`]). A tool that needs
    /// several approvers cannot be granted ([`GrantError::FourEyes`]).
    pub async fn grant(
        &self,
        terms: &GrantTerms,
        approver: &Approver,
    ) -> Result<Grant, GrantError> {
        if terms.valid_for.is_zero() || terms.valid_for > MAX_GRANT_VALIDITY {
            return Err(GrantError::Validity(terms.valid_for));
        }
        let policy = self.policy_of(terms).await?;
        let id = new_id();
        let grant = change(self.store, |grants, now| {
            let grant = Grant {
                id: id.clone(),
                tenant: terms.tenant.clone(),
                tool: terms.tool.clone(),
                scope: terms.scope.clone(),
                bounds: terms.bounds.clone(),
                by: approver.identity().to_owned(),
                granted_at: now,
                expires_at: now.plus(terms.valid_for),
                policy: policy.clone(),
                key_id: String::new(),
                signature: String::new(),
                revoked: None,
            }
            .signed(approver.key());
            grants.push(grant.clone());
            Ok(grant)
        })
        .await?;
        let mut within: Vec<String> = grant.bounds.iter().map(ToString::to_string).collect();
        within.insert(0, grant.scope.to_string());
        let detail = format!(
            "grant {} ({}) until {}",
            grant.id,
            within.join("; "),
            grant.expires_at.to_rfc3339()
        );
        let decision = Decision::new(&grant.by, Action::Grant, self.door, &grant.tenant)
            .about(&grant.tool, &grant.id)
            .detail(detail);
        self.logged(grant, decision).await
    }

    /// Every grant kept (standing ones, and those ended in the last 30 days), of `tenant`
    /// only or of all, oldest first. [`Grant::stands`] tells the standing ones.
    pub async fn grants(&self, tenant: Option<&str>) -> Result<Vec<Grant>, GrantError> {
        let (_, mut grants) = load(self.store).await?;
        grants.retain(|g| tenant.is_none_or(|t| g.tenant == t));
        Ok(grants)
    }

    /// Revoke grant `id`: from now on it lets nothing through.
    pub async fn revoke(&self, id: &str, by: &str) -> Result<Grant, GrantError> {
        let revoked = change(self.store, |grants, now| {
            let grant = grants
                .iter_mut()
                .find(|g| g.id == id)
                .ok_or_else(|| GrantError::NotFound(id.to_owned()))?;
            if let Some(earlier) = &grant.revoked {
                return Err(GrantError::AlreadyRevoked {
                    id: id.to_owned(),
                    by: earlier.by.clone(),
                });
            }
            grant.revoked = Some(Revoked {
                by: by.to_owned(),
                at: now,
            });
            Ok(grant.clone())
        })
        .await?;
        let decision = Decision::new(by, Action::Revoke, self.door, &revoked.tenant)
            .about(&revoked.tool, &revoked.id)
            .detail(format!("revoked {}", revoked.summary()));
        self.logged(revoked, decision).await
    }

    /// The policy a grant of `terms` binds, or why none can be granted.
    async fn policy_of(&self, terms: &GrantTerms) -> Result<ApprovalPolicy, GrantError> {
        if let Some(registry) = self.registry {
            let tool = registry
                .get(&terms.tool)
                .ok_or_else(|| GrantError::UnknownTool(terms.tool.clone()))?;
            if !tool.may_need_approval() {
                return Err(GrantError::NothingToGrant(terms.tool.clone()));
            }
            if tool.approvers > 1 {
                return Err(GrantError::FourEyes {
                    tool: terms.tool.clone(),
                    approvers: tool.approvers,
                });
            }
            for bound in &terms.bounds {
                bound
                    .check("grant", tool.input_schema())
                    .map_err(GrantError::InvalidBound)?;
            }
            return Ok(tool.approval_policy());
        }
        let asked = approvals::list(
            self.store,
            &ApprovalFilter {
                tenant: None,
                tool: Some(terms.tool.clone()),
                pending_only: false,
                limit: usize::MAX,
            },
        )
        .await?;
        let latest = asked
            .into_iter()
            .filter(|e| e.policy.is_some())
            .max_by_key(|e| e.requested_at)
            .ok_or_else(|| GrantError::PolicyUnknown(terms.tool.clone()))?;
        if latest.approvers > 1 {
            return Err(GrantError::FourEyes {
                tool: terms.tool.clone(),
                approvers: latest.approvers,
            });
        }
        latest
            .policy
            .ok_or_else(|| GrantError::PolicyUnknown(terms.tool.clone()))
    }

    /// `grant` once `decision` is in the decision log.
    async fn logged(&self, grant: Grant, decision: Decision) -> Result<Grant, GrantError> {
        match decisions::append(self.store, &decision).await {
            Ok(_) => Ok(grant),
            Err(error) => Err(GrantError::NotLogged {
                id: grant.id,
                error,
            }),
        }
    }
}

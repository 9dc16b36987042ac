//! Standing grants at the desk: a person grants a tool for a tenant, a run or a session, for
//! a time, within argument bounds; the grants are listed and revoked here (the grant itself,
//! its signature and how the store keeps it: `crate::grant`). Each grant and revocation is
//! appended to the decision log.

use std::time::Duration;

use idem_core::store::approvals::{self, ApprovalFilter, ApprovalPolicy};
use idem_core::store::decisions::{self, Action, Decision};

use super::ApprovalDesk;
use crate::grant::{
    Grant, GrantError, GrantScope, MAX_GRANT_VALIDITY, Revoked, change, load, new_id,
};
use crate::signed::Approver;
use crate::tool::Rule;

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
        let policy = latest
            .policy
            .ok_or_else(|| GrantError::PolicyUnknown(terms.tool.clone()))?;
        // The tool's own count, from its policy: this call's may be a rule's, for calls like
        // it only (a grant never stands for those; the dispatcher checks each call).
        let approvers = crate::tool::approvers_of(&policy);
        if approvers > 1 {
            return Err(GrantError::FourEyes {
                tool: terms.tool.clone(),
                approvers,
            });
        }
        Ok(policy)
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

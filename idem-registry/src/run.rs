//! The run a call belongs to: whose records it keeps, whom it acts for and within which
//! limits, what it may do, what was approved. Below the tools and the dispatcher, since both
//! read it (a tool's authorization and approval rules judge the call against its run).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::signed::Approval;

/// The run a call belongs to: whose records it keeps (the tenant), whom it acts for and within
/// which limits, what it may do (scopes), and what was approved. A tool's authorization
/// check and its approval rule read the run beside the call's arguments
/// ([`ToolBuilder::authorize`](crate::ToolBuilder::authorize),
/// [`Rule`](crate::tool::Rule)); a check that may read, a precondition, the body and a
/// compensation read whom it acts for and its limits from their context
/// ([`ToolContext::acting_for`](crate::ToolContext::acting_for),
/// [`ToolContext::limit`](crate::ToolContext::limit)).
///
/// ```
/// use idem::RunContext;
///
/// let run = RunContext::new("tenant-42")
///     .with_run("run-7", 3)
///     .grant("tickets:write")
///     .acting_for("cus_123")
///     .with_limit("refund", 50);
/// assert_eq!(run.tenant, "tenant-42");
/// assert_eq!(run.limit("refund"), Some(&serde_json::json!(50)));
/// ```
// No `Default`: a forgotten tenant would silently put every caller's records in one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct RunContext {
    /// The run id.
    pub run_id: Option<String>,
    /// The step within the run.
    pub step: Option<u64>,
    /// The tenant or principal. Two tenants never share a record.
    pub tenant: String,
    /// Scopes granted to the principal.
    pub scopes: BTreeSet<String>,
    /// Approvals for calls that need one.
    pub approvals: Vec<Approval>,
    /// Whom the run acts for (a customer, an account, a user), as the tool's rules compare
    /// it with the call's arguments: `"/customer_id"` must equal it, say. `None`: nobody in
    /// particular, and a rule that needs it refuses the call.
    pub acting_for: Option<String>,
    /// The run's limits by name ("refund" up to 50, say), as the tool's rules compare them
    /// with the call's arguments. A rule naming a limit the run does not carry refuses the
    /// call (authorization) or asks a person (approval).
    pub limits: BTreeMap<String, Value>,
    /// The run id its calls are accounted under when the run has none (see
    /// [`RunContext::accounted_as`]).
    pub account_as: Option<String>,
}

impl RunContext {
    /// A context for a tenant.
    pub fn new(tenant: impl Into<String>) -> Self {
        RunContext {
            run_id: None,
            step: None,
            tenant: tenant.into(),
            scopes: BTreeSet::new(),
            approvals: Vec::new(),
            acting_for: None,
            limits: BTreeMap::new(),
            account_as: None,
        }
    }

    /// Account this run's calls under `id` when it has no run id of its own (a door whose
    /// clients send none: an MCP session), without changing how they are keyed. A run with
    /// a run id is accounted under it.
    pub fn accounted_as(mut self, id: impl Into<String>) -> Self {
        self.account_as = Some(id.into());
        self
    }

    /// Say whom the run acts for (see [`RunContext::acting_for`](Self::acting_for)).
    pub fn acting_for(mut self, who: impl Into<String>) -> Self {
        self.acting_for = Some(who.into());
        self
    }

    /// Set a limit of the run, by name: a number for the `at_most`-style rules, any JSON
    /// value for `equals`.
    pub fn with_limit(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.limits.insert(name.into(), value.into());
        self
    }

    /// A limit of the run, by name.
    pub fn limit(&self, name: &str) -> Option<&Value> {
        self.limits.get(name)
    }

    /// Set the run id and step.
    pub fn with_run(mut self, run_id: impl Into<String>, step: u64) -> Self {
        self.run_id = Some(run_id.into());
        self.step = Some(step);
        self
    }

    /// Move to another step of the same run.
    pub fn at_step(mut self, step: u64) -> Self {
        self.step = Some(step);
        self
    }

    /// Grant a scope.
    pub fn grant(mut self, scope: impl Into<String>) -> Self {
        self.scopes.insert(scope.into());
        self
    }

    /// Add an approval.
    pub fn approve(mut self, approval: Approval) -> Self {
        self.approvals.push(approval);
        self
    }
}

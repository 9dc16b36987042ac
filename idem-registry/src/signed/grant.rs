//! Standing grants: a person's yes, signed, to the calls of one tool for a tenant, a run or a
//! session, for a time, within argument bounds. A call the grant covers runs without asking;
//! a call outside its bounds asks as before. The desk makes, lists and revokes them
//! (`crate::approval`); the approve stage reads them (`dispatch/approve.rs`).
//!
//! A grant is signed with a secret derived from an [`ApprovalKey`], so whoever can write to
//! the store cannot make one or widen one; its revocation is the store's word (a revoked
//! grant is never honoured again while the store says so).

use hmac::Mac;
use idem_core::Timestamp;
use idem_core::store::approvals::ApprovalPolicy;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApprovalKey, ApprovalKeys, Hmac, hex, unhex};
use crate::run::RunContext;
use crate::tool::Rule;

/// The journal step under which the record of a call a grant let through keeps the grant.
pub const GRANT_STEP: &str = "idem:grant";

/// The label of the secret grants are signed with, derived from an approval key.
const GRANT_LABEL: &[u8] = b"idem-grant-v1";

/// Which calls of its tenant a grant covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum GrantScope {
    /// Every call of the tenant.
    Tenant,
    /// The calls of one run ([`RunContext::run_id`]).
    Run(String),
    /// The calls of one session: runs accounted under it ([`RunContext::account_as`], as an
    /// MCP door names its session).
    Session(String),
}

impl GrantScope {
    /// Whether `run` is within the scope.
    pub fn covers(&self, run: &RunContext) -> bool {
        match self {
            GrantScope::Tenant => true,
            GrantScope::Run(id) => run.run_id.as_deref() == Some(id),
            GrantScope::Session(id) => run.account_as.as_deref() == Some(id),
        }
    }
}

impl std::fmt::Display for GrantScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrantScope::Tenant => f.write_str("the tenant"),
            GrantScope::Run(id) => write!(f, "run `{id}`"),
            GrantScope::Session(id) => write!(f, "session `{id}`"),
        }
    }
}

/// Who revoked a grant, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Revoked {
    /// Who.
    pub by: String,
    /// When (the store's clock).
    pub at: Timestamp,
}

/// A standing grant: `by` lets the calls of `tool` for `tenant` within `scope` and `bounds`
/// run without asking, until `expires_at`, under the tool's `policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Its id (`g-` and 16 hex digits), as `idem grants revoke` takes it.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The tool.
    pub tool: String,
    /// Which of the tenant's calls.
    pub scope: GrantScope,
    /// Each bound must hold for the call's arguments ([`Rule`]s: `/amount` at most 50,
    /// `/customer` equal to `c-7`); a call outside any asks a person.
    pub bounds: Vec<Rule>,
    /// Who granted it.
    pub by: String,
    /// When (the store's clock).
    pub granted_at: Timestamp,
    /// Until when it lets calls through (the store's clock).
    pub expires_at: Timestamp,
    /// The tool's policy when it was granted: under another policy it lets nothing through.
    pub policy: ApprovalPolicy,
    /// The id of the approval key that signed it.
    pub key_id: String,
    /// HMAC-SHA-256 over everything above, hex.
    pub signature: String,
    /// Revoked, by whom and when: it lets nothing through any more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<Revoked>,
}

/// Why a grant does not let a call through (the call then asks a person as before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantMiss {
    /// Another tool, tenant or scope.
    NotCovered,
    /// Revoked.
    Revoked,
    /// Expired.
    Expired,
    /// Its signature does not verify under the dispatcher's keys.
    BadSignature,
    /// Granted under another policy of the tool.
    PolicyChanged(String),
    /// A bound does not hold, in words.
    OutOfBounds(String),
}

impl Grant {
    /// The grant's fields, signed by `key`: made by the desk ([`ApprovalDesk::grant`]).
    ///
    /// [`ApprovalDesk::grant`]: crate::approval::ApprovalDesk::grant
    pub(crate) fn signed(mut self, key: &ApprovalKey) -> Grant {
        self.key_id = key.id().to_owned();
        self.signature = hex(&self.tag(key));
        self
    }

    /// The MAC over the signed fields: their canonical JSON, under a secret derived from
    /// `key` for grants alone (an approval's MAC can never pass for a grant's).
    fn mac(&self, key: &ApprovalKey) -> Hmac {
        let signed = serde_json::json!({
            "id": self.id,
            "tenant": self.tenant,
            "tool": self.tool,
            "scope": self.scope,
            "bounds": self.bounds,
            "by": self.by,
            "granted_at": self.granted_at,
            "expires_at": self.expires_at,
            "policy": self.policy,
            "key_id": self.key_id,
        });
        let mut mac = key.derived_mac(GRANT_LABEL);
        mac.update(idem_core::canonical_json(&signed).as_bytes());
        mac
    }

    fn tag(&self, key: &ApprovalKey) -> Vec<u8> {
        self.mac(key).finalize().into_bytes().to_vec()
    }

    /// Whether the signature verifies under one of `keys` (compared in constant time).
    pub fn verifies(&self, keys: &ApprovalKeys) -> bool {
        match (keys.by_id(&self.key_id), unhex(&self.signature)) {
            (Some(key), Some(signature)) => self.mac(key).verify_slice(&signature).is_ok(),
            _ => false,
        }
    }

    /// Whether it lets the call of `tool` with `args` in `run` through at `now`, the tool's
    /// policy being `policy` and the dispatcher's keys `keys`; why not otherwise.
    pub fn admits(
        &self,
        tool: &str,
        args: &Value,
        run: &RunContext,
        now: Timestamp,
        policy: &ApprovalPolicy,
        keys: &ApprovalKeys,
    ) -> Result<(), GrantMiss> {
        if self.tool != tool || self.tenant != run.tenant || !self.scope.covers(run) {
            return Err(GrantMiss::NotCovered);
        }
        if self.revoked.is_some() {
            return Err(GrantMiss::Revoked);
        }
        if now >= self.expires_at || now < self.granted_at {
            return Err(GrantMiss::Expired);
        }
        if !self.verifies(keys) {
            return Err(GrantMiss::BadSignature);
        }
        if let Some(change) = self.policy.change_to(policy) {
            return Err(GrantMiss::PolicyChanged(change));
        }
        for bound in &self.bounds {
            bound.holds(args, run).map_err(GrantMiss::OutOfBounds)?;
        }
        Ok(())
    }

    /// Whether it still stands at `now` (not revoked, not expired).
    pub fn stands(&self, now: Timestamp) -> bool {
        self.revoked.is_none() && now < self.expires_at
    }

    /// The grant in a few words, as an account or a listing shows it: `grant g-.. by dana
    /// (run `r-1`; /amount at most 50)`.
    pub fn summary(&self) -> String {
        let mut within = vec![self.scope.to_string()];
        within.extend(self.bounds.iter().map(ToString::to_string));
        format!("grant {} by {} ({})", self.id, self.by, within.join("; "))
    }
}

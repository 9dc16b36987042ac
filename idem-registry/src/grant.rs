//! Standing grants: a person's yes, signed, to the calls of one tool for a tenant, a run or a
//! session, for a time, within argument bounds. A call the grant covers runs without asking;
//! a call outside its bounds asks as before. The desk makes, lists and revokes them
//! (`approval/grants.rs`); the approve stage reads them here ([`admitting`]).
//!
//! A grant is signed with a secret derived from an [`ApprovalKey`], so whoever can write to
//! the store cannot make one or widen one; its revocation is the store's word (a revoked
//! grant is never honoured again while the store says so). The store keeps every grant in
//! one text under the budget scope [`GRANTS_SCOPE`], changed by compare-and-swap (a grant and
//! a revocation made at once in two processes both land).

use std::time::Duration;

use hmac::Mac;
use idem_core::store::approvals::ApprovalPolicy;
use idem_core::store::decisions::LogError;
use idem_core::{Store, StoreError, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::run::RunContext;
use crate::signed::{ApprovalKey, ApprovalKeys, Hmac, hex, unhex};
use crate::tool::{Rule, ToolDef};

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
    /// The calls of one session: runs accounted under it ([`RunContext::account_as`]; the
    /// MCP door accounts a client that sends no run id as `session:<id>`, when its
    /// dispatcher keeps run accounts). `s-1` and `session:s-1` name the same session.
    Session(String),
}

impl GrantScope {
    /// Whether `run` is within the scope.
    pub fn covers(&self, run: &RunContext) -> bool {
        match self {
            GrantScope::Tenant => true,
            GrantScope::Run(id) => run.run_id.as_deref() == Some(id),
            // A door accounts a session's calls as `session:<id>` (the MCP server does):
            // either spelling of the session names it.
            GrantScope::Session(id) => run.account_as.as_deref().is_some_and(|a| {
                let bare = |s: &str| s.strip_prefix("session:").unwrap_or(s).to_owned();
                bare(a) == bare(id)
            }),
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
pub(crate) async fn load(store: &dyn Store) -> Result<(Option<String>, Vec<Grant>), GrantError> {
    let text = store.budget_text(GRANTS_SCOPE).await?;
    let kept: Kept = match &text {
        Some(text) => serde_json::from_str(text).map_err(|e| GrantError::Corrupt(e.to_string()))?,
        None => Kept::default(),
    };
    Ok((text, kept.grants))
}

/// Load the grants, let `change` edit them at the store's `now` (or refuse), drop those
/// ended long ago, and swap the text in unless another writer changed it; retried then.
pub(crate) async fn change<T>(
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
/// standing, signed under `keys`, for this tool, tenant and scope, under `policy` (the tool's
/// now, as the approve stage built it), every bound holding.
pub(crate) async fn admitting(
    store: &dyn Store,
    tool: &ToolDef,
    args: &Value,
    run: &RunContext,
    now: Timestamp,
    policy: &ApprovalPolicy,
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
    for grant in kept.grants {
        match grant.admits(tool.name(), args, run, now, policy, keys) {
            Ok(()) => return Ok(Some(grant)),
            Err(GrantMiss::BadSignature) => {
                tracing::warn!(grant = %grant.id, "a grant in the store does not verify; ignored");
            }
            // The grant covered this call under the tool's earlier policy: say what changed,
            // as an approval refused for it would.
            Err(GrantMiss::PolicyChanged(change)) => {
                tracing::info!(grant = %grant.id, tool = %grant.tool, %change, "a grant made under another policy of the tool lets nothing through; the call asks a person");
            }
            Err(_) => {}
        }
    }
    Ok(None)
}

pub(crate) fn new_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let mut fallback = [0u8; 16];
        crate::signed::fallback_nonce(&mut fallback);
        bytes.copy_from_slice(&fallback[8..]);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("g-{hex}")
}

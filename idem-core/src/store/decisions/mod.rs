//! The decision log: every decision a person makes about calls and runs (approve, deny,
//! resolve, release, retry, undo a run, ...) appended to a hash chain in the store, so that
//! an operator who can write to the store cannot quietly rewrite who decided what.
//!
//! Each entry names who decided, what, when (the store's clock), through which door (the
//! inbox, the CLI, an MCP client, ...), about which call (tenant, tool, key) and what the
//! person was shown (the arguments' fingerprint); it carries the hash of the entry before it,
//! and its own hash covers all of that. [`verify`] walks the chain and names the first link
//! that does not hold: an entry changed, removed or put in another's place.
//!
//! The log is kept over the budget primitives every store has ([`Store::budget_text`],
//! [`Store::swap_budget`]): entry `n` is the text under scope `idem:decisions:n`, written
//! only if that scope is empty, so two appenders can never both take the same place; a loser
//! reads the winner's entry and links after it. Nothing here is signed (the store holds no
//! key): a signed export (`idem audit export`) is what an auditor keeps outside the store, and
//! an export from earlier names the head a later chain must still contain.
//!
//! ```
//! use idem::store::decisions::{self, Action, Decision};
//! use idem::store::memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let store = MemoryStore::new();
//! let decision = Decision::new("dana@example.com", Action::Approve, "inbox", "tenant-42")
//!     .about("send_payment", "k-1");
//! let logged = decisions::append(&store, &decision).await.unwrap();
//! assert_eq!(logged.seq, 1);
//! let chain = decisions::verify(&store).await.unwrap();
//! assert_eq!(chain.entries, 1);
//! assert_eq!(chain.head, Some(logged.hash));
//! # }
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::Fingerprint;
use crate::record::Timestamp;
use crate::store::{Store, StoreError};

/// The budget scope of entry `seq`.
fn scope(seq: u64) -> String {
    format!("{SCOPE_PREFIX}{seq}")
}

/// The scopes the log is kept under: `idem:decisions:1`, `idem:decisions:2`, ...
pub const SCOPE_PREFIX: &str = "idem:decisions:";

/// The scope of the hint where the chain ends (a hint only: the chain is the entries).
const HEAD_SCOPE: &str = "idem:decisions:head";

/// The door a decision is logged through when the deciding code names none (code calling a
/// desk directly).
pub const DEFAULT_DOOR: &str = "api";

/// How long an entry is kept: a decision log is kept as long as the store is.
pub const RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How many places an append tries before it reports the log as too contended.
const ATTEMPTS: usize = 64;

/// What a person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// A call approved.
    Approve,
    /// A call denied.
    Deny,
    /// An Unknown or escalated call's outcome settled by a person.
    Resolve,
    /// A held call let go (its lease ended), so that another may take it.
    Release,
    /// A case sent back to run again.
    Retry,
    /// A run's applied calls undone at a person's word.
    UndoRun,
    /// A standing grant made: a tool's calls within bounds run without asking.
    Grant,
    /// A standing grant revoked.
    Revoke,
}

impl Action {
    /// The action's name, as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Approve => "approve",
            Action::Deny => "deny",
            Action::Resolve => "resolve",
            Action::Release => "release",
            Action::Retry => "retry",
            Action::UndoRun => "undo_run",
            Action::Grant => "grant",
            Action::Revoke => "revoke",
        }
    }
}

/// One decision, as the deciding code describes it (the log adds its place, time and links).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// Who decided: the approver's or operator's identity.
    pub by: String,
    /// What they decided.
    pub action: Action,
    /// Through which door: `inbox`, `cli`, `mcp`, `api`, ...
    pub door: String,
    /// The tenant of the call or run.
    pub tenant: String,
    /// The tool, for a decision about a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What was decided about: a call's record key, or a run's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The fingerprint of the arguments the person was shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<Fingerprint>,
    /// Anything else the decision said (a denial's reason, the outcome settled), never a
    /// secret: the deciding code writes what its person typed or chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Decision {
    /// `by`'s `action` through `door`, for `tenant`.
    pub fn new(
        by: impl Into<String>,
        action: Action,
        door: impl Into<String>,
        tenant: impl Into<String>,
    ) -> Self {
        Decision {
            by: by.into(),
            action,
            door: door.into(),
            tenant: tenant.into(),
            tool: None,
            subject: None,
            shown: None,
            detail: None,
        }
    }

    /// About `tool`'s call under `subject` (its record key).
    pub fn about(mut self, tool: impl Into<String>, subject: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self.subject = Some(subject.into());
        self
    }

    /// About the run `run_id`.
    pub fn about_run(mut self, run_id: impl Into<String>) -> Self {
        self.subject = Some(run_id.into());
        self
    }

    /// With the fingerprint of the arguments the person was shown.
    pub fn shown(mut self, fingerprint: Fingerprint) -> Self {
        self.shown = Some(fingerprint);
        self
    }

    /// With what else the decision said.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// One entry of the log: a decision, its place, time and links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Logged {
    /// Its place in the chain, from 1.
    pub seq: u64,
    /// When it was appended (the store's clock).
    pub at: Timestamp,
    /// The decision.
    pub decision: Decision,
    /// The hash of the entry before it (`None` for the first).
    pub prev: Option<Fingerprint>,
    /// The SHA-256 of this entry's canonical JSON without this field.
    pub hash: Fingerprint,
}

impl Logged {
    /// Whether the entry's hash is that of its contents (it was not changed since it was
    /// appended, or it was hashed again: only its link from the next entry tells that).
    pub fn is_intact(&self) -> bool {
        self.computed_hash() == self.hash
    }

    /// The hash this entry's other fields give.
    fn computed_hash(&self) -> Fingerprint {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut value {
            fields.remove("hash");
        }
        Fingerprint::of(&value)
    }
}

/// What [`verify`] found: a chain that holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// How many entries it has.
    pub entries: u64,
    /// The last entry's hash (`None`: an empty log).
    pub head: Option<Fingerprint>,
}

/// Why the chain does not hold, at its first broken link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainBroken {
    /// An entry is not an entry of the log.
    #[error("decision log entry {seq} is unreadable: {reason}")]
    Unreadable {
        /// Its place.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An entry says another place than the one it is kept in.
    #[error("decision log entry {seq} says it is entry {says}: it was moved")]
    Moved {
        /// Where it is kept.
        seq: u64,
        /// Where it says it belongs.
        says: u64,
    },
    /// An entry's contents do not give its hash: it was changed after it was appended.
    #[error(
        "decision log entry {seq} was changed after it was appended: its hash does not match its contents"
    )]
    Changed {
        /// Its place.
        seq: u64,
    },
    /// An entry does not link to the one before it: that one was changed or replaced.
    #[error("decision log entry {seq} does not follow entry {}: the chain was rewritten at or before it", seq - 1)]
    Unlinked {
        /// Its place.
        seq: u64,
    },
    /// The log ends before an entry the store has said it holds.
    #[error(
        "decision log entry {missing} is missing, yet the log reached entry {reached}: entries were removed"
    )]
    Missing {
        /// The first place with no entry.
        missing: u64,
        /// The last place the log is known to have reached.
        reached: u64,
    },
}

/// Why an append or a verification did not happen.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The chain is broken: nothing is appended after a broken link.
    #[error(transparent)]
    Broken(#[from] ChainBroken),
}

/// Read entry `seq`, if there is one.
async fn entry<S: Store + ?Sized>(store: &S, seq: u64) -> Result<Option<Logged>, LogError> {
    let Some(text) = store.budget_text(&scope(seq)).await? else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        LogError::Broken(ChainBroken::Unreadable {
            seq,
            reason: e.to_string(),
        })
    })
}

/// Where the head hint says the chain ends (0: nothing appended yet, or no hint).
async fn hinted<S: Store + ?Sized>(store: &S) -> Result<(u64, Option<String>), StoreError> {
    let text = store.budget_text(HEAD_SCOPE).await?;
    let seq = text.as_deref().and_then(|t| t.parse().ok()).unwrap_or(0);
    Ok((seq, text))
}

/// Append `decision` to the log, at the store's time; the entry as kept.
///
/// The entry links to the last one; an append that finds the chain broken where it links
/// refuses ([`LogError::Broken`]) rather than extend a rewritten log.
pub async fn append<S: Store + ?Sized>(store: &S, decision: &Decision) -> Result<Logged, LogError> {
    let (mut last, _) = hinted(store).await?;
    for _ in 0..ATTEMPTS {
        // The hint may lag behind appenders that stopped before moving it: walk to the end.
        let mut before = match last {
            0 => None,
            n => entry(store, n).await?,
        };
        while let Some(next) = entry(store, after(last)?).await? {
            last += 1;
            before = Some(next);
        }
        if last > 0 && before.is_none() {
            return Err(ChainBroken::Missing {
                missing: last,
                reached: last,
            }
            .into());
        }
        if let Some(before) = &before
            && (before.seq != last || !before.is_intact())
        {
            return Err(ChainBroken::Changed { seq: last }.into());
        }
        let mut logged = Logged {
            seq: after(last)?,
            at: store.now().await?,
            decision: decision.clone(),
            prev: before.map(|b| b.hash),
            hash: Fingerprint::from_bytes([0; 32]),
        };
        logged.hash = logged.computed_hash();
        let text = serde_json::to_string(&logged).unwrap_or_default();
        if store
            .swap_budget(&scope(logged.seq), None, &text, RETENTION)
            .await?
        {
            // The entry is in the chain: a hint left behind only lengthens the next walk.
            if let Err(e) = move_hint(store, logged.seq).await {
                tracing::warn!(error = %e, seq = logged.seq, "the decision log's head hint was not moved");
            }
            return Ok(logged);
        }
        // Another appender took the place: link after its entry.
    }
    Err(StoreError::Unavailable(format!(
        "the decision log kept growing under this append: {ATTEMPTS} places were taken first"
    ))
    .into())
}

/// The place after `seq`; a hint at the end of the numbers was not written by an append.
fn after(seq: u64) -> Result<u64, LogError> {
    seq.checked_add(1).ok_or_else(|| {
        LogError::Broken(ChainBroken::Unreadable {
            seq,
            reason: "the log's head hint is past any place an append could take".into(),
        })
    })
}

/// Move the head hint up to `seq` (never down): a hint that lags only costs the next
/// appender and verifier a longer walk.
async fn move_hint<S: Store + ?Sized>(store: &S, seq: u64) -> Result<(), StoreError> {
    for _ in 0..ATTEMPTS {
        let (hinted, text) = hinted(store).await?;
        if hinted >= seq
            || store
                .swap_budget(HEAD_SCOPE, text.as_deref(), &seq.to_string(), RETENTION)
                .await?
        {
            return Ok(());
        }
    }
    Ok(())
}

/// Entries `from` (1 for the first) onwards, at most `limit` of them, as kept (not checked:
/// [`verify`] checks).
pub async fn read<S: Store + ?Sized>(
    store: &S,
    from: u64,
    limit: usize,
) -> Result<Vec<Logged>, LogError> {
    let mut entries = Vec::new();
    let mut seq = from.max(1);
    while entries.len() < limit {
        match entry(store, seq).await? {
            Some(logged) => entries.push(logged),
            None => break,
        }
        seq += 1;
    }
    Ok(entries)
}

/// One link of the chain: `logged` is in place `seq`, its hash is that of its contents, and it
/// links to `prev` (the hash of the entry before it; `None` for the first). Its hash, the next
/// entry's `prev`, if the link holds. What [`verify`] checks of each entry in the store, and
/// what an export's reader checks of each of its lines.
///
/// ```
/// use idem::store::decisions::{ChainBroken, follows};
/// # fn check(entries: &[idem::store::decisions::Logged]) -> Result<(), ChainBroken> {
/// let mut prev = None;
/// for (i, entry) in entries.iter().enumerate() {
///     prev = Some(follows(entry, i as u64 + 1, prev)?);
/// }
/// # Ok(())
/// # }
/// ```
pub fn follows(
    logged: &Logged,
    seq: u64,
    prev: Option<Fingerprint>,
) -> Result<Fingerprint, ChainBroken> {
    if logged.seq != seq {
        return Err(ChainBroken::Moved {
            seq,
            says: logged.seq,
        });
    }
    if !logged.is_intact() {
        return Err(ChainBroken::Changed { seq });
    }
    if logged.prev != prev {
        return Err(ChainBroken::Unlinked { seq });
    }
    Ok(logged.hash)
}

/// Walk the whole chain and check every link: each entry in its place, its hash that of its
/// contents, linked to the one before; and no entry missing below where the log is known to
/// have reached. `Err(LogError::Broken)` names the first link that does not hold.
pub async fn verify<S: Store + ?Sized>(store: &S) -> Result<Chain, LogError> {
    let (reached, _) = hinted(store).await?;
    let mut prev: Option<Fingerprint> = None;
    let mut seq = 1;
    loop {
        let Some(logged) = entry(store, seq).await? else {
            break;
        };
        prev = Some(follows(&logged, seq, prev)?);
        seq += 1;
    }
    let entries = seq - 1;
    if entries < reached {
        return Err(ChainBroken::Missing {
            missing: seq,
            reached,
        }
        .into());
    }
    Ok(Chain {
        entries,
        head: prev,
    })
}

#[cfg(test)]
mod tests;

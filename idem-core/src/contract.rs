//! The execution contract: the policy a record was made under, kept in the record so that a
//! deploy that changes a tool cannot quietly apply its new policy to calls made under the old
//! one.
//!
//! A record keeps the [`Contract`] of the claim that created it; a take-over keeps it. When a
//! worker meets a record made under another contract than its own tool's, the rules are
//! ([`Contract::reconcile`], tested as a table):
//!
//! | field | rule |
//! |---|---|
//! | `class` | the stricter of the two classes applies (`read` < `idempotent_write` < `non_idempotent_write` < `irreversible`): an orphan is taken over only if both classes take orphans over; otherwise it turns Unknown and is never re-run |
//! | `version` | a changed handler version never re-runs a call the stricter class does not allow to re-run (as above), and its verify hook is not asked about an Unknown record the other version made: the record is left to an operator. An `idempotent_write` is re-run under the new version with the same downstream key |
//! | `natural_key` | no rule: the record key already names the call, however it was derived |
//! | `verify` | no rule: a hook is asked if the tool has one now (and the version is the same) |
//! | `ttl` | a record completed by a take-over, a verification or a recovery is kept for the longer of the two TTLs |
//! | `lease` | the holder's lease end is stored when it is granted or renewed: a deploy that shortens the lease never makes a live holder look dead; the new holder gets the new lease |
//!
//! A replay of a completed record is unaffected by any of them.
//!
//! One change is outside these rules: a tool reclassified as `read` records nothing and reads
//! no record, so its calls run again whatever was recorded under their keys. Do not make a
//! write a `read` while its records are InProgress or Unknown (list them first).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::class::{OrphanPolicy, ToolClass};

/// The handler version a tool has unless it says otherwise (`#[tool(version = "...")]`).
pub const DEFAULT_VERSION: &str = "1";

/// What is wrong with a handler version, if anything: it is 1 to 64 characters, without
/// surrounding spaces or control characters (`#[tool]` checks the same at compile time).
///
/// ```
/// use idem::contract::check_version;
/// assert!(check_version("2026-12.1").is_ok());
/// assert!(check_version(" 2").unwrap_err().contains("surrounding spaces"));
/// ```
pub fn check_version(version: &str) -> Result<(), String> {
    if version.trim().is_empty() {
        return Err("a handler version cannot be empty (the default is \"1\")".into());
    }
    if version.len() > 64 || version.trim() != version || version.chars().any(char::is_control) {
        return Err(format!(
            "handler version {version:?} must be at most 64 characters, without surrounding \
             spaces or control characters"
        ));
    }
    Ok(())
}

/// The policy a record was made under.
///
/// ```
/// use std::time::Duration;
/// use idem::contract::Contract; use idem::ToolClass;
///
/// let made = Contract::new(ToolClass::IdempotentWrite, "1", Duration::from_secs(60), Duration::from_secs(5));
/// let now = Contract { class: ToolClass::NonIdempotentWrite, ..made.clone() };
/// let rule = made.reconcile(&now);
/// assert_eq!(rule.class, ToolClass::NonIdempotentWrite);
/// assert!(!rule.may_rerun());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Contract {
    /// The tool's class.
    pub class: ToolClass,
    /// The handler's version (`#[tool(version = "...")]`, default [`DEFAULT_VERSION`]).
    pub version: String,
    /// Whether the tool derives its key from its arguments (a natural key).
    #[serde(default)]
    pub natural_key: bool,
    /// Whether the tool has a verify hook.
    #[serde(default)]
    pub verify: bool,
    /// How long a completed record is kept.
    #[serde(with = "millis")]
    pub ttl: Duration,
    /// How long a holder's lease lasts.
    #[serde(with = "millis")]
    pub lease: Duration,
    /// Whether the tool undoes its completed steps when a later one fails for good: its
    /// orphan is taken over whatever its class, for the dispatcher to resume a compensation
    /// its holder left (an orphan that was not compensating it turns Unknown itself).
    /// Absent from the JSON when false, as in contracts from before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compensates: bool,
}

/// What applies to a record made under one contract and met under another
/// ([`Contract::reconcile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The class whose policy applies: the stricter of the two.
    pub class: ToolClass,
    /// Whether the handler's version changed.
    pub version_changed: bool,
    /// How long the record is kept once completed: the longer TTL.
    pub ttl: Duration,
}

impl Reconciled {
    /// Whether the call may run again (a take-over or a recovery): only if the applying class
    /// takes orphans over.
    pub fn may_rerun(&self) -> bool {
        self.class.orphan_policy() == OrphanPolicy::TakeOver
    }

    /// Whether a verify hook of the current tool may settle an Unknown record made under the
    /// recorded contract: not across a change of handler version.
    pub fn may_verify(&self) -> bool {
        !self.version_changed
    }
}

impl Contract {
    /// A contract of a tool without natural key and verify hook.
    pub fn new(
        class: ToolClass,
        version: impl Into<String>,
        ttl: Duration,
        lease: Duration,
    ) -> Self {
        Contract {
            class,
            version: version.into(),
            natural_key: false,
            verify: false,
            ttl,
            lease,
            compensates: false,
        }
    }

    /// The rules (module docs) for a record made under `self`, met by a worker whose tool now
    /// has the contract `current`.
    pub fn reconcile(&self, current: &Contract) -> Reconciled {
        Reconciled {
            class: self.class.stricter(current.class),
            version_changed: self.version != current.version,
            ttl: self.ttl.max(current.ttl),
        }
    }

    /// Whether a record made under this contract may have its orphan taken over: its class
    /// takes orphans over, or its tool compensates (the dispatcher then decides). The stores
    /// apply it together with the claim's own policy.
    pub fn takes_over(&self) -> bool {
        // As the Redis claim script and the Postgres claim statement say it: a `read` records
        // nothing, so a record claimed as one is held to the strict rule.
        self.class == ToolClass::IdempotentWrite || self.compensates
    }

    /// The contract as the JSON text the stores keep.
    pub fn to_json(&self) -> String {
        // A struct of strings, booleans and numbers: serialising it cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Read a stored contract back.
    pub fn from_json(text: &str) -> Result<Contract, String> {
        serde_json::from_str(text).map_err(|e| format!("its contract is not readable: {e}"))
    }
}

/// The orphan policy that applies when a claim with `requested` meets an orphan made under
/// `made` (none for a record from before contracts were kept): the stricter of the two.
pub fn orphan_policy(requested: OrphanPolicy, made: Option<&Contract>) -> OrphanPolicy {
    match made {
        Some(c) if !c.takes_over() => OrphanPolicy::MarkUnknown,
        _ => requested,
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(class: ToolClass) -> Contract {
        Contract::new(class, "1", Duration::from_secs(60), Duration::from_secs(10))
    }

    /// Every pair of classes: the stricter applies, and only `idempotent_write` on both sides
    /// re-runs.
    #[test]
    fn the_stricter_class_applies() {
        use ToolClass::*;
        let table = [
            (IdempotentWrite, IdempotentWrite, IdempotentWrite, true),
            (
                IdempotentWrite,
                NonIdempotentWrite,
                NonIdempotentWrite,
                false,
            ),
            (
                NonIdempotentWrite,
                IdempotentWrite,
                NonIdempotentWrite,
                false,
            ),
            (Irreversible, IdempotentWrite, Irreversible, false),
            (IdempotentWrite, Irreversible, Irreversible, false),
            (NonIdempotentWrite, Irreversible, Irreversible, false),
            (IdempotentWrite, Read, IdempotentWrite, true),
        ];
        for (recorded, current, applies, reruns) in table {
            let rule = made(recorded).reconcile(&made(current));
            assert_eq!(rule.class, applies, "{recorded:?} met as {current:?}");
            assert_eq!(rule.may_rerun(), reruns, "{recorded:?} met as {current:?}");
            let policy = orphan_policy(current.orphan_policy(), Some(&made(recorded)));
            assert_eq!(
                policy == OrphanPolicy::TakeOver,
                reruns,
                "{recorded:?} met as {current:?}"
            );
        }
    }

    #[test]
    fn a_changed_version_is_never_verified_and_the_longer_ttl_is_kept() {
        let old = made(ToolClass::NonIdempotentWrite);
        let new = Contract {
            version: "2".into(),
            ttl: Duration::from_secs(5),
            ..old.clone()
        };
        let rule = old.reconcile(&new);
        assert!(rule.version_changed && !rule.may_verify() && !rule.may_rerun());
        assert_eq!(rule.ttl, Duration::from_secs(60));
        // The same version: verified as usual.
        assert!(old.reconcile(&old).may_verify());
        // An idempotent write re-runs under the new version (same downstream key).
        let idem = made(ToolClass::IdempotentWrite);
        let bumped = Contract {
            version: "2".into(),
            ..idem.clone()
        };
        assert!(idem.reconcile(&bumped).may_rerun());
    }

    #[test]
    fn natural_key_verify_and_lease_changes_change_no_rule() {
        let old = made(ToolClass::IdempotentWrite);
        let new = Contract {
            natural_key: true,
            verify: true,
            lease: Duration::from_secs(1),
            ..old.clone()
        };
        assert_eq!(old.reconcile(&new), old.reconcile(&old));
    }

    #[test]
    fn a_record_without_a_contract_follows_the_claim() {
        for policy in [OrphanPolicy::TakeOver, OrphanPolicy::MarkUnknown] {
            assert_eq!(orphan_policy(policy, None), policy);
        }
    }

    #[test]
    fn the_stored_text_reads_back_and_names_what_is_wrong() {
        let c = Contract {
            natural_key: true,
            ..made(ToolClass::Irreversible)
        };
        let text = c.to_json();
        assert_eq!(
            text,
            r#"{"class":"irreversible","version":"1","natural_key":true,"verify":false,"ttl":60000,"lease":10000}"#
        );
        assert_eq!(Contract::from_json(&text).unwrap(), c);
        let e = Contract::from_json(r#"{"class":"sometimes"}"#).unwrap_err();
        assert!(e.contains("contract is not readable"), "{e}");
    }
}

//! Keys: where they come from, how they are scoped, and what the tool hands downstream.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::canonical::hex;

/// The material a call's key is derived from, in the order the dispatcher looks for it.
///
/// There is deliberately no variant for "the arguments": the same email may legitimately be
/// sent twice tomorrow, so arguments alone never identify a call unless a tool declares a
/// natural key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum KeyMaterial {
    /// A key the caller supplied explicitly.
    Explicit {
        /// The caller's key.
        key: String,
    },
    /// The provider's tool call id.
    CallId {
        /// The call id as the provider sent it.
        call_id: String,
    },
    /// The run's identity and the step within it.
    RunStep {
        /// The run id.
        run_id: String,
        /// The step number inside the run.
        step: u64,
        /// The call's position among the parallel calls of the step.
        #[serde(default)]
        index: u32,
    },
    /// A key the tool computed from its arguments (find-or-create semantics).
    Natural {
        /// The tool's natural key.
        key: String,
    },
}

impl KeyMaterial {
    /// A short name of where the key came from, for logs and tables.
    pub fn source(&self) -> &'static str {
        match self {
            KeyMaterial::Explicit { .. } => "explicit",
            KeyMaterial::CallId { .. } => "call_id",
            KeyMaterial::RunStep { .. } => "run_step",
            KeyMaterial::Natural { .. } => "natural",
        }
    }
}

/// Everything a key is scoped by: two scopes that differ anywhere never share a record.
///
/// ```
/// use idem_core::{KeyMaterial, LogicalKey};
///
/// let material = KeyMaterial::CallId { call_id: "call_1".into() };
/// let a = LogicalKey::new("shop", "tenant-a", "send_email", material.clone());
/// let b = LogicalKey::new("shop", "tenant-b", "send_email", material);
/// assert_ne!(a.record_key(), b.record_key());
/// assert_ne!(a.downstream_key(), b.downstream_key());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogicalKey {
    /// A stable string naming the application (not a Rust path: refactors must not orphan records).
    pub namespace: String,
    /// The tenant or principal the call acts for.
    pub tenant: String,
    /// The tool's registered name.
    pub tool: String,
    /// Where the key came from.
    pub material: KeyMaterial,
}

impl LogicalKey {
    /// Assemble a logical key.
    pub fn new(
        namespace: impl Into<String>,
        tenant: impl Into<String>,
        tool: impl Into<String>,
        material: KeyMaterial,
    ) -> Self {
        LogicalKey {
            namespace: namespace.into(),
            tenant: tenant.into(),
            tool: tool.into(),
            material,
        }
    }

    fn digest(&self, domain: &str) -> [u8; 32] {
        // Length-prefixed fields: no choice of strings can make two keys collide by concatenation.
        let mut h = Sha256::new();
        let mut field = |s: &str| {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        };
        field(domain);
        field(&self.namespace);
        field(&self.tenant);
        field(&self.tool);
        field(self.material.source());
        match &self.material {
            KeyMaterial::Explicit { key } | KeyMaterial::Natural { key } => field(key),
            KeyMaterial::CallId { call_id } => field(call_id),
            KeyMaterial::RunStep {
                run_id,
                step,
                index,
            } => {
                field(run_id);
                field(&step.to_string());
                field(&index.to_string());
            }
        }
        h.finalize().into()
    }

    /// The key the record is stored under.
    pub fn record_key(&self) -> RecordKey {
        RecordKey(hex(&self.digest("idem/record/v1")))
    }

    /// The key handed to downstream systems: the same for every attempt and every takeover.
    pub fn downstream_key(&self) -> IdempotencyKey {
        let d = self.digest("idem/downstream/v1");
        IdempotencyKey(format!("idem-{}", hex(&d[..20])))
    }
}

/// The key a record is stored under: 64 lower-case hex digits.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RecordKey(String);

impl RecordKey {
    /// Wrap a stored key read back from a store.
    pub fn from_stored(s: impl Into<String>) -> Self {
        RecordKey(s.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordKey({})", self.0)
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The stable key a tool passes downstream (as an `Idempotency-Key` header, a Message-ID, ...).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Wrap a key (for a read tool without key material, or a stored value).
    pub fn new(s: impl Into<String>) -> Self {
        IdempotencyKey(s.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.0)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, tenant: &str, tool: &str, m: KeyMaterial) -> LogicalKey {
        LogicalKey::new(ns, tenant, tool, m)
    }

    #[test]
    fn every_scope_field_separates_records() {
        let m = || KeyMaterial::Explicit { key: "k".into() };
        let base = key("ns", "t", "tool", m()).record_key();
        assert_ne!(base, key("ns2", "t", "tool", m()).record_key());
        assert_ne!(base, key("ns", "t2", "tool", m()).record_key());
        assert_ne!(base, key("ns", "t", "tool2", m()).record_key());
        assert_ne!(
            base,
            key(
                "ns",
                "t",
                "tool",
                KeyMaterial::CallId {
                    call_id: "k".into()
                }
            )
            .record_key()
        );
        assert_eq!(base, key("ns", "t", "tool", m()).record_key());
        assert_eq!(base.as_str().len(), 64);
    }

    #[test]
    fn concatenation_cannot_collide() {
        let a = key("ab", "c", "t", KeyMaterial::Explicit { key: "k".into() });
        let b = key("a", "bc", "t", KeyMaterial::Explicit { key: "k".into() });
        assert_ne!(a.record_key(), b.record_key());
    }

    #[test]
    fn downstream_key_is_stable_and_distinct_from_record_key() {
        let a = key(
            "ns",
            "t",
            "tool",
            KeyMaterial::RunStep {
                run_id: "r".into(),
                step: 3,
                index: 0,
            },
        );
        let parallel = key(
            "ns",
            "t",
            "tool",
            KeyMaterial::RunStep {
                run_id: "r".into(),
                step: 3,
                index: 1,
            },
        );
        assert_ne!(
            a.record_key(),
            parallel.record_key(),
            "parallel calls of a step differ"
        );
        assert_eq!(a.downstream_key(), a.clone().downstream_key());
        assert!(a.downstream_key().as_str().starts_with("idem-"));
        assert_ne!(a.downstream_key().as_str(), a.record_key().as_str());
    }
}

//! Keys: where they come from, how they are scoped, and what the tool hands downstream.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::canonical::write_hex;

// The fingerprint a key is made with, and the canonical JSON it is taken of, are part of
// the key vocabulary.
pub use crate::canonical::{Fingerprint, canonical_json};

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
    /// The provider's tool call id, scoped by the run when the call has one: local models
    /// and several OpenAI-compatible servers number calls `call_0`, `call_1` in every
    /// response, so two runs would otherwise share records.
    CallId {
        /// The call id as the provider sent it.
        call_id: String,
        /// The run the call belongs to, if the caller named one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
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
    /// A call that brought no key of its own, keyed by where it came from (an MCP session,
    /// or the tenant) and the fingerprint of its arguments: a client that re-issues the same
    /// request finds the first one's record for as long as it is kept (the re-send window).
    Resend {
        /// Where the call came from: a session id, or empty for the tenant as a whole.
        scope: String,
        /// The fingerprint of the call's canonical (sealed) arguments, in hex.
        fingerprint: String,
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
            KeyMaterial::Resend { .. } => "resend",
        }
    }
}

/// Where a call's key came from, in the order the dispatcher tries them. A `KeyReused`
/// refusal says what its reader can do by it: a key that names one call (explicit, call id,
/// run and step) reused for another is the mistake of whoever chose it; a natural key names
/// an entity, which exists already.
///
/// ```
/// use idem::key::KeySource;
///
/// assert_eq!(KeySource::CallId.to_string(), "call id");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeySource {
    /// A key the caller passed (`ToolCall::with_key`; MCP's `_meta` key), or the one the
    /// dispatcher made of the sealed arguments of a call keyed by them
    /// (`ToolCall::with_key_by_arguments`).
    Explicit,
    /// The tool's natural key, computed from the arguments (find-or-create).
    Natural,
    /// The provider's tool call id, scoped by the run when there is one.
    CallId,
    /// The run id, the step and the call's index in the step.
    RunStep,
    /// The re-send window of a call that brought no key: where it came from and its
    /// arguments (`ToolCall::with_resend_window`).
    Resend,
}

impl KeySource {
    /// The source of `material`.
    pub fn of(material: &KeyMaterial) -> Self {
        match material {
            KeyMaterial::Explicit { .. } => KeySource::Explicit,
            KeyMaterial::Natural { .. } => KeySource::Natural,
            KeyMaterial::CallId { .. } => KeySource::CallId,
            KeyMaterial::RunStep { .. } => KeySource::RunStep,
            KeyMaterial::Resend { .. } => KeySource::Resend,
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeySource::Explicit => "explicit key",
            KeySource::Natural => "natural key",
            KeySource::CallId => "call id",
            KeySource::RunStep => "run and step",
            KeySource::Resend => "re-send window",
        })
    }
}

/// Everything a key is scoped by: two scopes that differ anywhere never share a record.
///
/// ```
/// use idem::key::{KeyMaterial, LogicalKey};
///
/// let material = KeyMaterial::CallId { call_id: "call_1".into(), run_id: None };
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

    /// [`record_key`](LogicalKey::record_key) and
    /// [`downstream_key`](LogicalKey::downstream_key) of a logical key given by its parts,
    /// without assembling it (what the dispatcher does on every call).
    ///
    /// ```
    /// use idem::key::{KeyMaterial, LogicalKey};
    ///
    /// let material = KeyMaterial::CallId { call_id: "call_1".into(), run_id: None };
    /// let (record, downstream) = LogicalKey::derive("app", "acme", "send_email", &material);
    /// let key = LogicalKey::new("app", "acme", "send_email", material);
    /// assert_eq!((record, downstream), (key.record_key(), key.downstream_key()));
    /// ```
    pub fn derive(
        namespace: &str,
        tenant: &str,
        tool: &str,
        material: &KeyMaterial,
    ) -> (RecordKey, IdempotencyKey) {
        let record = digest(namespace, tenant, tool, material);
        let downstream = downstream_digest(&record);
        (record_key_of(&record), downstream_key_of(&downstream))
    }

    fn digest(&self) -> [u8; 32] {
        digest(&self.namespace, &self.tenant, &self.tool, &self.material)
    }

    /// The key the record is stored under.
    pub fn record_key(&self) -> RecordKey {
        record_key_of(&self.digest())
    }

    /// The key handed to downstream systems: the same for every attempt and every takeover.
    pub fn downstream_key(&self) -> IdempotencyKey {
        downstream_key_of(&downstream_digest(&self.digest()))
    }
}

/// The domain of the record key's digest. v2: call ids are scoped by the run.
const RECORD_DOMAIN: &str = "idem/record/v2";
const DOWNSTREAM_DOMAIN: &[u8] = b"idem/downstream/v2";
/// The domain of a journaled step's downstream key.
const STEP_DOMAIN: &[u8] = b"idem/step/v1";

/// The downstream key's digest, from the record key's: one SHA-256 block over a fixed-size
/// input instead of hashing the scope a second time. It cannot be turned back into the
/// record key, and the two never share text.
fn downstream_digest(record: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DOWNSTREAM_DOMAIN);
    h.update(record);
    h.finalize().into()
}

/// SHA-256 of the length-prefixed fields: no choice of strings can make two keys collide by
/// concatenation.
fn digest(namespace: &str, tenant: &str, tool: &str, material: &KeyMaterial) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |s: &[u8]| {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s);
    };
    field(RECORD_DOMAIN.as_bytes());
    field(namespace.as_bytes());
    field(tenant.as_bytes());
    field(tool.as_bytes());
    field(material.source().as_bytes());
    match material {
        KeyMaterial::Explicit { key } | KeyMaterial::Natural { key } => field(key.as_bytes()),
        KeyMaterial::CallId { call_id, run_id } => {
            field(call_id.as_bytes());
            // A presence field: no run and a run named "" stay apart.
            match run_id {
                Some(run_id) => {
                    field(b"run");
                    field(run_id.as_bytes());
                }
                None => field(b""),
            }
        }
        KeyMaterial::RunStep {
            run_id,
            step,
            index,
        } => {
            field(run_id.as_bytes());
            field(decimal(*step, &mut [0; 20]));
            field(decimal(u64::from(*index), &mut [0; 20]));
        }
        KeyMaterial::Resend { scope, fingerprint } => {
            field(scope.as_bytes());
            field(fingerprint.as_bytes());
        }
    }
    h.finalize().into()
}

/// A number's decimal digits, written into `buf` (as `to_string` would, without allocating).
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

// Both keys are written on the stack and allocated once, as the shared text they are kept in.
fn record_key_of(digest: &[u8; 32]) -> RecordKey {
    RecordKey(write_hex(digest, &mut [0; 64]).into())
}

fn downstream_key_of(digest: &[u8; 32]) -> IdempotencyKey {
    const PREFIX: &str = "idem-";
    let mut key = [0; PREFIX.len() + 40];
    key[..PREFIX.len()].copy_from_slice(PREFIX.as_bytes());
    write_hex(&digest[..20], &mut key[PREFIX.len()..]);
    IdempotencyKey(std::str::from_utf8(&key).unwrap_or_default().into())
}

/// The key a record is stored under: 64 lower-case hex digits.
///
/// Shared text: a dispatch hands its key to the claim, the holder, the heartbeat and the
/// tool's context, and a clone is a reference count, not a copy.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RecordKey(Arc<str>);

impl RecordKey {
    /// Wrap a stored key read back from a store.
    pub fn from_stored(s: impl Into<String>) -> Self {
        RecordKey(s.into().into())
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
///
/// Shared text, as [`RecordKey`]: the key travels into the context, the outcome and errors.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(Arc<str>);

impl IdempotencyKey {
    /// The downstream key of the call stored under `record`, as the dispatcher handed it to
    /// the call's every attempt: a recovery re-runs the call with the same key. `None` if
    /// `record` is not a record key (64 hex digits).
    ///
    /// ```
    /// use idem::IdempotencyKey; use idem::key::{KeyMaterial, LogicalKey};
    ///
    /// let material = KeyMaterial::Explicit { key: "order-7".into() };
    /// let (record, downstream) = LogicalKey::derive("app", "acme", "charge", &material);
    /// assert_eq!(IdempotencyKey::of_record(&record), Some(downstream));
    /// ```
    pub fn of_record(record: &RecordKey) -> Option<IdempotencyKey> {
        let hex = record.as_str().as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (byte, pair) in digest.iter_mut().zip(hex.chunks(2)) {
            let text = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(text, 16).ok()?;
        }
        Some(downstream_key_of(&downstream_digest(&digest)))
    }

    /// The downstream key of the journaled step `name` of the call whose key this is: each
    /// step of a multi-step tool is its own request downstream (an API that keeps
    /// idempotency keys refuses one key for two different requests), and a step's key is the
    /// same on every attempt, take-over and restart, since it is derived from the call's.
    ///
    /// ```
    /// use idem::IdempotencyKey;
    ///
    /// let call = IdempotencyKey::new("idem-58b62c8834c7597ad58886f738865f29ebcd6cbc");
    /// assert_eq!(call.for_step("charge"), call.for_step("charge"));
    /// assert_ne!(call.for_step("charge"), call.for_step("reserve"));
    /// assert!(call.for_step("charge").as_str().starts_with("idem-"));
    /// ```
    pub fn for_step(&self, name: &str) -> IdempotencyKey {
        let mut h = Sha256::new();
        for field in [STEP_DOMAIN, self.as_str().as_bytes(), name.as_bytes()] {
            h.update((field.len() as u64).to_be_bytes());
            h.update(field);
        }
        let digest: [u8; 32] = h.finalize().into();
        downstream_key_of(&digest)
    }

    /// Wrap a key (for a read tool without key material, or a stored value).
    pub fn new(s: impl Into<String>) -> Self {
        IdempotencyKey(s.into().into())
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

    /// Stored keys are a format: records written by one version are found by the next. The
    /// expected values were computed outside Rust (Python's hashlib over the length-prefixed
    /// fields), so a change to the encoding or to the hex writer fails here.
    #[test]
    fn keys_v2_are_pinned() {
        let material = KeyMaterial::CallId {
            call_id: "call_1".into(),
            run_id: Some("run-7".into()),
        };
        let (record, downstream) = LogicalKey::derive("app", "acme", "send_email", &material);
        assert_eq!(
            record.as_str(),
            "c91d70bea0a0ca17d88c22e62c916ea4cded81668e95c64dffdb18d7aebb2015"
        );
        assert_eq!(
            downstream.as_str(),
            "idem-58b62c8834c7597ad58886f738865f29ebcd6cbc"
        );
    }

    /// A step's downstream key, pinned the same way.
    #[test]
    fn step_keys_are_pinned() {
        let call = IdempotencyKey::new("idem-58b62c8834c7597ad58886f738865f29ebcd6cbc");
        assert_eq!(
            call.for_step("charge").as_str(),
            "idem-ae38be775c5982a63b6f6d63091a2832e6d59b58"
        );
    }

    /// The re-send window's key, pinned the same way.
    #[test]
    fn resend_keys_are_pinned() {
        let material = KeyMaterial::Resend {
            scope: "mcp-session-1".into(),
            fingerprint: "9f86d081884c7d65".into(),
        };
        let (record, downstream) = LogicalKey::derive("app", "acme", "send_email", &material);
        assert_eq!(
            record.as_str(),
            "b80d6cf224d93dc3faa573106380153638aaf13bc971ad06f640e0fe88ceb1ae"
        );
        assert_eq!(
            downstream.as_str(),
            "idem-5eed7f353795699d4c1f24788d054d0891c0718c"
        );
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
                    call_id: "k".into(),
                    run_id: None,
                }
            )
            .record_key()
        );
        assert_eq!(base, key("ns", "t", "tool", m()).record_key());
        assert_eq!(base.as_str().len(), 64);
    }

    #[test]
    fn a_call_id_is_scoped_by_its_run() {
        let call = |run: Option<&str>| {
            key(
                "ns",
                "t",
                "tool",
                KeyMaterial::CallId {
                    call_id: "call_0".into(),
                    run_id: run.map(str::to_owned),
                },
            )
        };
        let (a, b) = (call(Some("run-a")), call(Some("run-b")));
        assert_ne!(a.record_key(), b.record_key());
        assert_ne!(a.downstream_key(), b.downstream_key());
        assert_ne!(call(None).record_key(), call(Some("")).record_key());
        assert_eq!(a.record_key(), call(Some("run-a")).record_key());
    }

    #[test]
    fn decimal_matches_to_string() {
        for n in [0, 7, 10, 99, 12345, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
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

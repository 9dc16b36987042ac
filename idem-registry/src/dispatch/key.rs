//! The key stage: secrets sealed, key material chosen, the record and downstream keys
//! derived, the arguments fingerprinted (ARCHITECTURE.md, "Keys").

use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::{
    Fingerprint, IdempotencyKey, KeyMaterial, KeySource, LogicalKey, RecordKey, canonical_json,
};
use serde_json::Value;

use super::Dispatcher;
use super::call::ToolCall;
use super::error::DispatchError;
use crate::run::RunContext;
use crate::tool::ToolDef;

/// A call's keys and fingerprint.
pub(crate) struct Keyed {
    /// The arguments with their secrets sealed; `None` for a tool without secrets. What is
    /// fingerprinted, keyed, stored and shown to approvers.
    pub sealed: Option<Value>,
    /// The record key and the downstream key; `None` without key material (a read).
    pub keys: Option<(RecordKey, IdempotencyKey)>,
    /// Where the key came from (`None` without key material).
    pub source: Option<KeySource>,
    /// Canonical JSON of the (sealed) arguments; empty for a read, which stores nothing.
    pub canonical: String,
    /// Their fingerprint (zero for a read, which nothing compares).
    pub fingerprint: Fingerprint,
}

impl Dispatcher {
    /// The key stage: refuses a recording call without key material
    /// ([`DispatchError::MissingKey`]) and arguments over the size bound.
    pub(super) fn key(
        &self,
        tool: &ToolDef,
        call: &ToolCall,
        run: &RunContext,
        args: &Value,
    ) -> Result<Keyed, DispatchError> {
        let sealed = self.seal(tool, args)?;
        let keyed_args = sealed.as_ref().unwrap_or(args);
        let (canonical, fingerprint) = if tool.class.records() || tool.class.requires_approval() {
            let canonical = canonical_json(keyed_args);
            if canonical.len() > self.max_argument_bytes {
                return Err(DispatchError::InvalidArguments {
                    tool: tool.name.to_string(),
                    pointer: String::new(),
                    message: format!(
                        "the arguments are {} bytes as canonical JSON, over the limit of {} \
                         bytes: pass large content by reference (a URL, an id) instead",
                        canonical.len(),
                        self.max_argument_bytes
                    ),
                });
            }
            let fingerprint = Fingerprint::of_canonical(&canonical);
            (canonical, fingerprint)
        } else {
            // A read neither records nor asks for approval: nothing reads its fingerprint.
            (String::new(), Fingerprint::from_bytes([0; 32]))
        };
        // A key made of the arguments (a natural key, a key by arguments, a re-send window)
        // is computed from their seals: a key derived from a secret itself could be recovered
        // from the record key by hashing guesses.
        let material = self
            .key_material(tool, call, run, keyed_args, &fingerprint)
            .or_else(|| resend_material(tool, call, &fingerprint));
        if material.is_none() && tool.class.records() {
            return Err(DispatchError::MissingKey {
                tool: tool.name.to_string(),
                class: tool.class,
            });
        }
        Ok(Keyed {
            source: material.as_ref().map(KeySource::of),
            keys: material.as_ref().map(|m| self.keys(tool, run, m)),
            sealed,
            canonical,
            fingerprint,
        })
    }

    /// The arguments with their secrets sealed (see [`crate::redact`]). `None` for a tool
    /// without secrets.
    pub(super) fn seal(
        &self,
        tool: &ToolDef,
        args: &Value,
    ) -> Result<Option<Value>, DispatchError> {
        if tool.secrets.is_empty() {
            return Ok(None);
        }
        let Some(key) = &self.secret_key else {
            return Err(DispatchError::SecretKeyMissing {
                tool: tool.name.to_string(),
            });
        };
        Ok(Some(crate::redact::seal(args, &tool.secrets, key)))
    }

    /// The call's key material, if any, from its (sealed) `args` and their `fingerprint`. An
    /// explicit key wins; a call keyed by its arguments ([`ToolCall::with_key_by_arguments`])
    /// gets one made of their fingerprint. A tool that declares a natural key says its
    /// effect's identity lives in its arguments (find-or-create), so the natural key comes
    /// before ids that change on every re-call; then the provider's call id (scoped by the
    /// run when there is one); then the run and step.
    pub(super) fn key_material(
        &self,
        tool: &ToolDef,
        call: &ToolCall,
        run: &RunContext,
        args: &Value,
        fingerprint: &Fingerprint,
    ) -> Option<KeyMaterial> {
        let material = if let Some(key) = &call.key {
            KeyMaterial::Explicit { key: key.clone() }
        } else if call.key_by_arguments && tool.class.records() {
            // An explicit key in form, as the MCP server made it before the dispatcher did:
            // a tool without secrets keeps its stored keys.
            KeyMaterial::Explicit {
                key: format!("arguments:{}", fingerprint.to_hex()),
            }
        } else if let Some(key) = tool.natural_key.as_ref().and_then(|f| f(args)) {
            KeyMaterial::Natural { key }
        } else if let Some(call_id) = &call.call_id {
            KeyMaterial::CallId {
                call_id: call_id.clone(),
                run_id: run.run_id.clone(),
            }
        } else if let (Some(run_id), Some(step)) = (&run.run_id, run.step) {
            KeyMaterial::RunStep {
                run_id: run_id.clone(),
                step,
                index: call.index,
            }
        } else {
            return None;
        };
        Some(material)
    }

    /// The record key and the downstream key of a call, scoped by namespace, tenant and
    /// tool.
    pub(super) fn keys(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        material: &KeyMaterial,
    ) -> (RecordKey, IdempotencyKey) {
        LogicalKey::derive(&self.namespace, &run.tenant, &tool.name, material)
    }
}

/// The re-send window's key material of a call that brought none, if it has a window and its
/// tool records (a read is never replayed).
fn resend_material(
    tool: &ToolDef,
    call: &ToolCall,
    fingerprint: &Fingerprint,
) -> Option<KeyMaterial> {
    let resend = call.resend.as_ref().filter(|_| tool.class.records())?;
    Some(KeyMaterial::Resend {
        scope: resend.scope.clone(),
        fingerprint: fingerprint.to_hex(),
    })
}

/// The key a read without key material hands its body: unique per dispatch.
pub(crate) fn unkeyed() -> IdempotencyKey {
    IdempotencyKey::new(format!("idem-unkeyed-{:016x}", random_u64()))
}

/// A cheap non-cryptographic random number (splitmix64 over a counter and the clock):
/// jitter and unkeyed read ids need spread, not secrecy.
pub(crate) fn random_u64() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ nanos;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

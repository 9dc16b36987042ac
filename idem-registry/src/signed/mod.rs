//! Signed approvals, below the dispatcher (shown as [`crate::approval`]): an irreversible call
//! runs only with an approval that a holder of an approval key signed for exactly that call,
//! that has not expired on the store's clock.
//!
//! An [`Approver`] (a person's tool, an operator service, a policy engine) holds an
//! [`ApprovalKey`]: an id and a secret of at least 32 bytes. It turns an
//! [`ApprovalRequest`] (what the dispatcher's [`ApprovalRequired`] carries) into an
//! [`Approval`]: the request's namespace, tenant, tool, key and fingerprint, the approver's
//! identity, an expiry and a random nonce, under an HMAC-SHA-256 made with the key. The
//! dispatcher verifies it against the keys it was built with ([`ApprovalKeys`], several for
//! a rotation) and refuses, naming the check that failed, an approval whose key it does not
//! know, whose signature does not match its fields (any field changed, another secret), that
//! binds another call or other arguments, or that has expired.
//!
//! An `Approval` cannot be built field by field: its fields are private, and a deserialised
//! one is worth only what its signature proves.
//!
//! [`ApprovalRequired`]: crate::DispatchError::ApprovalRequired

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hmac::{KeyInit, Mac};
use idem_core::{Fingerprint, IdempotencyKey, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod link;
mod pending;
pub use link::{ApprovalLink, LinkRefused};
pub use pending::PendingCall;

/// HMAC-SHA-256.
pub(crate) type Hmac = hmac::Hmac<sha2::Sha256>;

/// The journal step under which the record of an approved call keeps its approval (the
/// audit of which approval authorised it). Tools should not name a step so.
pub const APPROVAL_STEP: &str = "idem:approval";

/// The longest an approval may stay valid, from the moment it is presented, unless
/// [`Dispatcher::with_max_approval_validity`](crate::Dispatcher::with_max_approval_validity)
/// says otherwise: one day.
pub const DEFAULT_MAX_APPROVAL_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// The shortest approval secret accepted, in bytes.
pub const MIN_APPROVAL_SECRET_BYTES: usize = 32;

/// What the signature covers first: a change of format can never verify as the old one.
const DOMAIN: &[u8] = b"idem-approval-v1";

/// A key approvals are signed and verified with: an id (named in every approval it signs,
/// so that verifiers can hold several during a rotation) and a secret of at least
/// [`MIN_APPROVAL_SECRET_BYTES`]. Keep the secret out of the store and out of the agent's
/// host: whoever holds it can approve any call.
///
/// ```
/// use idem::ApprovalKey;
///
/// let key = ApprovalKey::new("2026-12", *b"0123456789abcdef0123456789abcdef").unwrap();
/// assert_eq!(key.id(), "2026-12");
/// assert_eq!(format!("{key:?}"), r#"ApprovalKey("2026-12", ..)"#);
/// assert!(ApprovalKey::new("2026-12", b"short".to_vec()).is_err());
/// ```
#[derive(Clone)]
pub struct ApprovalKey {
    id: String,
    secret: Arc<[u8]>,
}

/// An [`ApprovalKey`] that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalKeyError {
    /// The secret is too short.
    #[error(
        "approval key `{id}`: the secret must be at least {MIN_APPROVAL_SECRET_BYTES} bytes, got {len}: use 32 random bytes (e.g. `openssl rand -hex 32`, decoded)"
    )]
    TooShort {
        /// The key's id.
        id: String,
        /// The secret's length.
        len: usize,
    },
    /// The id is empty or has characters other than ASCII letters, digits, `-`, `_`, `.`.
    #[error(
        "approval key id `{0}`: use 1 to 64 ASCII letters, digits, `-`, `_` or `.` (e.g. `2026-12`)"
    )]
    BadId(String),
}

impl ApprovalKey {
    /// A key from its id and secret.
    pub fn new(
        id: impl Into<String>,
        secret: impl Into<Vec<u8>>,
    ) -> Result<Self, ApprovalKeyError> {
        let id = id.into();
        let secret = secret.into();
        let id_ok = (1..=64).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !id_ok {
            return Err(ApprovalKeyError::BadId(id));
        }
        if secret.len() < MIN_APPROVAL_SECRET_BYTES {
            return Err(ApprovalKeyError::TooShort {
                id,
                len: secret.len(),
            });
        }
        Ok(ApprovalKey {
            id,
            secret: secret.into(),
        })
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn mac(&self) -> Hmac {
        <Hmac as KeyInit>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"))
    }

    /// A MAC under a secret derived from this key for the purpose `label`: whoever shares
    /// the key derives the same, and it reveals nothing of the key.
    pub(crate) fn derived_mac(&self, label: &[u8]) -> Hmac {
        <Hmac as KeyInit>::new_from_slice(&self.derived_secret(label))
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"))
    }

    /// A secret for the purpose `label`, derived from this key: whoever holds the key derives
    /// the same one, and it reveals nothing of the key.
    pub fn derived_secret(&self, label: &[u8]) -> [u8; 32] {
        let mut derive = self.mac();
        derive.update(b"idem/derived/");
        derive.update(label);
        derive.finalize().into_bytes().into()
    }
}

impl fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApprovalKey({:?}, ..)", self.id)
    }
}

/// The keys a dispatcher verifies approvals with: the current one and, during a rotation,
/// the ones approvals still in flight were signed with. Drop a key to refuse every approval
/// it signed.
#[derive(Clone, Debug, Default)]
pub struct ApprovalKeys {
    keys: Vec<ApprovalKey>,
}

impl ApprovalKeys {
    /// The keys; a later key with the id of an earlier one replaces it.
    pub fn new(keys: impl IntoIterator<Item = ApprovalKey>) -> Self {
        let mut out = ApprovalKeys::default();
        for key in keys {
            out.keys.retain(|k| k.id != key.id);
            out.keys.push(key);
        }
        out
    }

    /// Whether there is no key (no approval can verify).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn get(&self, id: &str) -> Option<&ApprovalKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<&ApprovalKey> {
        self.get(id)
    }
}

/// Who approves, and the key they sign with.
///
/// ```
/// use std::time::Duration;
/// use idem::{ApprovalKey, Approver};
///
/// let key = ApprovalKey::new("ops-1", *b"0123456789abcdef0123456789abcdef").unwrap();
/// let approver = Approver::new("alice@example.com", key);
/// # let _ = (approver, Duration::from_secs(1));
/// ```
#[derive(Clone, Debug)]
pub struct Approver {
    identity: String,
    key: ApprovalKey,
}

impl Approver {
    /// An approver by its identity (recorded in every approval it signs).
    pub fn new(identity: impl Into<String>, key: ApprovalKey) -> Self {
        Approver {
            identity: identity.into(),
            key,
        }
    }

    /// The approver's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A secret for another purpose, derived from the approver's key and `label` (which
    /// names the purpose): whoever shares the key derives the same one, and it reveals
    /// nothing of the key. A door that signs state of its own (an MCP server's request
    /// state) uses one, so that it needs no key besides the approver's.
    pub fn derived_secret(&self, label: &[u8]) -> [u8; 32] {
        self.key.derived_secret(label)
    }

    /// The key this approver signs with.
    pub fn key(&self) -> &ApprovalKey {
        &self.key
    }

    /// Approve exactly the call `request` describes, until `expires_at` (compared with the
    /// store's clock when the call is dispatched).
    pub fn approve_until(&self, request: &ApprovalRequest, expires_at: Timestamp) -> Approval {
        let mut nonce = [0u8; 16];
        // The nonce makes each approval distinct; without an OS random source, the clock
        // and a counter still make it unique within this process.
        if getrandom::fill(&mut nonce).is_err() {
            fallback_nonce(&mut nonce);
        }
        let mut approval = Approval {
            namespace: request.namespace.clone(),
            tenant: request.tenant.clone(),
            tool: request.tool.clone(),
            key: request.key.clone(),
            fingerprint: request.fingerprint,
            approver: self.identity.clone(),
            expires_at,
            nonce: hex(&nonce),
            key_id: self.key.id.clone(),
            signature: String::new(),
        };
        approval.signature = hex(&approval.tag(&self.key));
        approval
    }

    /// Approve exactly the call `request` describes for `valid_for` from now, on this
    /// process's clock.
    pub fn approve_for(&self, request: &ApprovalRequest, valid_for: Duration) -> Approval {
        let millis = u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX);
        self.approve_until(
            request,
            Timestamp(Timestamp::now().as_millis().saturating_add(millis)),
        )
    }
}

pub(crate) fn fallback_nonce(nonce: &mut [u8; 16]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nonce[..8].copy_from_slice(&nanos.to_be_bytes());
    nonce[8..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    // Lower-case digits only: one signature has one spelling.
    if !text.len().is_multiple_of(2)
        || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A signed yes to one irreversible call: its namespace, tenant, tool, key and the
/// fingerprint of its arguments, by an approver, until an expiry.
///
/// Made only by [`Approver::approve_until`] or [`Approver::approve_for`]; it may travel as
/// JSON (`serde`), and a dispatcher accepts it only if its signature verifies under one of
/// its [`ApprovalKeys`] and it binds the very call dispatched.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    namespace: String,
    tenant: String,
    tool: String,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    approver: String,
    expires_at: Timestamp,
    nonce: String,
    key_id: String,
    signature: String,
}

impl fmt::Debug for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approval")
            .field("tool", &self.tool)
            .field("tenant", &self.tenant)
            .field("key", &self.key)
            .field("approver", &self.approver)
            .field("expires_at", &self.expires_at)
            .field("nonce", &self.nonce)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// The call an approval must bind to be accepted for a dispatch.
pub(crate) struct Binding<'a> {
    pub namespace: &'a str,
    pub tenant: &'a str,
    pub tool: &'a str,
    pub key: &'a str,
    pub fingerprint: Fingerprint,
}

impl Approval {
    /// The namespace of the approved call.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The tenant of the approved call.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// The tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }
    /// The call's downstream key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }
    /// The fingerprint of the approved arguments.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    /// Who approved.
    pub fn approver(&self) -> &str {
        &self.approver
    }
    /// Until when, on the store's clock.
    pub fn expires_at(&self) -> Timestamp {
        self.expires_at
    }
    /// The approval's nonce (hex), unique to it.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }
    /// The id of the key that signed it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The HMAC of every field but the signature, each length-prefixed so that no two sets
    /// of fields give the same input.
    fn tag(&self, key: &ApprovalKey) -> [u8; 32] {
        let mut mac = key.mac();
        self.feed(&mut mac);
        mac.finalize().into_bytes().into()
    }

    fn feed(&self, mac: &mut Hmac) {
        let expires = self.expires_at.as_millis().to_string();
        let fingerprint = self.fingerprint.to_hex();
        mac.update(DOMAIN);
        for field in [
            self.namespace.as_str(),
            &self.tenant,
            &self.tool,
            self.key.as_str(),
            &fingerprint,
            &self.approver,
            &expires,
            &self.nonce,
            &self.key_id,
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
    }

    /// Whether this approval, signed by a key in `keys`, lets the call `binding` run at
    /// `now` (the store's clock), valid for no longer than `longest` from then. The signature is checked first: no field of an approval
    /// is believed before it verifies.
    pub(crate) fn check(
        &self,
        keys: &ApprovalKeys,
        binding: &Binding<'_>,
        longest: Duration,
        now: Timestamp,
    ) -> Result<(), ApprovalRefusal> {
        let key = keys
            .get(&self.key_id)
            .ok_or_else(|| ApprovalRefusal::UnknownKey {
                key_id: self.key_id.clone(),
            })?;
        let mut mac = key.mac();
        self.feed(&mut mac);
        let signature = unhex(&self.signature).ok_or(ApprovalRefusal::BadSignature)?;
        mac.verify_slice(&signature)
            .map_err(|_| ApprovalRefusal::BadSignature)?;
        let differs = |field: &'static str, approved: &str, called: &str| {
            (approved != called).then(|| ApprovalRefusal::OtherCall {
                field,
                approved: approved.to_owned(),
                called: called.to_owned(),
            })
        };
        if let Some(refusal) = differs("namespace", &self.namespace, binding.namespace)
            .or_else(|| differs("tenant", &self.tenant, binding.tenant))
            .or_else(|| differs("tool", &self.tool, binding.tool))
            .or_else(|| differs("key", self.key.as_str(), binding.key))
        {
            return Err(refusal);
        }
        if self.fingerprint != binding.fingerprint {
            return Err(ApprovalRefusal::OtherArguments);
        }
        if now >= self.expires_at {
            return Err(ApprovalRefusal::Expired {
                expired_at: self.expires_at,
                now,
            });
        }
        if self.expires_at > now.plus(longest) {
            return Err(ApprovalRefusal::TooLong {
                expires_at: self.expires_at,
                longest,
            });
        }
        Ok(())
    }

    /// Whether the approval names this call (tool and key), whatever else it says: one that
    /// does is refused with its reason, one for another call is not this call's business.
    pub(crate) fn names(&self, tool: &str, key: &str) -> bool {
        self.tool == tool && self.key.as_str() == key
    }
}

/// Why an approval was refused: the check that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalRefusal {
    /// Signed with a key this dispatcher does not hold (another deployment's, or one rotated
    /// out).
    #[error(
        "it is signed with approval key `{key_id}`, which this dispatcher does not hold (another deployment's, or rotated out)"
    )]
    UnknownKey {
        /// The key id the approval names.
        key_id: String,
    },
    /// The signature does not match the fields: a field was changed, or another secret
    /// signed it.
    #[error(
        "its signature does not match its fields: a field was changed after signing, or another secret signed it"
    )]
    BadSignature,
    /// It approves another call.
    #[error("it approves {field} `{approved}`, and this call's is `{called}`")]
    OtherCall {
        /// The field that differs.
        field: &'static str,
        /// The approval's value.
        approved: String,
        /// The call's.
        called: String,
    },
    /// It approves other arguments.
    #[error("it approves other arguments: the call's fingerprint differs from the approved one")]
    OtherArguments,
    /// It stays valid for longer than the dispatcher accepts
    /// ([`Dispatcher::with_max_approval_validity`](crate::Dispatcher::with_max_approval_validity)).
    #[error(
        "it stays valid until {}, longer than the {}s this dispatcher accepts: approve for less",
        expires_at.to_rfc3339(),
        longest.as_secs()
    )]
    TooLong {
        /// When it would expire.
        expires_at: Timestamp,
        /// The longest validity accepted.
        longest: Duration,
    },
    /// It was decided under another policy of the tool (its class, handler version or
    /// controls changed since): the request is asked again under the tool's policy now.
    #[error(
        "it was decided under another policy of the tool: {change}; the call waits for a new decision under the policy it has now"
    )]
    PolicyChanged {
        /// What changed, in words.
        change: String,
    },
    /// The call needs approval by more distinct people than approved it (four eyes).
    #[error(
        "the call needs approval by {needed} distinct people, and {got} approved it: one person counts once"
    )]
    TooFewApprovers {
        /// How many distinct approvers the call needs.
        needed: u8,
        /// How many distinct people's approvals verified.
        got: u8,
    },
    /// It expired.
    #[error(
        "it expired at {} (the store's clock reads {})",
        expired_at.to_rfc3339(),
        now.to_rfc3339()
    )]
    Expired {
        /// When it expired.
        expired_at: Timestamp,
        /// The store's clock at the check.
        now: Timestamp,
    },
}

/// What must be approved before an irreversible call may run: returned inside
/// [`DispatchError::ApprovalRequired`](crate::DispatchError::ApprovalRequired). Hand it to
/// an [`Approver`], or to the approval desk, which decides exactly this call as it was
/// refused ([`ApprovalDesk::approve`](crate::approval::ApprovalDesk::approve) takes it as a
/// [`PendingCall`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The dispatcher's namespace.
    pub namespace: String,
    /// The tenant the call acts for.
    pub tenant: String,
    /// The tool.
    pub tool: String,
    /// The call's downstream key.
    pub key: IdempotencyKey,
    /// The fingerprint of the arguments.
    pub fingerprint: Fingerprint,
    /// The normalised arguments, secrets sealed, to show the approver.
    pub arguments: Value,
}

#[cfg(test)]
mod tests;

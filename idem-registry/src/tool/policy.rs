//! A tool's policy settings, and the one check they pass however the tool was defined:
//! [`ToolBuilder::build`](super::ToolBuilder::build) runs [`ToolPolicy::check`], a
//! [`ToolSpec`](super::ToolSpec) reaches it through the builder (saying which settings it
//! wrote out), and so does `#[tool]`, whose definitions are finished by the builder; the
//! macro also refuses the same settings at compile time, pointing at them, since a proc
//! macro cannot run this crate's code.

use std::time::Duration;

use idem_core::ToolClass;

/// Per-tool policy settings. Every field has a documented default. A duration longer than
/// [`LONGEST_POLICY_DURATION`] (ten years) is refused when the tool is built; see
/// [`ToolPolicy::check`] for every rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    /// How long a completed record is kept for replay. Default 24 h (`ttl_secs`).
    pub ttl: Duration,
    /// How long a holder's lease lasts; it is renewed every third of it while the body runs.
    /// Default 30 s (`lease_secs`).
    pub lease: Duration,
    /// Attempts in total, first one included, for classes that retry. Default 3
    /// (`max_attempts`). `non_idempotent_write` is capped at 2 and `irreversible` at 1
    /// whatever this says.
    pub max_attempts: u32,
    /// How long a concurrent duplicate waits for the holder's outcome before getting
    /// `InProgress`. Default 10 s (`wait_secs`).
    pub wait: Duration,
    /// First retry delay; doubles per attempt, with jitter, up to 5 s. Default 100 ms
    /// (`backoff_ms`).
    pub backoff: Duration,
    /// MCP `openWorldHint`: the tool talks to systems outside the agent's control.
    /// Default `false` (`open_world`).
    pub open_world: bool,
    /// Scopes the principal must have been granted. Default none (`scopes`).
    pub scopes: Vec<String>,
    /// When the tool's natural key arrives with arguments other than those recorded under
    /// it: `true` (the default, `on_key_reuse = "replay"`) is find-or-create: the natural key
    /// is the identity of the effect, so the call replays the recorded outcome
    /// (`deduplicated: true`) and [`Dispatched::differing_arguments`] names the arguments
    /// that differ; `false` (`on_key_reuse = "reject"`) refuses it with `KeyReused`. A key
    /// of any other source (an explicit key, a call id, a run and step) reused with other
    /// arguments is always refused: it names one call, not an entity.
    ///
    /// [`Dispatched::differing_arguments`]: crate::Dispatched::differing_arguments
    pub replay_on_key_reuse: bool,
    /// The settle delay: how long after a record became Unknown its verify hook may first be
    /// asked (`verify_after_secs`). Default 5 minutes, counted from the moment the record
    /// became Unknown, on the store's clock. For an orphan (a holder whose lease expired) at
    /// least one lease is waited whatever this says; an Unknown made by the tool's own
    /// ambiguous error waits this alone, since the holder that marked it has finished. Until
    /// then a duplicate gets `OutcomeUnknown` with the time verification becomes possible.
    ///
    /// Why wait at all: a provider that timed out may commit the request later (a queued
    /// send, a payment confirmed asynchronously), and its lookup API may lag behind its
    /// writes; a hook asked too soon answers "not applied", and the call runs twice. Why five
    /// minutes: mail and payment APIs commonly time out clients at 30–80 s and settle a
    /// request within a couple of minutes of accepting it, and their sent logs, event lists
    /// and search indexes are documented as eventually consistent on that order; five
    /// minutes covers both with margin while an agent can still wait for it. A holder whose
    /// lease expired may also still be running: one lease more lets it notice (it renews
    /// every third of a lease and stops when refused) before anyone asks downstream.
    pub verify_after: Duration,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            max_attempts: 3,
            wait: Duration::from_secs(10),
            backoff: Duration::from_millis(100),
            open_world: false,
            scopes: Vec::new(),
            replay_on_key_reuse: true,
            verify_after: DEFAULT_VERIFY_AFTER,
        }
    }
}

/// The default settle delay before a verify hook is asked about an Unknown record: 5 minutes
/// (see [`ToolPolicy::verify_after`] for why).
pub const DEFAULT_VERIFY_AFTER: Duration = Duration::from_secs(300);

impl ToolPolicy {
    /// Attempts this class may make in total.
    pub fn attempts_for(&self, class: ToolClass) -> u32 {
        let n = self.max_attempts.max(1);
        match class {
            ToolClass::Read | ToolClass::IdempotentWrite => n,
            ToolClass::NonIdempotentWrite => n.min(2),
            ToolClass::Irreversible => 1,
        }
    }

    /// Refuse settings that cannot work for a tool of this class, naming the setting and the
    /// fix: the one check of a policy, whoever wrote it. `written` says which settings the
    /// tool's author wrote out (in `#[tool]` or a [`ToolSpec`](super::ToolSpec)): those are
    /// also refused where they would do nothing, whatever their value (a record setting on a
    /// `read` tool, `on_key_reuse` without a natural key, a `max_attempts` of 0). Settings
    /// given as a [`ToolPolicy`] value are judged by their values only: a lease or, for a
    /// tool that records, a TTL of zero, and durations over [`LONGEST_POLICY_DURATION`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::ToolClass;
    /// use idem::tool::{ExplicitSettings, PolicyError, ToolPolicy};
    ///
    /// let policy = ToolPolicy { lease: Duration::ZERO, ..ToolPolicy::default() };
    /// let none = ExplicitSettings::default();
    /// assert_eq!(policy.check(ToolClass::Read, &none), Err(PolicyError::ZeroLease));
    ///
    /// let mut written = ExplicitSettings::default();
    /// written.ttl_secs = true;
    /// let err = ToolPolicy::default().check(ToolClass::Read, &written).unwrap_err();
    /// assert!(err.to_string().starts_with("`ttl_secs` has no effect on a `read` tool"));
    /// assert!(ToolPolicy::default().check(ToolClass::IdempotentWrite, &written).is_ok());
    /// ```
    pub fn check(&self, class: ToolClass, written: &ExplicitSettings) -> Result<(), PolicyError> {
        if written.max_attempts && self.max_attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        if !class.records() {
            // A read records nothing: these settings would silently do nothing.
            let unused = [
                ("ttl_secs", written.ttl_secs),
                ("lease_secs", written.lease_secs),
                ("wait_secs", written.wait_secs),
                ("natural_key", written.natural_key),
                ("on_key_reuse", written.on_key_reuse),
                ("verify_after_secs", written.verify_after_secs),
            ];
            if let Some((setting, _)) = unused.iter().find(|(_, set)| *set) {
                return Err(PolicyError::NoEffectOnRead { setting });
            }
        }
        if written.on_key_reuse && !written.natural_key {
            return Err(PolicyError::KeyReuseWithoutNaturalKey {
                policy: match self.replay_on_key_reuse {
                    true => "replay",
                    false => "reject",
                },
            });
        }
        if self.lease.is_zero() {
            return Err(PolicyError::ZeroLease);
        }
        if self.ttl.is_zero() && class.records() {
            return Err(PolicyError::ZeroTtl);
        }
        // Each in the unit of its `#[tool]` key: seconds, or milliseconds for the backoff.
        for (what, setting, value, per_second, unit) in [
            ("TTL", "ttl_secs", self.ttl, 1.0, "s"),
            ("lease", "lease_secs", self.lease, 1.0, "s"),
            ("wait", "wait_secs", self.wait, 1.0, "s"),
            ("backoff", "backoff_ms", self.backoff, 1000.0, "ms"),
            (
                "settle delay",
                "verify_after_secs",
                self.verify_after,
                1.0,
                "s",
            ),
        ] {
            if value > LONGEST_POLICY_DURATION {
                return Err(PolicyError::TooLong {
                    what,
                    setting,
                    given: value.as_secs_f64() * per_second,
                    most: LONGEST_POLICY_DURATION.as_secs_f64() * per_second,
                    unit,
                });
            }
        }
        Ok(())
    }
}

/// The longest TTL, lease, wait or backoff a tool may set: ten years. Deadlines are computed
/// by adding these to the current time, which must not overflow.
pub const LONGEST_POLICY_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Which policy settings a tool's author wrote out, by the names `#[tool]` and
/// [`ToolSpec`](super::ToolSpec) give them; see [`ToolPolicy::check`]. More settings may
/// come: start from `ExplicitSettings::default()` (nothing written) and set fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExplicitSettings {
    /// `ttl_secs`.
    pub ttl_secs: bool,
    /// `lease_secs`.
    pub lease_secs: bool,
    /// `max_attempts`.
    pub max_attempts: bool,
    /// `wait_secs`.
    pub wait_secs: bool,
    /// `natural_key`.
    pub natural_key: bool,
    /// `on_key_reuse`.
    pub on_key_reuse: bool,
    /// `verify_after_secs`.
    pub verify_after_secs: bool,
}

/// Why a tool's policy cannot work; [`ToolPolicy::check`] gives it, and a definition refused
/// for it is a [`RegistryError::Invalid`](crate::RegistryError::Invalid) with these words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A lease of zero.
    #[error(
        "the lease (`lease_secs`) must be longer than zero: a holder's lease of 0 s would expire before its body started"
    )]
    ZeroLease,
    /// A TTL of zero on a tool that records.
    #[error(
        "the TTL (`ttl_secs`) must be longer than zero: a record kept 0 s would never dedupe anything"
    )]
    ZeroTtl,
    /// A duration whose deadlines could overflow the clock.
    #[error(
        "the {what} (`{setting}`) of {given} {unit} is longer than idem accepts: at most {most} {unit} (ten years)"
    )]
    TooLong {
        /// The setting in words (`TTL`, `lease`, ...).
        what: &'static str,
        /// The setting's key (`ttl_secs`, ...).
        setting: &'static str,
        /// The value given, in `unit`.
        given: f64,
        /// The longest accepted, in `unit`.
        most: f64,
        /// `s` or `ms`, the unit of the key.
        unit: &'static str,
    },
    /// `max_attempts` written as 0.
    #[error("`max_attempts` counts the first attempt: it must be at least 1")]
    ZeroAttempts,
    /// `on_key_reuse` written without a natural key: a key of any other source reused with
    /// other arguments is always refused.
    #[error(
        "`on_key_reuse = \"{policy}\"` applies only to calls keyed by a natural key: add `natural_key`, or remove `on_key_reuse`"
    )]
    KeyReuseWithoutNaturalKey {
        /// The policy written: `"replay"` or `"reject"`.
        policy: &'static str,
    },
    /// A record setting written on a `read` tool.
    #[error(
        "`{setting}` has no effect on a `read` tool, which records nothing: remove it, or give the tool the class of a write"
    )]
    NoEffectOnRead {
        /// The setting's key.
        setting: &'static str,
    },
}

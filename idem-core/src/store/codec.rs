//! What the stores share in writing a record down and reading it back: the names of the
//! states, the JSON text of outcomes and journals, millisecond conversions, and one decoder of
//! a stored record's fields.
//!
//! Each durable store keeps a record in its own shape (SQLite and PostgreSQL in columns,
//! Redis in a hash and a list), but what a record's fields mean, how they must read back and
//! what counts as corrupt is one decision: a store says how to read a field of its rows
//! ([`Fields`]) and [`decode_record`] makes the [`Record`] of it.

// The durable stores are features; without any of them (the memory store alone) parts of
// the shared codec have no user.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]

use std::borrow::Cow;
use std::time::Duration;

use crate::canonical::Fingerprint;
use crate::contract::Contract;
use crate::key::RecordKey;
use crate::record::{JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::StoreError;

/// The name a store writes for a state: [`StateKind::as_str`].
pub(crate) fn state_name(kind: StateKind) -> &'static str {
    kind.as_str()
}

/// The state a stored name spells, if this version knows it.
pub(crate) fn state_kind(name: &str) -> Option<StateKind> {
    [
        StateKind::InProgress,
        StateKind::Completed,
        StateKind::Unknown,
    ]
    .into_iter()
    .find(|&kind| state_name(kind) == name)
}

/// The journal of a record with no steps, as JSON (`serde_json` writes an empty list so).
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) const NO_STEPS: &str = "[]";

/// A journal as the JSON text the SQL stores keep; most records have none, and cost no
/// allocation.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn steps_json(steps: &[JournalEntry]) -> Result<Cow<'static, str>, String> {
    if steps.is_empty() {
        return Ok(Cow::Borrowed(NO_STEPS));
    }
    serde_json::to_string(steps)
        .map(Cow::Owned)
        .map_err(|e| format!("steps cannot be encoded: {e}"))
}

/// A journal read back from [`steps_json`]'s text.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn steps_from_json(text: &str) -> Result<Vec<JournalEntry>, String> {
    match text {
        // What `steps_json` writes for a call that journaled nothing: most records.
        NO_STEPS => Ok(Vec::new()),
        steps => serde_json::from_str(steps).map_err(|e| format!("steps are not a journal: {e}")),
    }
}

/// The JSON text stores keep for an outcome. A success's own JSON text is a string inside
/// this JSON, so it comes back byte for byte, whatever its formatting.
pub(crate) fn outcome_json(key: &RecordKey, outcome: &Outcome) -> Result<String, StoreError> {
    // Serialising an `Outcome` cannot fail in practice (string keys, finite JSON values);
    // report it rather than panic if it ever does.
    serde_json::to_string(outcome)
        .map_err(|e| StoreError::corrupt(key, format!("the outcome cannot be serialised: {e}")))
}

/// An instant as a signed 64-bit integer (SQLite's integers). Instants past `i64::MAX` ms
/// (only reachable through a saturated "forever" TTL or lease) become `i64::MAX`, still
/// hundreds of millions of years away.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn signed_millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// A duration in whole milliseconds, clamped to `max`: each server's arithmetic on instants
/// has its own range (Lua's doubles, PostgreSQL's `bigint`).
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) fn clamped_millis(d: Duration, max: Duration) -> u64 {
    crate::record::saturating_millis(d.min(max))
}

/// A field of a stored record, by what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Tool,
    Tenant,
    Fingerprint,
    Fence,
    State,
    LeaseUntil,
    Outcome,
    ExpiresAt,
    Since,
    LastError,
    Arguments,
    Contract,
    CreatedAt,
    UpdatedAt,
}

impl Field {
    /// The field's usual column name, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::Tool => "tool",
            Field::Tenant => "tenant",
            Field::Fingerprint => "fingerprint",
            Field::Fence => "fence",
            Field::State => "state",
            Field::LeaseUntil => "lease_until",
            Field::Outcome => "outcome",
            Field::ExpiresAt => "expires_at",
            Field::Since => "since",
            Field::LastError => "last_error",
            Field::Arguments => "arguments",
            Field::Contract => "contract",
            Field::CreatedAt => "created_at",
            Field::UpdatedAt => "updated_at",
        }
    }
}

/// How a store reads the fields of one stored record. Errors are what is wrong with the
/// field, naming it as the store does.
pub(crate) trait Fields {
    /// The field's text; `None` when the record has none.
    fn text(&self, field: Field) -> Result<Option<&str>, String>;

    /// The field as a non-negative integer; `None` when the record has none.
    fn integer(&self, field: Field) -> Result<Option<u64>, String>;

    /// The journaled steps, in order.
    fn steps(&self) -> Result<Vec<JournalEntry>, String>;

    /// What the store calls a field.
    fn name(&self, field: Field) -> &'static str {
        field.name()
    }
}

/// The record under `key` whose other fields `fields` reads; anything that does not decode
/// is [`StoreError::Corrupt`] under that key.
pub(crate) fn decode_record(key: RecordKey, fields: &impl Fields) -> Result<Record, StoreError> {
    match decode_fields(&key, fields) {
        Ok(record) => Ok(record),
        Err(reason) => Err(StoreError::Corrupt { key, reason }),
    }
}

fn decode_fields(key: &RecordKey, f: &impl Fields) -> Result<Record, String> {
    let fingerprint = required_text(f, Field::Fingerprint)?;
    let fingerprint = Fingerprint::from_hex(fingerprint).ok_or_else(|| {
        let name = f.name(Field::Fingerprint);
        format!("{name} {fingerprint:?} is not 64 hex digits")
    })?;
    let state = required_text(f, Field::State)?;
    let state = match state_kind(state) {
        Some(StateKind::InProgress) => RecordState::InProgress {
            lease_until: required_time(f, Field::LeaseUntil)?,
        },
        Some(StateKind::Completed) => RecordState::Completed {
            outcome: serde_json::from_str::<Outcome>(required_text(f, Field::Outcome)?).map_err(
                |e| format!("{} is not a recorded outcome: {e}", f.name(Field::Outcome)),
            )?,
            expires_at: required_time(f, Field::ExpiresAt)?,
        },
        Some(StateKind::Unknown) => RecordState::Unknown {
            since: required_time(f, Field::Since)?,
            last_error: required_text(f, Field::LastError)?.to_owned(),
        },
        None => return Err(format!("state {state:?} is not one this version knows")),
    };
    Ok(Record {
        key: key.clone(),
        tool: required_text(f, Field::Tool)?.to_owned(),
        // Records written before tenants were kept have none.
        tenant: f.text(Field::Tenant)?.unwrap_or_default().to_owned(),
        fingerprint,
        fence: f
            .integer(Field::Fence)?
            .ok_or_else(|| missing(f, Field::Fence))?,
        state,
        steps: f.steps()?,
        arguments: f.text(Field::Arguments)?.map(str::to_owned),
        contract: f
            .text(Field::Contract)?
            .map(|text| Contract::from_json(text).map(std::sync::Arc::new))
            .transpose()
            .map_err(|e| format!("{}: {e}", f.name(Field::Contract)))?,
        created_at: required_time(f, Field::CreatedAt)?,
        updated_at: required_time(f, Field::UpdatedAt)?,
    })
}

fn missing(f: &impl Fields, field: Field) -> String {
    format!("{} is missing", f.name(field))
}

fn required_text(f: &impl Fields, field: Field) -> Result<&str, String> {
    f.text(field)?.ok_or_else(|| missing(f, field))
}

fn required_time(f: &impl Fields, field: Field) -> Result<Timestamp, String> {
    f.integer(field)?
        .map(Timestamp)
        .ok_or_else(|| missing(f, field))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn state_names_read_back() {
        for kind in [
            StateKind::InProgress,
            StateKind::Completed,
            StateKind::Unknown,
        ] {
            assert_eq!(state_kind(state_name(kind)), Some(kind));
            // The names are the serde names of the kind, as operators see them in JSON.
            let json = serde_json::to_string(&kind).expect("encode");
            assert_eq!(json, format!("\"{}\"", state_name(kind)));
        }
        assert_eq!(state_kind("done"), None);
    }

    #[test]
    fn an_empty_journal_is_stored_as_serde_json_writes_it() {
        let empty: Vec<JournalEntry> = Vec::new();
        assert_eq!(serde_json::to_string(&empty).expect("encode"), NO_STEPS);
        let steps = vec![JournalEntry {
            step: "charge".into(),
            value: "7".into(),
        }];
        let text = steps_json(&steps).expect("encode");
        assert_eq!(steps_from_json(&text), Ok(steps));
        assert_eq!(steps_from_json(NO_STEPS), Ok(Vec::new()));
    }

    #[test]
    fn durations_are_clamped() {
        assert_eq!(
            clamped_millis(Duration::from_millis(1500), Duration::MAX),
            1500
        );
        assert_eq!(clamped_millis(Duration::MAX, Duration::from_secs(1)), 1000);
        assert_eq!(clamped_millis(Duration::MAX, Duration::MAX), u64::MAX);
        assert_eq!(signed_millis(Timestamp(u64::MAX)), i64::MAX);
    }

    /// Fields kept as text, as Redis keeps them.
    struct Texts(HashMap<&'static str, &'static str>);

    impl Fields for Texts {
        fn text(&self, field: Field) -> Result<Option<&str>, String> {
            Ok(self.0.get(field.name()).copied())
        }

        fn integer(&self, field: Field) -> Result<Option<u64>, String> {
            self.text(field)?
                .map(|t| {
                    t.parse()
                        .map_err(|_| format!("{} is not a number", field.name()))
                })
                .transpose()
        }

        fn steps(&self) -> Result<Vec<JournalEntry>, String> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_record_decodes_or_says_which_field_is_wrong() {
        let mut fields = HashMap::from([
            ("tool", "send_email"),
            ("fingerprint", "00"),
            ("fence", "7"),
            ("state", "unknown"),
            ("since", "5"),
            ("last_error", crate::record::ORPHANED),
            ("created_at", "1"),
            ("updated_at", "5"),
        ]);
        let key = RecordKey::from_stored("k");
        let corrupt =
            |fields: &HashMap<_, _>| match decode_record(key.clone(), &Texts(fields.clone())) {
                Err(StoreError::Corrupt { key: k, reason }) => {
                    assert_eq!(k, key);
                    reason
                }
                other => panic!("expected Corrupt, got {other:?}"),
            };
        assert!(corrupt(&fields).contains("fingerprint"));
        let hex = "ab".repeat(32);
        fields.insert("fingerprint", Box::leak(hex.into_boxed_str()));
        let record = decode_record(key.clone(), &Texts(fields.clone())).expect("decode");
        assert_eq!(record.tenant, "", "a record from before tenants has none");
        assert_eq!(record.fence, 7);
        assert_eq!(
            record.state.unknown_cause(),
            Some(crate::record::UnknownCause::Orphaned)
        );
        fields.remove("since");
        assert_eq!(corrupt(&fields), "since is missing");
        fields.insert("state", "done");
        assert!(corrupt(&fields).contains("not one this version knows"));
    }
}

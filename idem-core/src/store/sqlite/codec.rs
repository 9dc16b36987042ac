//! Rows of `idem_records` to records and back. What the columns mean is decided once, in the
//! stores' [shared codec](crate::store::codec); this file says where each field sits.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, Row, params};

use super::connection::Failure;
use super::statements::{SELECT_ONE, UPSERT};
use crate::contract::Contract;
use crate::key::RecordKey;
use crate::record::{JournalEntry, Record, RecordState, StateKind};
use crate::store::StoreError;
use crate::store::codec::{self, Field, Fields, signed_millis};

/// The record under `key`, as stored (expired or not).
pub(super) fn load(conn: &Connection, key: &RecordKey) -> Result<Option<Record>, Failure> {
    let mut stmt = conn.prepare_cached(SELECT_ONE)?;
    let mut rows = stmt.query([key.as_str()])?;
    match rows.next()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// Records from a listing query, in its order.
pub(super) fn load_many(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Record>, Failure> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Write a record, replacing whatever was under its key.
pub(super) fn put(conn: &Connection, r: &Record) -> Result<(), Failure> {
    let unstorable = |reason: String| Failure::Store(StoreError::corrupt(&r.key, reason));
    let fence = i64::try_from(r.fence)
        .map_err(|_| unstorable(format!("fence {} exceeds SQLite's integers", r.fence)))?;
    let steps = codec::steps_json(&r.steps).map_err(unstorable)?;
    let (state, lease_until, expires_at, since, last_error, outcome) = match &r.state {
        RecordState::InProgress { lease_until } => (
            StateKind::InProgress.as_str(),
            Some(signed_millis(*lease_until)),
            None,
            None,
            None,
            None,
        ),
        RecordState::Completed {
            outcome,
            expires_at,
        } => (
            StateKind::Completed.as_str(),
            None,
            Some(signed_millis(*expires_at)),
            None,
            None,
            Some(codec::outcome_json(&r.key, outcome)?),
        ),
        RecordState::Unknown { since, last_error } => (
            StateKind::Unknown.as_str(),
            None,
            None,
            Some(signed_millis(*since)),
            Some(last_error.as_str()),
            None,
        ),
    };
    conn.prepare_cached(UPSERT)?.execute(params![
        r.key.as_str(),
        r.tool,
        r.fingerprint.to_hex(),
        fence,
        state,
        lease_until,
        expires_at,
        since,
        last_error,
        outcome,
        steps.as_ref(),
        r.arguments,
        signed_millis(r.created_at),
        signed_millis(r.updated_at),
        r.tenant,
        r.contract.as_deref().map(Contract::to_json),
    ])?;
    Ok(())
}

/// Read a row of [`columns!`](super::statements); anything that does not decode is
/// [`StoreError::Corrupt`].
fn decode(row: &Row<'_>) -> Result<Record, Failure> {
    let key = match row.get_ref(0)? {
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) => RecordKey::from_stored(s),
            Err(_) => {
                return Err(Failure::Store(StoreError::corrupt(
                    &RecordKey::from_stored(String::from_utf8_lossy(t)),
                    "the key is not valid UTF-8",
                )));
            }
        },
        other => {
            return Err(Failure::Store(StoreError::corrupt(
                &RecordKey::from_stored(format!("{other:?}")),
                format!("the key is {}, not text", other.data_type()),
            )));
        }
    };
    Ok(codec::decode_record(key, &Cells(row))?)
}

/// Typed access to a row's cells, read in place, with errors that name the column.
struct Cells<'a, 'r>(&'a Row<'r>);

/// Where each field sits in [`columns!`](super::statements).
fn column(field: Field) -> usize {
    match field {
        Field::Tool => 1,
        Field::Fingerprint => 2,
        Field::Fence => 3,
        Field::State => 4,
        Field::LeaseUntil => 5,
        Field::ExpiresAt => 6,
        Field::Since => 7,
        Field::LastError => 8,
        Field::Outcome => 9,
        Field::Arguments => 11,
        Field::CreatedAt => 12,
        Field::UpdatedAt => 13,
        Field::Tenant => 14,
        Field::Contract => 15,
    }
}

/// The column of the journal.
const STEPS: usize = 10;

impl Cells<'_, '_> {
    fn value(&self, i: usize, name: &str) -> Result<ValueRef<'_>, String> {
        self.0.get_ref(i).map_err(|e| format!("{name}: {e}"))
    }

    fn optional_str(&self, i: usize, name: &str) -> Result<Option<&str>, String> {
        match self.value(i, name)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(Some)
                .map_err(|_| format!("{name} is not valid UTF-8")),
            other => Err(format!("{name} is {}, not text", other.data_type())),
        }
    }
}

impl Fields for Cells<'_, '_> {
    fn text(&self, field: Field) -> Result<Option<&str>, String> {
        self.optional_str(column(field), field.name())
    }

    fn integer(&self, field: Field) -> Result<Option<u64>, String> {
        let name = field.name();
        match self.value(column(field), name)? {
            ValueRef::Integer(n) => u64::try_from(n)
                .map(Some)
                .map_err(|_| format!("{name} is negative ({n})")),
            ValueRef::Null => Ok(None),
            other => Err(format!("{name} is {}, not an integer", other.data_type())),
        }
    }

    fn steps(&self) -> Result<Vec<JournalEntry>, String> {
        let steps = self
            .optional_str(STEPS, "steps")?
            .ok_or_else(|| "steps is missing".to_owned())?;
        codec::steps_from_json(steps)
    }
}

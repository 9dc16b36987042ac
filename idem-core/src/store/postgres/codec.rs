//! Rows to records, and the store's values to statement parameters. What the columns mean is
//! decided once, in the stores' [shared codec](crate::store::codec); this file says where
//! each field sits in [`COLUMNS`](super::statements::COLUMNS) and how PostgreSQL types it.

use std::time::Duration;

use deadpool_postgres::tokio_postgres::Row;

use crate::key::RecordKey;
use crate::record::{Fence, JournalEntry, Record, Timestamp};
use crate::store::StoreError;
use crate::store::codec::{self, Field, Fields, clamped_millis};

/// Durations are capped so that `now + duration` never overflows a `bigint` (the cap is
/// about 73 million years).
const MAX_DURATION_MS: i64 = i64::MAX / 4;

/// A duration in whole milliseconds, capped so `now + it` fits a `bigint`.
pub(super) fn millis(d: Duration) -> i64 {
    let cap = Duration::from_millis(MAX_DURATION_MS.unsigned_abs());
    i64::try_from(clamped_millis(d, cap)).unwrap_or(MAX_DURATION_MS)
}

/// A fence as a `bigint`. No row holds a fence beyond `i64::MAX`, so such a writer is stale.
pub(super) fn fence_param(key: &RecordKey, fence: Fence) -> Result<i64, StoreError> {
    i64::try_from(fence).map_err(|_| StoreError::fenced(key, fence))
}

/// An instant read from `column`.
pub(super) fn timestamp(key: &RecordKey, column: &str, ms: i64) -> Result<Timestamp, StoreError> {
    u64::try_from(ms)
        .map(Timestamp)
        .map_err(|_| StoreError::corrupt(key, format!("{column} is negative: {ms}")))
}

/// Read a record from `row`, starting at column `at` (in `COLUMNS` order). `fallback` names
/// the record in errors when the key itself cannot be read.
pub(super) fn decode(row: &Row, at: usize, fallback: &RecordKey) -> Result<Record, StoreError> {
    let key = match row.try_get::<_, String>(at) {
        Ok(k) => RecordKey::from_stored(k),
        Err(e) => return Err(StoreError::corrupt(fallback, format!("key: {e}"))),
    };
    codec::decode_record(key, &Columns { row, at })
}

/// A record's columns in a row, from column `at` on.
struct Columns<'a> {
    row: &'a Row,
    at: usize,
}

/// Where each field sits in `COLUMNS`, counted from the key.
fn column(field: Field) -> usize {
    match field {
        Field::Tool => 1,
        Field::Fingerprint => 2,
        Field::Fence => 3,
        Field::State => 4,
        Field::LeaseUntil => 5,
        Field::Outcome => 6,
        Field::ExpiresAt => 7,
        Field::Since => 8,
        Field::LastError => 9,
        Field::Arguments => 11,
        Field::CreatedAt => 12,
        Field::UpdatedAt => 13,
        Field::Tenant => 14,
        Field::Contract => 15,
    }
}

/// The column of the journal (`steps::text`).
const STEPS: usize = 10;

impl Fields for Columns<'_> {
    fn text(&self, field: Field) -> Result<Option<&str>, String> {
        self.row
            .try_get::<_, Option<&str>>(self.at + column(field))
            .map_err(|e| format!("{}: {e}", self.name(field)))
    }

    fn integer(&self, field: Field) -> Result<Option<u64>, String> {
        let name = self.name(field);
        match self.row.try_get::<_, Option<i64>>(self.at + column(field)) {
            Ok(Some(n)) => u64::try_from(n)
                .map(Some)
                .map_err(|_| format!("{name} is negative: {n}")),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("{name}: {e}")),
        }
    }

    fn steps(&self) -> Result<Vec<JournalEntry>, String> {
        let steps = self
            .row
            .try_get::<_, &str>(self.at + STEPS)
            .map_err(|e| format!("steps: {e}"))?;
        codec::steps_from_json(steps)
    }

    fn name(&self, field: Field) -> &'static str {
        match field {
            Field::Since => "unknown_since",
            other => other.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_never_overflow_a_bigint_sum() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_DURATION_MS);
        assert!(MAX_DURATION_MS.checked_add(i64::MAX / 2).is_some());
    }
}

//! Replies from Redis to values: text, the server's `TIME`, the text of pending approvals,
//! and records read back from a record's hash and step list through the stores' [shared
//! codec](crate::store::codec).

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use crate::key::RecordKey;
use crate::record::{JournalEntry, Record, Timestamp};
use crate::store::StoreError;
use crate::store::codec::{self, Field, Fields, clamped_millis};

/// The longest lease, TTL or retention the store honours (about 31,000 years); longer ones
/// are clamped to it.
pub const MAX_DURATION: Duration = Duration::from_millis(1_000_000_000_000_000);

/// Milliseconds, clamped to [`MAX_DURATION`].
pub(super) fn millis(d: Duration) -> u64 {
    clamped_millis(d, MAX_DURATION)
}

pub(super) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::Int(i) => Some(i.to_string()),
        other => bytes(other).and_then(|b| String::from_utf8(b.to_vec()).ok()),
    }
}

/// The text of the pending approval under `key` as `GET` or `MGET` reply it: `None` for nil,
/// corrupt when it is not UTF-8 text.
pub(super) fn approval_value(key: &RecordKey, v: &Value) -> Result<Option<String>, StoreError> {
    match v {
        Value::Nil => Ok(None),
        other => text(other)
            .map(Some)
            .ok_or_else(|| StoreError::corrupt(key, "a pending approval that is not UTF-8 text")),
    }
}

/// `TIME` replies seconds and microseconds.
pub(super) fn server_time(v: &Value) -> Option<Timestamp> {
    let Value::Array(parts) = v else {
        return None;
    };
    let [secs, micros] = parts.as_slice() else {
        return None;
    };
    let secs: u64 = text(secs)?.parse().ok()?;
    let micros: u64 = text(micros)?.parse().ok()?;
    Some(Timestamp(
        secs.checked_mul(1000)?.checked_add(micros / 1000)?,
    ))
}

/// A record a script returned as `{HGETALL, LRANGE}`.
pub(super) fn decode_reply_record(
    key: &RecordKey,
    v: &Value,
) -> Result<Option<Record>, StoreError> {
    match v {
        Value::Array(parts) => match parts.as_slice() {
            [hash, steps] => decode_record(key, hash, steps),
            _ => Err(StoreError::corrupt(key, "a record reply has two parts")),
        },
        _ => Err(StoreError::corrupt(
            key,
            format!("unexpected record reply {v:?}"),
        )),
    }
}

/// Build a record from its hash and its step list; an empty hash is no record.
pub(super) fn decode_record(
    key: &RecordKey,
    hash: &Value,
    steps: &Value,
) -> Result<Option<Record>, StoreError> {
    let pairs: Vec<(&Value, &Value)> = match hash {
        Value::Array(flat) => {
            if flat.len() % 2 != 0 {
                return Err(StoreError::corrupt(key, "odd number of hash items"));
            }
            flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect()
        }
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        Value::Nil => Vec::new(),
        other => {
            return Err(StoreError::corrupt(
                key,
                format!("record is not a hash: {other:?}"),
            ));
        }
    };
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut fields = HashMap::with_capacity(pairs.len());
    for (k, v) in pairs {
        let (Some(k), Some(v)) = (text(k), text(v)) else {
            return Err(StoreError::corrupt(key, "a record field is not UTF-8 text"));
        };
        fields.insert(k, v);
    }
    // Report errors under the key the record names, when it names one.
    let stored_key = fields
        .get("key")
        .map(|k| RecordKey::from_stored(k.as_str()))
        .ok_or_else(|| StoreError::corrupt(key, "missing field `key`"))?;
    let names = match steps {
        Value::Array(names) => names.as_slice(),
        Value::Nil => &[],
        other => {
            return Err(StoreError::corrupt(
                &stored_key,
                format!("steps are not a list: {other:?}"),
            ));
        }
    };
    let record = Hash { fields, names };
    codec::decode_record(stored_key, &record).map(Some)
}

/// A record's hash, and the names of its steps in order (their values are `step:<name>`
/// fields of the hash).
struct Hash<'a> {
    fields: HashMap<String, String>,
    names: &'a [Value],
}

impl Fields for Hash<'_> {
    fn text(&self, field: Field) -> Result<Option<&str>, String> {
        Ok(self.fields.get(self.name(field)).map(String::as_str))
    }

    fn integer(&self, field: Field) -> Result<Option<u64>, String> {
        self.text(field)?
            .map(|n| {
                n.parse::<u64>()
                    .map_err(|_| format!("field `{}` is not a number", self.name(field)))
            })
            .transpose()
    }

    fn steps(&self) -> Result<Vec<JournalEntry>, String> {
        let mut journal = Vec::with_capacity(self.names.len());
        for name in self.names {
            let step = text(name).ok_or("a step name is not UTF-8 text")?;
            let value = self
                .fields
                .get(&format!("step:{step}"))
                .ok_or_else(|| format!("missing field `step:{step}`"))?
                .clone();
            journal.push(JournalEntry { step, value });
        }
        Ok(journal)
    }

    fn name(&self, field: Field) -> &'static str {
        match field {
            Field::Fingerprint => "fp",
            Field::Arguments => "args",
            other => other.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_clamped_to_exact_doubles() {
        assert_eq!(millis(Duration::MAX), 1_000_000_000_000_000);
        assert!(millis(Duration::MAX) * 3 < 1 << 53);
    }
}

//! A span per store operation, for seeing what a store does and how long it takes.
//!
//! Each operation runs inside a `debug` span named `idem.store` with two fields: `op`, the
//! [`Store`](crate::store::Store) method, and `key`, a short hash of the record key (for the
//! operations about one key). When it finishes, one `debug` event in the span reports
//! `outcome` (`ok`, or the [`code`](crate::store::StoreError::code) of its error) and
//! `elapsed_us`. No argument, outcome, journal value or error message is recorded: those
//! hold what tools were called with and returned.

use std::time::Instant;

use sha2::{Digest, Sha256};
use tracing::Instrument;

use super::layered::Operation;
use super::layered::{Layer, Layered, StoreFuture};
use crate::canonical::hex;
use crate::key::RecordKey;

/// The tracing layer: a span around each operation. See the [module documentation](self).
///
/// ```
/// use idem::store::layer::{Layer, Trace};
/// use idem::store::memory::MemoryStore;
///
/// let store = Trace.layer(MemoryStore::new());
/// # let _ = store;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Trace;

/// A store behind [`Trace`].
pub type Traced<S> = Layered<S, Trace>;

impl Layer for Trace {
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &Operation<'_>,
        next: impl FnOnce() -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        let span = tracing::debug_span!(
            "idem.store",
            op = operation.name(),
            key = tracing::field::Empty
        );
        if span.is_disabled() {
            return next();
        }
        if let Some(key) = operation.key() {
            span.record("key", short_hash(key).as_str());
        }
        let running = next();
        Box::pin(
            async move {
                let started = Instant::now();
                let result = running.await;
                let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                let outcome = match &result {
                    Ok(_) => "ok",
                    Err(e) => e.code(),
                };
                tracing::debug!(outcome, elapsed_us, "store operation");
                result
            }
            .instrument(span),
        )
    }
}

/// Twelve hex digits that tell keys apart in a log. A key the dispatcher derived is already a
/// SHA-256 digest, and its first twelve digits are what operators see of it elsewhere; any
/// other key (one a caller stored as text) is hashed first, so the log never holds its text.
pub(crate) fn short_hash(key: &RecordKey) -> String {
    let text = key.as_str();
    let is_digest =
        text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if is_digest {
        text[..12].to_owned()
    } else {
        hex(&Sha256::digest(text.as_bytes())[..6])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_hashes_never_show_a_key_that_is_not_a_digest() {
        let digest = RecordKey::from_stored("0123456789abcdef".repeat(4));
        assert_eq!(short_hash(&digest), "0123456789ab");
        for text in ["order-42".to_owned(), String::new(), "A".repeat(64)] {
            let hashed = short_hash(&RecordKey::from_stored(text.as_str()));
            assert_eq!(hashed.len(), 12);
            assert!(!text.contains(&hashed), "{text:?} shows in {hashed}");
        }
    }
}

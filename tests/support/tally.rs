//! What the probe tools of a test binary did, counted by label: each execution (or step, or
//! deserialisation) notes an entry under the label of its call, such as the key it was handed,
//! and the test counts them. A static, since a `#[tool]` body is a plain function that reaches
//! no test state otherwise; labels keep the tests of one binary apart.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Entries by label, in the order they were noted.
#[derive(Debug, Default)]
pub struct Tally(Mutex<BTreeMap<String, Vec<String>>>);

impl Tally {
    pub const fn new() -> Tally {
        Tally(Mutex::new(BTreeMap::new()))
    }

    /// Note `entry` under `label`; how many `label` has now.
    pub fn note(&self, label: &str, entry: &str) -> usize {
        let mut map = self.map();
        let entries = map.entry(label.to_owned()).or_default();
        entries.push(entry.to_owned());
        entries.len()
    }

    /// The entries under `label`, oldest first.
    pub fn entries(&self, label: &str) -> Vec<String> {
        self.map().get(label).cloned().unwrap_or_default()
    }

    /// How many entries `label` has.
    pub fn count(&self, label: &str) -> usize {
        self.map().get(label).map_or(0, Vec::len)
    }

    // A probe that panics on purpose must not take the others' counts with it.
    fn map(&self) -> MutexGuard<'_, BTreeMap<String, Vec<String>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

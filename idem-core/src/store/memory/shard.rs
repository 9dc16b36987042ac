//! One shard of a memory store: its records in two tables (digest keys as bytes, other keys
//! as text), each entry boxed so that a table's slots are one pointer wide.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

use super::compact::{Compact, Tools, split_origin};
use super::keys::{Digest, DigestHashing, KeyRef};
use crate::record::{Fence, Record};
use crate::store::machine::Write;

/// A record and its key, boxed in a table so that the table's slots are one pointer wide (a
/// table is at most 7/8 full and up to half empty after it grows: inline entries would cost
/// their size again in empty slots).
#[derive(Debug)]
pub(super) struct Entry<K> {
    key: K,
    pub(super) record: Compact,
}

/// An entry in a table, hashed and compared by its key.
#[derive(Debug)]
pub(super) struct Slot<K>(Box<Entry<K>>);

impl Borrow<Digest> for Slot<Digest> {
    fn borrow(&self) -> &Digest {
        &self.0.key
    }
}

impl Hash for Slot<Digest> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same hash as the borrowed form's, as `Borrow` requires.
        self.0.key.hash(state);
    }
}

impl Borrow<str> for Slot<Box<str>> {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

impl Hash for Slot<Box<str>> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same hash as the borrowed form's, as `Borrow` requires.
        str::hash(&self.0.key, state);
    }
}

impl<K: PartialEq> PartialEq for Slot<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl<K: Eq> Eq for Slot<K> {}

/// Store `record` in the entry that held the key before (reusing its allocation and, when the
/// tool is the same, its name), or in a new one.
pub(super) fn fill<K>(
    tools: &mut Tools,
    old: Option<Box<Entry<K>>>,
    key: impl FnOnce() -> K,
    record: Record,
) -> Box<Entry<K>> {
    match old {
        Some(mut entry) => {
            let tool = if split_origin(&entry.record.tool) == (&record.tool, &record.tenant) {
                entry.record.tool.clone()
            } else {
                tools.intern(&record.tool, &record.tenant)
            };
            let previous = std::mem::replace(&mut entry.record, Compact::new(record, tool));
            tools.forget(&previous.tool);
            entry
        }
        None => {
            let tool = tools.intern(&record.tool, &record.tenant);
            Box::new(Entry {
                key: key(),
                record: Compact::new(record, tool),
            })
        }
    }
}

/// One shard: records found by their key, in one of two tables by the key's form.
#[derive(Debug, Default)]
pub(super) struct Shard {
    digests: HashSet<Slot<Digest>, DigestHashing>,
    texts: HashSet<Slot<Box<str>>>,
    pub(super) tools: Tools,
    /// The highest fence of any record this shard deleted: a key without a record is fenced
    /// above it (a key maps to one shard, so the shard's floor is the key's).
    pub(super) floor: Fence,
}

impl Shard {
    pub(super) fn len(&self) -> usize {
        self.digests.len() + self.texts.len()
    }

    pub(super) fn get(&self, key: KeyRef<'_>) -> Option<&Compact> {
        match key {
            KeyRef::Digest(d) => self.digests.get(&d).map(|s| &s.0.record),
            KeyRef::Text(t) => self.texts.get(t).map(|s| &s.0.record),
        }
    }

    pub(super) fn put(&mut self, key: KeyRef<'_>, record: Record) {
        match key {
            KeyRef::Digest(d) => {
                let old = self.digests.take(&d).map(|s| s.0);
                let entry = fill(&mut self.tools, old, || d, record);
                self.digests.insert(Slot(entry));
            }
            KeyRef::Text(t) => {
                let old = self.texts.take(t).map(|s| s.0);
                let entry = fill(&mut self.tools, old, || t.into(), record);
                self.texts.insert(Slot(entry));
            }
        }
    }

    pub(super) fn remove(&mut self, key: KeyRef<'_>) {
        let gone = match key {
            KeyRef::Digest(d) => self.digests.take(&d).map(|s| s.0.record),
            KeyRef::Text(t) => self.texts.take(t).map(|s| s.0.record),
        };
        if let Some(record) = gone {
            self.floor = self.floor.max(record.fence());
            self.tools.forget(&record.tool);
        }
    }

    /// Keep the records `keep` says to; how many went.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Compact) -> bool) -> usize {
        let before = self.len();
        let (tools, floor) = (&mut self.tools, &mut self.floor);
        let mut judge = |record: &Compact| {
            let kept = keep(record);
            if !kept {
                *floor = (*floor).max(record.fence());
                tools.forget(&record.tool);
            }
            kept
        };
        self.digests.retain(|s| judge(&s.0.record));
        self.texts.retain(|s| judge(&s.0.record));
        before - self.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (KeyRef<'_>, &Compact)> {
        let digests = self
            .digests
            .iter()
            .map(|s| (KeyRef::Digest(s.0.key), &s.0.record));
        let texts = self
            .texts
            .iter()
            .map(|s| (KeyRef::Text(&s.0.key), &s.0.record));
        digests.chain(texts)
    }
}

impl Shard {
    /// Do what the state machine decided for `key`.
    pub(super) fn apply(&mut self, key: KeyRef<'_>, write: Write) {
        match write {
            Write::Unchanged => {}
            Write::Put(r) => {
                // The machine writes a record under the key it was asked about.
                debug_assert_eq!(KeyRef::of(&r.key), key);
                self.put(key, *r);
            }
            Write::Delete => self.remove(key),
        }
    }
}

/// A poisoned shard only means another thread panicked while holding it; every write to a
/// shard (and to the pending approvals) is a single map operation, so its data is still
/// consistent.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

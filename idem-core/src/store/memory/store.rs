//! The [`Store`] impl of the memory backend: every change of one key's record is a
//! [`Transition`] run under its shard's lock.

use std::sync::MutexGuard;
use std::time::Duration;

use async_trait::async_trait;

use super::MemoryBackend;
use super::compact::split_origin;
use super::keys::{KeyRef, SHARDS};
use super::shard::{Shard, lock};
use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::machine::Write;
use crate::store::transition::{self as t, Records, Transition};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// One key's shard, locked for one transition.
struct Locked<'a> {
    shard: MutexGuard<'a, Shard>,
    at: KeyRef<'a>,
    now: Timestamp,
    per_shard: usize,
    /// Whether the key had a record when it was loaded.
    found: bool,
}

impl Records for Locked<'_> {
    type Error = StoreError;

    fn load(&mut self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let record = self.shard.get(self.at).map(|c| c.to_record(key.clone()));
        self.found = record.is_some();
        Ok(record)
    }

    fn apply(&mut self, _: &RecordKey, write: Write) -> Result<(), StoreError> {
        // Only a claim writes a key that has no record: the one write a full shard refuses,
        // once it has evicted what expired.
        if matches!(write, Write::Put(_)) && !self.found && self.shard.len() >= self.per_shard {
            let now = self.now;
            self.shard.retain(|r| r.is_live(now));
            if self.shard.len() >= self.per_shard {
                return Err(StoreError::CapacityExceeded {
                    capacity: self.per_shard * SHARDS,
                });
            }
        }
        self.shard.apply(self.at, write);
        Ok(())
    }

    fn fence_floor(&mut self) -> Result<Fence, StoreError> {
        Ok(self.shard.floor)
    }
}

impl MemoryBackend {
    /// Run `transition` on its key's record, under the key's shard's lock.
    fn change<T: Transition>(&self, transition: T) -> Result<T::Output, StoreError> {
        let now = self.clock.now();
        let at = KeyRef::of(transition.key());
        let mut records = Locked {
            shard: self.shard(at),
            at,
            now,
            per_shard: self.per_shard,
            found: false,
        };
        t::run(&mut records, &transition, now)
    }
}

#[async_trait]
impl Store for MemoryBackend {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        self.change(t::Claim::new(request))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.change(t::Complete::new(key, fence, outcome, ttl))
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        self.change(t::Release::new(key, fence))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.change(t::Renew::new(key, fence, lease))
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        self.change(t::Journal::new(key, fence, step, value))
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        self.change(t::MarkUnknown::new(key, fence, error))
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let now = self.clock.now();
        let at = KeyRef::of(key);
        let shard = self.shard(at);
        Ok(shard
            .get(at)
            .filter(|r| r.is_live(now))
            .map(|r| r.to_record(key.clone())))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            for (key, r) in shard.iter() {
                if filter.admits(r.kind(), split_origin(&r.tool).1) && r.is_live(now) {
                    out.push(r.to_record(key.to_record_key()));
                }
            }
        }
        out.retain(|r| filter.after_cursor(r));
        crate::store::sort_listed(&mut out);
        out.truncate(filter.limit);
        Ok(out)
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        self.change(t::Resolve::new(key, outcome, ttl))
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.change(t::SettleUnknown::new(key, fence, outcome, ttl))
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        self.change(t::ForceRelease::new(key))
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let limit = filter.limit;
        let mut purged = 0;
        for shard in self.shards.iter() {
            if purged >= limit {
                break;
            }
            let mut budget = limit - purged;
            purged += lock(shard).retain(|r| {
                if budget > 0 && r.is_purgeable(filter, now) {
                    budget -= 1;
                    false
                } else {
                    true
                }
            });
        }
        // Run accounts past their time go too (they are not records: not counted).
        lock(&self.runs).retain(|(tenant, _), entries| {
            if filter.tenant.as_deref().is_some_and(|t| t != tenant) {
                return true;
            }
            entries.retain(|(expires, _)| *expires > now);
            !entries.is_empty()
        });
        // So do expired budgets, of no tenant: gone for every reader already.
        lock(&self.budgets).retain(|_, (expires, _)| *expires > now);
        Ok(purged)
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.clock.now())
    }

    async fn approval_text(&self, key: &RecordKey) -> Result<Option<String>, StoreError> {
        Ok(lock(&self.approvals).get(key.as_str()).cloned())
    }

    async fn swap_approval(
        &self,
        key: &RecordKey,
        expected: Option<&str>,
        _: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        let mut approvals = lock(&self.approvals);
        if approvals.get(key.as_str()).map(String::as_str) != expected {
            return Ok(false);
        }
        approvals.insert(key.as_str().to_owned(), text.to_owned());
        Ok(true)
    }

    async fn remove_approval(&self, key: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        let mut approvals = lock(&self.approvals);
        if approvals.get(key.as_str()).map(String::as_str) != Some(expected) {
            return Ok(false);
        }
        approvals.remove(key.as_str());
        Ok(true)
    }

    async fn approval_texts(
        &self,
        _: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        Ok(lock(&self.approvals)
            .iter()
            .map(|(k, t)| (RecordKey::from_stored(k.clone()), t.clone()))
            .collect())
    }

    async fn append_run_entry(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut runs = lock(&self.runs);
        let entries = runs
            .entry((tenant.to_owned(), run_id.to_owned()))
            .or_default();
        entries.retain(|(expires, _)| *expires > now);
        entries.push((now.plus(ttl), text.to_owned()));
        Ok(())
    }

    async fn run_entries(&self, tenant: &str, run_id: &str) -> Result<Vec<String>, StoreError> {
        let now = self.clock.now();
        let runs = lock(&self.runs);
        let Some(entries) = runs.get(&(tenant.to_owned(), run_id.to_owned())) else {
            return Ok(Vec::new());
        };
        Ok(entries
            .iter()
            .filter(|(expires, _)| *expires > now)
            .map(|(_, text)| text.clone())
            .collect())
    }

    async fn budget_text(&self, scope: &str) -> Result<Option<String>, StoreError> {
        let now = self.clock.now();
        Ok(lock(&self.budgets)
            .get(scope)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, text)| text.clone()))
    }

    async fn swap_budget(
        &self,
        scope: &str,
        expected: Option<&str>,
        text: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut budgets = lock(&self.budgets);
        let current = budgets
            .get(scope)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, text)| text.as_str());
        if current != expected {
            return Ok(false);
        }
        budgets.insert(scope.to_owned(), (now.plus(ttl), text.to_owned()));
        Ok(true)
    }
}

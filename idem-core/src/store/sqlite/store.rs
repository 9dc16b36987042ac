//! The [`Store`] impl of the SQLite backend. Each operation is a [`Job`]: a [`Transition`]
//! of one record (load, decide, apply, inside `BEGIN IMMEDIATE`), a statement over many, or
//! a statement on a table of texts beside the records (`texts.rs`: pending approvals, run
//! accounts, budgets).
//! A job runs inline on the caller's borrows when it can start at once, or on the blocking
//! pool on a copy made only then ("Where operations run" in the [store's
//! documentation](super)).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteBackend;
use super::codec::{load, load_many, put};
use super::connection::{CheckpointReservation, Database, Failure};
use super::job::Job;
use super::statements::{
    DELETE_ONE, EVICT_ON_CLAIM, FENCE_FLOOR, LIST_ATTENTION, LIST_STATE, PURGE_BUDGETS,
    PURGE_EXPIRED, PURGE_RUN_ENTRIES,
};
use super::texts::{
    AppendRunEntry, ApprovalText, ApprovalTexts, BudgetText, RemoveApproval, RunEntries,
    SwapApproval, SwapBudget,
};
use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::codec::{signed_millis, state_name};
use crate::store::machine::{self, Write};
use crate::store::transition::{self as t, Records, Transition};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// The rows of one transaction.
struct Rows<'c>(&'c Connection);

impl Records for Rows<'_> {
    type Error = Failure;

    fn load(&mut self, key: &RecordKey) -> Result<Option<Record>, Failure> {
        load(self.0, key)
    }

    fn apply(&mut self, key: &RecordKey, write: Write) -> Result<(), Failure> {
        match write {
            Write::Unchanged => Ok(()),
            Write::Put(record) => put(self.0, &record),
            Write::Delete => {
                // The table's trigger raises the fence floor.
                self.0.prepare_cached(DELETE_ONE)?.execute([key.as_str()])?;
                Ok(())
            }
        }
    }

    fn fence_floor(&mut self) -> Result<Fence, Failure> {
        let mut floor = self.0.prepare_cached(FENCE_FLOOR)?;
        let found: Option<i64> = floor.query_row([], |row| row.get(0)).optional()?;
        Ok(found.map_or(0, |f| f.max(0) as Fence))
    }
}

/// A transition of one record.
struct Change<T>(T);

impl<T: Transition> Job for Change<T> {
    type Output = T::Output;
    type Owned = Change<T::Owned>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<T::Output, Failure> {
        t::run(&mut Rows(conn), &self.0, now)
    }

    fn detached(&self) -> Self::Owned {
        Change(self.0.detached())
    }
}

/// A claim, then the eviction of up to two completed records that expired at or before
/// `now` ([`EVICT_ON_CLAIM`]): every record is created by a claim, so the table stays bounded
/// without a janitor.
struct ClaimAndEvict<'a>(t::Claim<'a>);

impl Job for ClaimAndEvict<'_> {
    type Output = Claim;
    type Owned = ClaimAndEvict<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Claim, Failure> {
        let claim = t::run(&mut Rows(conn), &self.0, now)?;
        conn.prepare_cached(EVICT_ON_CLAIM)?
            .execute([signed_millis(now)])?;
        Ok(claim)
    }

    fn detached(&self) -> Self::Owned {
        ClaimAndEvict(self.0.detached())
    }
}

/// [`Store::get`]: the record, unless it is a completed one past its expiry.
struct Get<'a>(Cow<'a, RecordKey>);

impl Job for Get<'_> {
    type Output = Option<Record>;
    type Owned = Get<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Option<Record>, Failure> {
        Ok(load(conn, &self.0)?.filter(|r| machine::is_live(r, now)))
    }

    fn detached(&self) -> Self::Owned {
        Get(t::owned(&*self.0))
    }
}

/// [`Store::list`].
struct List(ListFilter);

impl Job for List {
    type Output = Vec<Record>;
    type Owned = List;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Vec<Record>, Failure> {
        let filter = &self.0;
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let after = filter.after.as_ref().map(|c| signed_millis(c.created_at));
        let after_key = filter.after.as_ref().map(|c| c.key.as_str());
        match filter.state {
            // InProgress and Unknown records never expire.
            None => load_many(
                conn,
                LIST_ATTENTION,
                params![limit, filter.tenant, after, after_key],
            ),
            Some(kind) => load_many(
                conn,
                LIST_STATE,
                params![
                    state_name(kind),
                    signed_millis(now),
                    limit,
                    filter.tenant,
                    after,
                    after_key
                ],
            ),
        }
    }

    fn detached(&self) -> List {
        List(self.0.clone())
    }
}

/// [`Store::purge_expired`]: up to `filter.limit` records [`machine::is_purgeable`]
/// describes at `now`.
struct Purge<'a>(Cow<'a, PurgeFilter>);

impl Job for Purge<'_> {
    type Output = usize;
    type Owned = Purge<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<usize, Failure> {
        let filter = &self.0;
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let retention = i64::try_from(filter.unknown_retention.as_millis()).unwrap_or(i64::MAX);
        // `since + retention <= now`, kept exact: a retention longer than the clock's reading
        // gives a cutoff before the epoch, which no record reaches.
        let unknown_since = signed_millis(now).saturating_sub(retention);
        let purged = conn.prepare_cached(PURGE_EXPIRED)?.execute(params![
            signed_millis(now),
            unknown_since,
            filter.tenant,
            limit
        ])?;
        // Run accounts past their time go too (they are not records: not counted), and
        // expired budgets, of no tenant: gone for every reader already.
        conn.prepare_cached(PURGE_RUN_ENTRIES)?
            .execute(params![signed_millis(now), filter.tenant])?;
        conn.prepare_cached(PURGE_BUDGETS)?
            .execute([signed_millis(now)])?;
        Ok(purged)
    }

    fn detached(&self) -> Self::Owned {
        Purge(t::owned(&*self.0))
    }
}

/// Whether a job writes (a transaction, which may `fsync` at its commit) or only reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

impl SqliteBackend {
    /// Run `job` inline if it may and can start at once, otherwise a copy of it on the
    /// store's thread; after a write, queue a checkpoint if one is due.
    async fn run<J: Job>(&self, access: Access, job: J) -> Result<J::Output, StoreError> {
        let here = |conn: &Connection, now: Timestamp| job.run(conn, now);
        let inline = match access {
            Access::Write if self.inline_writes() => self.db.try_write_here(here),
            Access::Read if self.inline_reads() => self.db.try_read_here(here),
            _ => None,
        };
        let result = match inline {
            Some(result) => result,
            None => {
                let job = job.detached();
                self.pooled(move |db| {
                    let op = |conn: &Connection, now: Timestamp| job.run(conn, now);
                    match access {
                        Access::Write => db.write(op),
                        Access::Read => db.read(op),
                    }
                })
                .await
            }
        };
        if access == Access::Write && self.db.checkpoint_due() {
            let reserved = CheckpointReservation::of(&self.db);
            // Not awaited: the caller's write is done; the checkpoint only keeps the WAL short.
            drop(tokio::task::spawn_blocking(move || reserved.run()));
        }
        result
    }

    /// Run a transition of one record.
    async fn change<T: Transition>(&self, transition: T) -> Result<T::Output, StoreError> {
        self.run(Access::Write, Change(transition)).await
    }

    /// Run `op` on the store's thread. If the caller's future is dropped, the operation still
    /// finishes (or rolls back) as one transaction; an orphaned claim is then settled by its
    /// lease, like any other.
    async fn pooled<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.worker.run(Box::new(move || {
            let _ = reply.send(op(&db));
        }))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("SQLite worker thread failed".into()))?
    }
}

#[async_trait]
impl Store for SqliteBackend {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let job = ClaimAndEvict(t::Claim::new(request));
        self.run(Access::Write, job).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.change(t::Complete::new(key, fence, outcome, ttl))
            .await
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        self.change(t::Release::new(key, fence)).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.change(t::Renew::new(key, fence, lease)).await
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        self.change(t::Journal::new(key, fence, step, value)).await
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        self.change(t::MarkUnknown::new(key, fence, error)).await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.run(Access::Read, Get(Cow::Borrowed(key))).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        self.run(Access::Read, List(filter)).await
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        self.change(t::Resolve::new(key, outcome, ttl)).await
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.change(t::SettleUnknown::new(key, fence, outcome, ttl))
            .await
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        self.change(t::ForceRelease::new(key)).await
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        self.run(Access::Write, Purge(Cow::Borrowed(filter))).await
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.db.clock.now())
    }

    async fn approval_text(&self, key: &RecordKey) -> Result<Option<String>, StoreError> {
        self.run(Access::Read, ApprovalText(Cow::Borrowed(key)))
            .await
    }

    async fn swap_approval(
        &self,
        key: &RecordKey,
        expected: Option<&str>,
        entry: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        let job = SwapApproval {
            key: Cow::Borrowed(key),
            expected: expected.map(Cow::Borrowed),
            tenant: Cow::Borrowed(&entry.tenant),
            tool: Cow::Borrowed(&entry.tool),
            text: Cow::Borrowed(text),
        };
        self.run(Access::Write, job).await
    }

    async fn remove_approval(&self, key: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        let job = RemoveApproval {
            key: Cow::Borrowed(key),
            expected: Cow::Borrowed(expected),
        };
        self.run(Access::Write, job).await
    }

    async fn approval_texts(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        self.run(Access::Read, ApprovalTexts(Cow::Borrowed(filter)))
            .await
    }

    async fn append_run_entry(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let job = AppendRunEntry {
            tenant: Cow::Borrowed(tenant),
            run_id: Cow::Borrowed(run_id),
            text: Cow::Borrowed(text),
            ttl,
        };
        self.run(Access::Write, job).await
    }

    async fn run_entries(&self, tenant: &str, run_id: &str) -> Result<Vec<String>, StoreError> {
        let job = RunEntries {
            tenant: Cow::Borrowed(tenant),
            run_id: Cow::Borrowed(run_id),
        };
        self.run(Access::Read, job).await
    }

    async fn budget_text(&self, scope: &str) -> Result<Option<String>, StoreError> {
        self.run(Access::Read, BudgetText(Cow::Borrowed(scope)))
            .await
    }

    async fn swap_budget(
        &self,
        scope: &str,
        expected: Option<&str>,
        text: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let job = SwapBudget {
            scope: Cow::Borrowed(scope),
            expected: expected.map(Cow::Borrowed),
            text: Cow::Borrowed(text),
            ttl,
        };
        self.run(Access::Write, job).await
    }
}

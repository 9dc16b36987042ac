//! The [`Store`] impl of the SQLite backend. Each operation is a [`Job`]: a [`Transition`]
//! of one record (load, decide, apply, inside `BEGIN IMMEDIATE`), a statement over many, or
//! a statement on the pending approvals' table (a swap inside `BEGIN IMMEDIATE`, as writes
//! are).
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
use super::statements::{
    APPROVAL_TEXT, APPROVAL_TEXTS, APPROVAL_TEXTS_OF_TENANT, DELETE_APPROVAL, DELETE_ONE,
    EVICT_ON_CLAIM, FENCE_FLOOR, INSERT_APPROVAL, INSERT_RUN_ENTRY, LIST_ATTENTION, LIST_STATE,
    PURGE_EXPIRED, PURGE_RUN_ENTRIES, RUN_ENTRIES, UPDATE_APPROVAL,
};
use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::codec::{signed_millis, state_name};
use crate::store::machine::{self, Write};
use crate::store::transition::{self as t, Records, Transition};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// One operation as the store runs it: on a connection, at the clock read once it holds what
/// it needs; borrowing its inputs inline, owning a copy of them on the pool.
trait Job: Send + Sync {
    /// What the operation answers.
    type Output: Send + 'static;

    /// The same job owning its inputs.
    type Owned: Job<Output = Self::Output> + 'static;

    /// Run on `conn` (inside a transaction, for a write).
    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Self::Output, Failure>;

    /// The job with its inputs copied, for the store's thread.
    fn detached(&self) -> Self::Owned;
}

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
        // Run accounts past their time go too (they are not records: not counted).
        conn.prepare_cached(PURGE_RUN_ENTRIES)?
            .execute(params![signed_millis(now), filter.tenant])?;
        Ok(purged)
    }

    fn detached(&self) -> Self::Owned {
        Purge(t::owned(&*self.0))
    }
}

/// [`Store::approval_text`]: the text under a key.
struct ApprovalText<'a>(Cow<'a, RecordKey>);

impl Job for ApprovalText<'_> {
    type Output = Option<String>;
    type Owned = ApprovalText<'static>;

    fn run(&self, conn: &Connection, _: Timestamp) -> Result<Option<String>, Failure> {
        Ok(conn
            .prepare_cached(APPROVAL_TEXT)?
            .query_row([self.0.as_str()], |row| row.get(0))
            .optional()?)
    }

    fn detached(&self) -> Self::Owned {
        ApprovalText(t::owned(&*self.0))
    }
}

/// [`Store::swap_approval`]: one statement inside the write transaction, which changes one
/// row if the text under the key is still the expected one (or, expecting none, if there is
/// no entry), and no row otherwise.
struct SwapApproval<'a> {
    key: Cow<'a, RecordKey>,
    expected: Option<Cow<'a, str>>,
    tenant: Cow<'a, str>,
    tool: Cow<'a, str>,
    text: Cow<'a, str>,
}

impl Job for SwapApproval<'_> {
    type Output = bool;
    type Owned = SwapApproval<'static>;

    fn run(&self, conn: &Connection, _: Timestamp) -> Result<bool, Failure> {
        let (key, tenant, tool, text) =
            (self.key.as_str(), &*self.tenant, &*self.tool, &*self.text);
        let changed = match &self.expected {
            None => conn
                .prepare_cached(INSERT_APPROVAL)?
                .execute(params![key, tenant, tool, text])?,
            Some(expected) => conn.prepare_cached(UPDATE_APPROVAL)?.execute(params![
                key,
                tenant,
                tool,
                text,
                &**expected
            ])?,
        };
        Ok(changed == 1)
    }

    fn detached(&self) -> Self::Owned {
        SwapApproval {
            key: t::owned(&*self.key),
            expected: self.expected.as_deref().map(t::owned),
            tenant: t::owned(&*self.tenant),
            tool: t::owned(&*self.tool),
            text: t::owned(&*self.text),
        }
    }
}

/// [`Store::remove_approval`]: delete the entry if its text is still the expected one.
struct RemoveApproval<'a> {
    key: Cow<'a, RecordKey>,
    expected: Cow<'a, str>,
}

impl Job for RemoveApproval<'_> {
    type Output = bool;
    type Owned = RemoveApproval<'static>;

    fn run(&self, conn: &Connection, _: Timestamp) -> Result<bool, Failure> {
        let deleted = conn
            .prepare_cached(DELETE_APPROVAL)?
            .execute(params![self.key.as_str(), &*self.expected])?;
        Ok(deleted == 1)
    }

    fn detached(&self) -> Self::Owned {
        RemoveApproval {
            key: t::owned(&*self.key),
            expected: t::owned(&*self.expected),
        }
    }
}

/// [`Store::approval_texts`]: the entries of the filter's tenant and tool, when it names
/// them; its state and limit are the caller's to apply.
struct ApprovalTexts<'a>(Cow<'a, ApprovalFilter>);

impl Job for ApprovalTexts<'_> {
    type Output = Vec<(RecordKey, String)>;
    type Owned = ApprovalTexts<'static>;

    fn run(&self, conn: &Connection, _: Timestamp) -> Result<Self::Output, Failure> {
        let filter = &self.0;
        let mut stmt;
        let mut rows = match &filter.tenant {
            Some(tenant) => {
                stmt = conn.prepare_cached(APPROVAL_TEXTS_OF_TENANT)?;
                stmt.query(params![tenant, filter.tool])?
            }
            None => {
                stmt = conn.prepare_cached(APPROVAL_TEXTS)?;
                stmt.query(params![filter.tool])?
            }
        };
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push((
                RecordKey::from_stored(row.get::<_, String>(0)?),
                row.get(1)?,
            ));
        }
        Ok(out)
    }

    fn detached(&self) -> Self::Owned {
        ApprovalTexts(t::owned(&*self.0))
    }
}

/// [`Store::append_run_entry`]: one row, expiring `ttl` from the store's clock.
struct AppendRunEntry<'a> {
    tenant: Cow<'a, str>,
    run_id: Cow<'a, str>,
    text: Cow<'a, str>,
    ttl: Duration,
}

impl Job for AppendRunEntry<'_> {
    type Output = ();
    type Owned = AppendRunEntry<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<(), Failure> {
        conn.prepare_cached(INSERT_RUN_ENTRY)?.execute(params![
            &*self.tenant,
            &*self.run_id,
            signed_millis(now.plus(self.ttl)),
            &*self.text
        ])?;
        Ok(())
    }

    fn detached(&self) -> Self::Owned {
        AppendRunEntry {
            tenant: t::owned(&*self.tenant),
            run_id: t::owned(&*self.run_id),
            text: t::owned(&*self.text),
            ttl: self.ttl,
        }
    }
}

/// [`Store::run_entries`]: a run's unexpired entries, in append order.
struct RunEntries<'a> {
    tenant: Cow<'a, str>,
    run_id: Cow<'a, str>,
}

impl Job for RunEntries<'_> {
    type Output = Vec<String>;
    type Owned = RunEntries<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Vec<String>, Failure> {
        let mut stmt = conn.prepare_cached(RUN_ENTRIES)?;
        let rows = stmt.query_map(
            params![&*self.tenant, &*self.run_id, signed_millis(now)],
            |row| row.get::<_, String>(0),
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn detached(&self) -> Self::Owned {
        RunEntries {
            tenant: t::owned(&*self.tenant),
            run_id: t::owned(&*self.run_id),
        }
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
}

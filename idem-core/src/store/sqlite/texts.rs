//! The jobs on the texts the SQLite store keeps beside its records, each in a table of its
//! own: pending approvals (a swap inside `BEGIN IMMEDIATE`, as writes are), run accounts, and
//! budgets (a swap likewise, expiry read on the store's clock).

use std::borrow::Cow;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::connection::Failure;
use super::job::Job;
use super::statements::{
    APPROVAL_TEXT, APPROVAL_TEXTS, APPROVAL_TEXTS_OF_TENANT, BUDGET_TEXT, DELETE_APPROVAL,
    INSERT_APPROVAL, INSERT_BUDGET, INSERT_RUN_ENTRY, RUN_ENTRIES, UPDATE_APPROVAL, UPDATE_BUDGET,
};
use crate::key::RecordKey;
use crate::record::Timestamp;
#[cfg(doc)]
use crate::store::Store;
use crate::store::approvals::ApprovalFilter;
use crate::store::codec::signed_millis;
use crate::store::transition as t;

/// [`Store::approval_text`]: the text under a key.
pub(super) struct ApprovalText<'a>(pub(super) Cow<'a, RecordKey>);

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
pub(super) struct SwapApproval<'a> {
    pub(super) key: Cow<'a, RecordKey>,
    pub(super) expected: Option<Cow<'a, str>>,
    pub(super) tenant: Cow<'a, str>,
    pub(super) tool: Cow<'a, str>,
    pub(super) text: Cow<'a, str>,
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
pub(super) struct RemoveApproval<'a> {
    pub(super) key: Cow<'a, RecordKey>,
    pub(super) expected: Cow<'a, str>,
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
pub(super) struct ApprovalTexts<'a>(pub(super) Cow<'a, ApprovalFilter>);

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
pub(super) struct AppendRunEntry<'a> {
    pub(super) tenant: Cow<'a, str>,
    pub(super) run_id: Cow<'a, str>,
    pub(super) text: Cow<'a, str>,
    pub(super) ttl: Duration,
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
pub(super) struct RunEntries<'a> {
    pub(super) tenant: Cow<'a, str>,
    pub(super) run_id: Cow<'a, str>,
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

/// [`Store::budget_text`]: the text under a scope, unless it expired.
pub(super) struct BudgetText<'a>(pub(super) Cow<'a, str>);

impl Job for BudgetText<'_> {
    type Output = Option<String>;
    type Owned = BudgetText<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<Option<String>, Failure> {
        Ok(conn
            .prepare_cached(BUDGET_TEXT)?
            .query_row(params![self.0.as_bytes(), signed_millis(now)], |row| {
                row.get(0)
            })
            .optional()?)
    }

    fn detached(&self) -> Self::Owned {
        BudgetText(t::owned(&*self.0))
    }
}

/// [`Store::swap_budget`]: one statement inside the write transaction, which changes one row
/// if the text under the scope is still the expected one and unexpired (or, expecting none, if
/// there is no text or an expired one), and no row otherwise.
pub(super) struct SwapBudget<'a> {
    pub(super) scope: Cow<'a, str>,
    pub(super) expected: Option<Cow<'a, str>>,
    pub(super) text: Cow<'a, str>,
    pub(super) ttl: Duration,
}

impl Job for SwapBudget<'_> {
    type Output = bool;
    type Owned = SwapBudget<'static>;

    fn run(&self, conn: &Connection, now: Timestamp) -> Result<bool, Failure> {
        let (scope, text) = (self.scope.as_bytes(), &*self.text);
        let (expires, now) = (signed_millis(now.plus(self.ttl)), signed_millis(now));
        let changed = match &self.expected {
            None => conn
                .prepare_cached(INSERT_BUDGET)?
                .execute(params![scope, text, expires, now])?,
            Some(expected) => conn.prepare_cached(UPDATE_BUDGET)?.execute(params![
                scope,
                text,
                expires,
                now,
                &**expected
            ])?,
        };
        Ok(changed == 1)
    }

    fn detached(&self) -> Self::Owned {
        SwapBudget {
            scope: t::owned(&*self.scope),
            expected: self.expected.as_deref().map(t::owned),
            text: t::owned(&*self.text),
            ttl: self.ttl,
        }
    }
}

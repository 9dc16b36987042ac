//! The SQL text of the SQLite store: its schema, and every statement it runs.

/// The version of the schema this code reads and writes, kept in `PRAGMA user_version`.
/// Version 2 added the `tenant` column, version 3 the `contract` column (the JSON of the
/// [`Contract`](crate::contract::Contract) a record was made under); [`migrate`] brings a
/// version 1 or 2 file up to date.
/// The pending approvals' table ([`APPROVALS_SCHEMA`]) came later without a new version:
/// a version 2 file gains it when it is opened, and an idem that does not know it ignores it.
pub(super) const SCHEMA_VERSION: i64 = 3;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_records (
    key         TEXT PRIMARY KEY NOT NULL,
    tool        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    fence       INTEGER NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
    lease_until INTEGER,
    expires_at  INTEGER,
    since       INTEGER,
    last_error  TEXT,
    outcome     TEXT,
    steps       TEXT NOT NULL,
    arguments   TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    tenant      TEXT NOT NULL DEFAULT '',
    contract    TEXT
);
CREATE INDEX IF NOT EXISTS idem_records_state_expires ON idem_records (state, expires_at);
";

/// The pending approvals ([`approvals`](crate::store::approvals)): one JSON text per record
/// key, with its tenant and tool copied out to list them by. [`migrate`] runs it at every
/// open, after [`SCHEMA`]: a file made before the table gains it, and where it exists this
/// changes nothing.
pub(super) const APPROVALS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_approvals (
    key    TEXT PRIMARY KEY NOT NULL,
    tenant TEXT NOT NULL,
    tool   TEXT NOT NULL,
    body   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_approvals_tenant_tool ON idem_approvals (tenant, tool);
";

/// The run accounts ([`Store::append_run_entry`](crate::Store::append_run_entry)): entries
/// in the order they were appended, each with when it expires. Created at every open, as
/// [`APPROVALS_SCHEMA`].
pub(super) const RUNS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_run_entries (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    entry      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_run_entries_run ON idem_run_entries (tenant, run_id, seq);
";

/// The budgets ([`Store::swap_budget`](crate::Store::swap_budget)): one JSON text per scope,
/// with when it expires. The scope is kept as the bytes of its text (a `BLOB`), compared byte
/// for byte, whatever characters it holds. Created at every open, as [`APPROVALS_SCHEMA`].
pub(super) const BUDGETS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_budgets (
    scope      BLOB PRIMARY KEY NOT NULL,
    body       TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
";

/// The fence floor ([`Records::fence_floor`](crate::store::transition::Records::fence_floor)):
/// one row holding the highest fence of any record deleted from `idem_records`, raised by a
/// trigger on every delete (a release, a purge, an eviction, an operator's), so that a key
/// freed and claimed again within one millisecond is fenced above its former holder, in any
/// process. Created at every open, as [`APPROVALS_SCHEMA`].
pub(super) const FENCE_FLOOR_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_fence_floor (
    id    INTEGER PRIMARY KEY CHECK (id = 0),
    fence INTEGER NOT NULL
);
INSERT OR IGNORE INTO idem_fence_floor (id, fence) VALUES (0, 0);
CREATE TRIGGER IF NOT EXISTS idem_records_fence_floor AFTER DELETE ON idem_records
BEGIN
    UPDATE idem_fence_floor SET fence = max(fence, OLD.fence) WHERE id = 0;
END;
";

/// The fence floor.
pub(super) const FENCE_FLOOR: &str = "SELECT fence FROM idem_fence_floor WHERE id = 0";

/// Append an entry to a run's account.
pub(super) const INSERT_RUN_ENTRY: &str =
    "INSERT INTO idem_run_entries (tenant, run_id, expires_at, entry) VALUES (?1, ?2, ?3, ?4)";

/// A run's unexpired entries, in append order.
pub(super) const RUN_ENTRIES: &str = "SELECT entry FROM idem_run_entries \
     WHERE tenant = ?1 AND run_id = ?2 AND expires_at > ?3 ORDER BY seq";

/// Drop the run entries past their time (of one tenant, when `?2` names it).
pub(super) const PURGE_RUN_ENTRIES: &str =
    "DELETE FROM idem_run_entries WHERE expires_at <= ?1 AND (?2 IS NULL OR tenant = ?2)";

/// What version 2 added to a version 1 table (where the column comes last, as in [`SCHEMA`]).
pub(super) const ADD_TENANT: &str =
    "ALTER TABLE idem_records ADD COLUMN tenant TEXT NOT NULL DEFAULT ''";

/// What version 3 added (last, as in [`SCHEMA`]).
pub(super) const ADD_CONTRACT: &str = "ALTER TABLE idem_records ADD COLUMN contract TEXT";

/// The columns of a record, in the order [`decode`] reads them and [`put`] binds them.
macro_rules! columns {
    () => {
        "key, tool, fingerprint, fence, state, lease_until, expires_at, since, last_error, \
         outcome, steps, arguments, created_at, updated_at, tenant, contract"
    };
}

pub(super) const SELECT_ONE: &str =
    concat!("SELECT ", columns!(), " FROM idem_records WHERE key = ?1");

pub(super) const UPSERT: &str = concat!(
    "INSERT INTO idem_records (",
    columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
     ON CONFLICT (key) DO UPDATE SET \
     tool = excluded.tool, fingerprint = excluded.fingerprint, fence = excluded.fence, \
     state = excluded.state, lease_until = excluded.lease_until, \
     expires_at = excluded.expires_at, since = excluded.since, \
     last_error = excluded.last_error, outcome = excluded.outcome, steps = excluded.steps, \
     arguments = excluded.arguments, created_at = excluded.created_at, \
     updated_at = excluded.updated_at, tenant = excluded.tenant, \
     contract = excluded.contract"
);

pub(super) const DELETE_ONE: &str = "DELETE FROM idem_records WHERE key = ?1";

/// Evict up to two expired completed records (see [`evict_on_claim`]). Every record is created
/// by a claim, so evicting more than one per claim keeps the backlog of expired records bounded.
///
/// The limit is a literal on purpose: SQLite plans a `LIMIT ?` with the value bound to it, so
/// it compiles the statement again whenever that parameter's binding changes, and rusqlite's
/// statement cache clears the bindings of every statement it takes back: a bound limit would
/// be compiled on every claim. Nothing else in this statement feeds the plan (the table has
/// no `ANALYZE` statistics), so it is compiled once per connection.
pub(super) const EVICT_ON_CLAIM: &str = "DELETE FROM idem_records WHERE key IN (\
     SELECT key FROM idem_records WHERE state = 'completed' AND expires_at <= ?1 LIMIT 2)";

/// Delete up to `?4` records [`machine::is_purgeable`] describes: completed ones expired at
/// `?1`, Unknown ones since `?2` or earlier (the clock less the retention), of tenant `?3`
/// unless it is null. [`Store::purge_expired`], run by operators in batches whose size they
/// choose (compiled again when the size changes; it is not hot).
pub(super) const PURGE_EXPIRED: &str = "DELETE FROM idem_records WHERE key IN (\
     SELECT key FROM idem_records \
     WHERE ((state = 'completed' AND expires_at <= ?1) OR (state = 'unknown' AND since <= ?2)) \
     AND (?3 IS NULL OR tenant = ?3) LIMIT ?4)";

pub(super) const LIST_ATTENTION: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM idem_records WHERE state IN ('in_progress', 'unknown') \
     AND (?2 IS NULL OR tenant = ?2) AND (?3 IS NULL OR (created_at, key) > (?3, ?4)) \
     ORDER BY created_at, key LIMIT ?1"
);

pub(super) const LIST_STATE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM idem_records WHERE state = ?1 AND (state <> 'completed' OR expires_at > ?2) \
     AND (?4 IS NULL OR tenant = ?4) AND (?5 IS NULL OR (created_at, key) > (?5, ?6)) \
     ORDER BY created_at, key LIMIT ?3"
);

/// [`Store::approval_text`]: the text under key `?1`.
pub(super) const APPROVAL_TEXT: &str = "SELECT body FROM idem_approvals WHERE key = ?1";

/// [`Store::swap_approval`] where no entry is expected: put text `?4` of tenant `?2` and tool
/// `?3` under key `?1` unless an entry is there (then no row changes).
pub(super) const INSERT_APPROVAL: &str = "INSERT INTO idem_approvals (key, tenant, tool, body) \
     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key) DO NOTHING";

/// [`Store::swap_approval`] where an entry is expected: replace the entry under key `?1` by
/// text `?4` of tenant `?2` and tool `?3` if its text is still exactly `?5` (else no row
/// changes).
pub(super) const UPDATE_APPROVAL: &str = "UPDATE idem_approvals SET body = ?4, tenant = ?2, \
     tool = ?3 WHERE key = ?1 AND body = ?5";

/// [`Store::remove_approval`]: delete the entry under key `?1` if its text is still `?2`.
pub(super) const DELETE_APPROVAL: &str = "DELETE FROM idem_approvals WHERE key = ?1 AND body = ?2";

/// [`Store::approval_texts`] of tenant `?1` (through the index by tenant and tool), of tool
/// `?2` unless it is null.
pub(super) const APPROVAL_TEXTS_OF_TENANT: &str = "SELECT key, body FROM idem_approvals \
     WHERE tenant = ?1 AND (?2 IS NULL OR tool = ?2)";

/// [`Store::approval_texts`] of every tenant, of tool `?1` unless it is null.
pub(super) const APPROVAL_TEXTS: &str =
    "SELECT key, body FROM idem_approvals WHERE ?1 IS NULL OR tool = ?1";

/// [`Store::budget_text`](crate::Store::budget_text): the text under scope `?1`, unless it expired at `?2`.
pub(super) const BUDGET_TEXT: &str =
    "SELECT body FROM idem_budgets WHERE scope = ?1 AND expires_at > ?2";

/// [`Store::swap_budget`](crate::Store::swap_budget) where no text is expected: put text `?2`
/// under scope `?1`, expiring at `?3`, unless an unexpired text is there at `?4` (then no row
/// changes).
pub(super) const INSERT_BUDGET: &str = "INSERT INTO idem_budgets (scope, body, expires_at) \
     VALUES (?1, ?2, ?3) ON CONFLICT (scope) DO UPDATE SET body = excluded.body, \
     expires_at = excluded.expires_at WHERE idem_budgets.expires_at <= ?4";

/// [`Store::swap_budget`](crate::Store::swap_budget) where a text is expected: replace the text
/// under scope `?1` by `?2`, expiring at `?3`, if it is still exactly `?5` and unexpired at `?4`
/// (else no row changes).
pub(super) const UPDATE_BUDGET: &str = "UPDATE idem_budgets SET body = ?2, expires_at = ?3 \
     WHERE scope = ?1 AND expires_at > ?4 AND body = ?5";

/// Drop the budgets expired at `?1` (of no tenant: an expired one is gone for every reader).
pub(super) const PURGE_BUDGETS: &str = "DELETE FROM idem_budgets WHERE expires_at <= ?1";

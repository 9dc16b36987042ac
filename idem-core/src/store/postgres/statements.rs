//! The SQL text of the PostgreSQL store: the schema, and every statement it runs, each one
//! decision of the record state machine on the database's clock.
//!
//! `bench/pgbench/generate.py` reads `NOW`, `COLUMNS`, `held`, `claim` and `complete` out of
//! this file, so that row 4 of BENCHMARKS.md runs the very statements the store runs.

/// The database clock in milliseconds since the epoch. `statement_timestamp()` is fixed for
/// the whole statement, so every use inside one statement sees the same instant.
pub(super) const NOW: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";

/// The columns every record-returning statement selects, in the order
/// [`decode`](super::codec::decode) reads them.
pub(super) const COLUMNS: &str = "t.key, t.tool, t.fingerprint, t.fence, t.state, t.lease_until, t.outcome, \
     t.expires_at, t.unknown_since, t.last_error, t.steps::text, t.arguments, t.created_at, \
     t.updated_at, t.tenant, t.contract";
pub(super) const COLUMN_COUNT: usize = 16;

/// The schema, table and indexes. The CHECK constraints restate the record's invariants so
/// a row written by hand that breaks them is refused rather than read back as corrupt.
pub(super) fn ddl(schema: &str) -> String {
    format!(
        r#"
CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS "{schema}".records (
    key           text COLLATE "C" PRIMARY KEY,
    tool          text NOT NULL,
    fingerprint   text NOT NULL,
    fence         bigint NOT NULL CHECK (fence >= 1),
    state         text NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
    lease_until   bigint,
    outcome       text,
    expires_at    bigint,
    unknown_since bigint,
    last_error    text,
    steps         jsonb NOT NULL DEFAULT '[]'::jsonb,
    arguments     text,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    last_claim    text NOT NULL DEFAULT 'inserted',
    tenant        text NOT NULL DEFAULT '',
    contract      text,
    CHECK (state <> 'in_progress' OR lease_until IS NOT NULL),
    CHECK (state <> 'completed' OR (outcome IS NOT NULL AND expires_at IS NOT NULL)),
    CHECK (state <> 'unknown' OR (unknown_since IS NOT NULL AND last_error IS NOT NULL))
);
COMMENT ON COLUMN "{schema}".records.last_claim IS
    'What the latest claim of this key did: inserted, reclaimed, taken_over, marked_unknown or existing.';
CREATE INDEX IF NOT EXISTS records_expiry ON "{schema}".records (expires_at)
    WHERE state = 'completed';
CREATE INDEX IF NOT EXISTS records_open ON "{schema}".records (created_at, key)
    WHERE state <> 'completed';
{later}
{approvals}
{runs}
{floor}
{budgets}
"#,
        later = LATER_INDEXES
            .iter()
            .map(|(_, index)| index(schema))
            .collect::<String>(),
        approvals = approvals_ddl(schema),
        runs = runs_ddl(schema),
        floor = floor_ddl(schema),
        budgets = budgets_ddl(schema),
    )
}

/// The name of the fence floor's table, unqualified: set-up looks for it in the schema.
pub(super) const FLOOR_TABLE: &str = "fence_floor";

/// The fence floor: one row holding the highest fence of any record deleted from the
/// records (a release, a purge, an operator's) that was not below the clock when it was
/// deleted, raised by a statement trigger on the records. A claim of a key without a record
/// is fenced above it, so a key freed and claimed again within one millisecond still moves on
/// ([`machine::first_fence`](crate::store::machine::first_fence)); a fence already below the
/// clock needs no floor (every later claim reads a later clock), so deletes seldom take the
/// row's lock. The trigger's function runs as its owner (`SECURITY DEFINER`, with a fixed
/// `search_path`): a role that may delete records need not be granted the floor's table; a
/// role that claims needs `SELECT` on it. [`ddl`] creates it; set-up adds it to a schema made
/// by an older idem.
pub(super) fn floor_ddl(schema: &str) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS "{schema}".{FLOOR_TABLE} (
    id    smallint PRIMARY KEY CHECK (id = 0),
    fence bigint NOT NULL
);
INSERT INTO "{schema}".{FLOOR_TABLE} (id, fence) VALUES (0, 0) ON CONFLICT (id) DO NOTHING;
CREATE OR REPLACE FUNCTION "{schema}".raise_fence_floor() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $floor$
DECLARE
    freed bigint := (SELECT max(g.fence) FROM gone AS g);
BEGIN
    -- A fence below the clock needs no floor: a claim that begins after this delete reads a
    -- later clock. Only a fence at or above it raises the floor, so deletes seldom queue on
    -- its row.
    IF freed >= {NOW} THEN
        UPDATE "{schema}".{FLOOR_TABLE} SET fence = GREATEST(fence, freed) WHERE id = 0;
    END IF;
    RETURN NULL;
END
$floor$;
DROP TRIGGER IF EXISTS records_fence_floor ON "{schema}".records;
CREATE TRIGGER records_fence_floor AFTER DELETE ON "{schema}".records
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION "{schema}".raise_fence_floor();
"#
    )
}

/// The name of the run accounts' table, unqualified.
pub(super) const RUNS_TABLE: &str = "run_entries";

/// The run accounts' table ([`Store::append_run_entry`](crate::Store::append_run_entry)):
/// entries in the order they were appended, each with when it expires. [`ddl`] creates it;
/// set-up adds it to a schema made by an older idem.
pub(super) fn runs_ddl(schema: &str) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS "{schema}".{RUNS_TABLE} (
    seq        bigserial PRIMARY KEY,
    tenant     text NOT NULL,
    run_id     text NOT NULL,
    expires_at bigint NOT NULL,
    entry      text NOT NULL
);
CREATE INDEX IF NOT EXISTS run_entries_run ON "{schema}".{RUNS_TABLE} (tenant, run_id, seq);
"#
    )
}

/// The name of the budgets' table, unqualified: set-up looks for it in the schema.
pub(super) const BUDGETS_TABLE: &str = "budgets";

/// The budgets' table ([`Store::swap_budget`](crate::Store::swap_budget)): one JSON text per
/// scope, with when it expires on the database's clock. The scope is kept as the bytes of its
/// text (`bytea`), compared byte for byte, so any string is a scope (`text` cannot hold
/// U+0000). [`ddl`] creates it; set-up adds it to a schema made by an older idem.
pub(super) fn budgets_ddl(schema: &str) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS "{schema}".{BUDGETS_TABLE} (
    scope      bytea PRIMARY KEY,
    body       text NOT NULL,
    expires_at bigint NOT NULL
);
"#
    )
}

/// The name of the pending approvals' table, unqualified: set-up looks for it in the schema.
pub(super) const APPROVALS_TABLE: &str = "approvals";

/// The pending approvals' table ([`approvals`](crate::store::approvals)): one JSON text per
/// record key, with its tenant and tool copied out and indexed to list them by. [`ddl`]
/// creates it with the records; set-up adds it to a schema made by an older idem.
pub(super) fn approvals_ddl(schema: &str) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS "{schema}".{APPROVALS_TABLE} (
    key    text COLLATE "C" PRIMARY KEY,
    tenant text NOT NULL,
    tool   text NOT NULL,
    body   text NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_tenant_tool ON "{schema}".{APPROVALS_TABLE} (tenant, tool);
"#
    )
}

/// Columns added after the first schema, with their definitions: [`ddl`] creates them with
/// the table, and set-up adds any a table made by an older idem lacks.
pub(super) const LATER_COLUMNS: [(&str, &str); 2] = [
    ("tenant", "tenant text NOT NULL DEFAULT ''"),
    ("contract", "contract text"),
];

/// The statement that creates an index in a schema.
type IndexDdl = fn(&str) -> String;

/// Indexes added after the first schema, by name: [`ddl`] creates them with the table, and
/// set-up adds any a table made by an older idem lacks. Both are partial, over rows few calls
/// ever write (no claim or completion adds to them): the records needing attention, by tenant,
/// for an operator's listing; the Unknown records, by age, for the purge of those past their
/// retention.
pub(super) const LATER_INDEXES: [(&str, IndexDdl); 2] = [
    ("records_tenant_open", |schema| {
        format!(
            "CREATE INDEX IF NOT EXISTS records_tenant_open \
             ON \"{schema}\".records (tenant, created_at, key) WHERE state <> 'completed';\n"
        )
    }),
    ("records_unknown", |schema| {
        format!(
            "CREATE INDEX IF NOT EXISTS records_unknown \
             ON \"{schema}\".records (unknown_since) WHERE state = 'unknown';\n"
        )
    }),
];

/// Every statement the store runs, with the schema filled in.
pub(super) struct Statements {
    pub(super) claim: String,
    pub(super) complete: String,
    pub(super) release: String,
    pub(super) renew: String,
    pub(super) journal: String,
    pub(super) mark_unknown: String,
    pub(super) get: String,
    pub(super) list: String,
    pub(super) list_tenant_open: String,
    pub(super) list_tenant_completed: String,
    pub(super) resolve: String,
    pub(super) force_release: String,
    pub(super) settle_complete: String,
    pub(super) settle_release: String,
    pub(super) purge: String,
    pub(super) now: String,
    pub(super) approval_text: String,
    pub(super) insert_approval: String,
    pub(super) update_approval: String,
    pub(super) delete_approval: String,
    pub(super) approval_texts_of_tenant: String,
    pub(super) approval_texts: String,
    pub(super) append_run_entry: String,
    pub(super) run_entries: String,
    pub(super) purge_run_entries: String,
    pub(super) budget_text: String,
    pub(super) insert_budget: String,
    pub(super) update_budget: String,
    pub(super) purge_budgets: String,
}

impl Statements {
    pub(super) fn new(schema: &str) -> Self {
        let table = format!("\"{schema}\".records");
        let floor = format!("\"{schema}\".{FLOOR_TABLE}");
        let held = "t.key = $1::text AND t.state = 'in_progress' AND t.fence = $2::bigint";
        let live = format!("NOT (t.state = 'completed' AND t.expires_at <= {NOW})");
        // A key without a record starts at the clock in milliseconds, above the fence floor
        // (`machine::first_fence`), so a key released and claimed again never hands out a fence a
        // former holder may still hold. In the conflict branch `excluded.created_at` is this
        // statement's clock and `excluded.lease_until` the new lease end. The branch always writes
        // (unchanged columns keep their values) so RETURNING reports the row to every caller; the
        // action it took is written to `last_claim` and read back.
        let claim = format!(
            r#"
INSERT INTO {table} AS t (key, tool, fingerprint, fence, state, lease_until, steps, arguments,
                          created_at, updated_at, last_claim, tenant, contract)
SELECT $1::text, $2::text, $3::text, GREATEST(n.now, n.floor + 1, 1), 'in_progress', n.now + $4::bigint,
       '[]'::jsonb,
       $6::text, n.now, n.now, 'inserted', $8::text, $9::text
FROM (SELECT {NOW} AS now, (SELECT f.fence FROM {floor} AS f WHERE f.id = 0) AS floor) AS n
ON CONFLICT (key) DO UPDATE SET
    (tool, fingerprint, fence, state, lease_until, outcome, expires_at, unknown_since,
     last_error, steps, arguments, created_at, updated_at, last_claim, tenant, contract) =
    (SELECT
        CASE WHEN d.a = 'reclaimed' THEN excluded.tool ELSE t.tool END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.fingerprint ELSE t.fingerprint END,
        CASE WHEN d.a IN ('reclaimed', 'taken_over') THEN t.fence + 1 ELSE t.fence END,
        CASE d.a WHEN 'reclaimed' THEN 'in_progress'
                 WHEN 'taken_over' THEN 'in_progress'
                 WHEN 'marked_unknown' THEN 'unknown'
                 ELSE t.state END,
        CASE d.a WHEN 'reclaimed' THEN excluded.lease_until
                 WHEN 'taken_over' THEN excluded.lease_until
                 WHEN 'marked_unknown' THEN NULL
                 ELSE t.lease_until END,
        CASE WHEN d.a = 'reclaimed' THEN NULL ELSE t.outcome END,
        CASE WHEN d.a = 'reclaimed' THEN NULL ELSE t.expires_at END,
        CASE d.a WHEN 'reclaimed' THEN NULL
                 WHEN 'marked_unknown' THEN excluded.created_at
                 ELSE t.unknown_since END,
        CASE d.a WHEN 'reclaimed' THEN NULL
                 WHEN 'marked_unknown' THEN $7::text
                 ELSE t.last_error END,
        CASE WHEN d.a = 'reclaimed' THEN '[]'::jsonb ELSE t.steps END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.arguments ELSE t.arguments END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.created_at ELSE t.created_at END,
        CASE WHEN d.a = 'existing' THEN t.updated_at ELSE excluded.created_at END,
        d.a,
        CASE WHEN d.a = 'reclaimed' THEN excluded.tenant ELSE t.tenant END,
        CASE WHEN d.a = 'reclaimed' THEN excluded.contract ELSE t.contract END
     FROM (SELECT CASE
        -- A completed record past its expiry: a new call under the same key.
        WHEN t.state = 'completed' AND t.expires_at <= excluded.created_at THEN 'reclaimed'
        -- An orphan with the same arguments: the class decides, the stricter of the claim's
        -- and the one the record was made under (`Contract::takes_over`: only the orphan of an
        -- idempotent_write, or of a tool that compensates, is taken over). Other arguments
        -- never take a key over.
        WHEN t.state = 'in_progress' AND t.lease_until <= excluded.created_at
             AND t.fingerprint = excluded.fingerprint
            THEN CASE WHEN $5::boolean AND (t.contract IS NULL
                           OR (t.contract::jsonb ->> 'class') = 'idempotent_write'
                           OR (t.contract::jsonb ->> 'compensates') = 'true')
                      THEN 'taken_over' ELSE 'marked_unknown' END
        ELSE 'existing' END AS a) AS d)
RETURNING {COLUMNS}, t.last_claim
"#
        );
        let complete = format!(
            "UPDATE {table} AS t SET state = 'completed', outcome = $3::text, \
             expires_at = {NOW} + $4::bigint, lease_until = NULL, updated_at = {NOW} \
             WHERE {held}"
        );
        let release = format!("DELETE FROM {table} AS t WHERE {held}");
        let renew = format!(
            "UPDATE {table} AS t SET lease_until = {NOW} + $3::bigint, updated_at = {NOW} \
             WHERE {held} AND t.lease_until > {NOW} RETURNING t.lease_until"
        );
        // A step journaled again keeps its place and takes the new value.
        let journal = format!(
            r#"
UPDATE {table} AS t SET
    steps = CASE
        WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(t.steps) AS s(e) WHERE s.e->>'step' = $3::text)
        THEN (SELECT jsonb_agg(CASE WHEN s.e->>'step' = $3::text
                                    THEN jsonb_build_object('step', $3::text, 'value', $4::text)
                                    ELSE s.e END
                               ORDER BY s.i)
              FROM jsonb_array_elements(t.steps) WITH ORDINALITY AS s(e, i))
        ELSE t.steps || jsonb_build_array(jsonb_build_object('step', $3::text, 'value', $4::text))
    END,
    updated_at = {NOW}
WHERE {held}
"#
        );
        let mark_unknown = format!(
            "UPDATE {table} AS t SET state = 'unknown', unknown_since = {NOW}, \
             last_error = $3::text, lease_until = NULL, updated_at = {NOW} WHERE {held}"
        );
        let get = format!("SELECT {COLUMNS} FROM {table} AS t WHERE t.key = $1::text AND {live}");
        // A page after a cursor (`ListCursor`): its creation time and key are the statement's
        // parameters `$n` and `$n+1`, both NULL without one.
        let after = |n: usize| {
            format!(
                "(${n}::bigint IS NULL OR (t.created_at, t.key) > (${n}::bigint, ${}::text))",
                n + 1
            )
        };
        let (after_3, after_4) = (after(3), after(4));
        let list = format!(
            "SELECT {COLUMNS} FROM {table} AS t \
             WHERE (CASE WHEN $1::text IS NULL THEN t.state <> 'completed' \
                         ELSE t.state = $1::text END) AND {live} AND {after_3} \
             ORDER BY t.created_at, t.key LIMIT $2::bigint"
        );
        // A tenant's records needing attention (optionally of one such state), through the
        // partial index by tenant: its predicate appears as written so the planner uses it.
        let list_tenant_open = format!(
            "SELECT {COLUMNS} FROM {table} AS t \
             WHERE t.tenant = $1::text AND t.state <> 'completed' \
             AND ($2::text IS NULL OR t.state = $2::text) AND {after_4} \
             ORDER BY t.created_at, t.key LIMIT $3::bigint"
        );
        let list_tenant_completed = format!(
            "SELECT {COLUMNS} FROM {table} AS t \
             WHERE t.tenant = $1::text AND t.state = 'completed' AND {live} AND {after_3} \
             ORDER BY t.created_at, t.key LIMIT $2::bigint"
        );
        // Operator operations: one statement that writes if the record is unsettled and
        // reports the state its snapshot saw, so a refusal names the right reason. If the
        // snapshot saw an unsettled record that the write no longer found, the record changed
        // in between and the caller runs the statement again.
        let resolve = format!(
            r#"
WITH seen AS (SELECT t.state FROM {table} AS t WHERE t.key = $1::text),
done AS (
    UPDATE {table} AS t SET fence = t.fence + 1, state = 'completed', outcome = $2::text,
        expires_at = {NOW} + $3::bigint, lease_until = NULL, unknown_since = NULL,
        last_error = NULL, updated_at = {NOW}
    WHERE t.key = $1::text AND t.state <> 'completed'
    RETURNING {COLUMNS}
)
SELECT seen.state, done.* FROM (SELECT 1) AS one
LEFT JOIN seen ON true LEFT JOIN done ON true
"#
        );
        let force_release = format!(
            r#"
WITH seen AS (SELECT t.state FROM {table} AS t WHERE t.key = $1::text),
gone AS (
    DELETE FROM {table} AS t WHERE t.key = $1::text AND t.state <> 'completed'
    RETURNING t.key
)
SELECT seen.state, gone.key FROM (SELECT 1) AS one
LEFT JOIN seen ON true LEFT JOIN gone ON true
"#
        );
        // `machine::is_purgeable`: completed and expired, or Unknown since `$2` ms or more
        // (`since + retention <= now`), of tenant `$3` unless it is null; at most `$1`. Each
        // kind is selected on its own index and locked (skipping rows another purge holds);
        // the delete checks the rule again on what was locked.
        let tenant_is = |t: &str| format!("($3::text IS NULL OR {t}.tenant = $3::text)");
        let expired = |t: &str| format!("{t}.state = 'completed' AND {t}.expires_at <= {NOW}");
        let forgotten =
            |t: &str| format!("{t}.state = 'unknown' AND {t}.unknown_since <= {NOW} - $2::bigint");
        let purge = format!(
            "WITH done AS (\
                 SELECT e.key FROM {table} AS e WHERE {} AND {} \
                 ORDER BY e.expires_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED), \
             lost AS (\
                 SELECT e.key FROM {table} AS e WHERE {} AND {} \
                 ORDER BY e.unknown_since \
                 LIMIT GREATEST($1::bigint - (SELECT count(*) FROM done), 0) \
                 FOR UPDATE SKIP LOCKED) \
             DELETE FROM {table} AS t \
             WHERE t.key = ANY(ARRAY(SELECT key FROM done UNION ALL SELECT key FROM lost)) \
             AND (({}) OR ({})) AND {}",
            expired("e"),
            tenant_is("e"),
            forgotten("e"),
            tenant_is("e"),
            expired("t"),
            forgotten("t"),
            tenant_is("t"),
        );
        let unknown_at = "t.key = $1::text AND t.state = 'unknown' AND t.fence = $2::bigint";
        let settle_complete = format!(
            "UPDATE {table} AS t SET fence = t.fence + 1, state = 'completed', outcome = $3::text, \
             expires_at = {NOW} + $4::bigint, lease_until = NULL, unknown_since = NULL, \
             last_error = NULL, updated_at = {NOW} WHERE {unknown_at}"
        );
        let settle_release = format!("DELETE FROM {table} AS t WHERE {unknown_at}");
        // Pending approvals: a compare-and-swap of one row's text. Where no entry is expected
        // the insert does nothing if one is there (a concurrent insert waits for the other to
        // commit, then does nothing); where one is, the update writes only if the text is
        // still the expected one (a concurrent update waits, then checks the text again on
        // the row the other left). Either way one row changed, or none.
        let approvals = format!("\"{schema}\".{APPROVALS_TABLE}");
        let approval_text = format!("SELECT a.body FROM {approvals} AS a WHERE a.key = $1::text");
        let insert_approval = format!(
            "INSERT INTO {approvals} (key, tenant, tool, body) \
             VALUES ($1::text, $2::text, $3::text, $4::text) ON CONFLICT (key) DO NOTHING"
        );
        let update_approval = format!(
            "UPDATE {approvals} AS a SET body = $4::text, tenant = $2::text, tool = $3::text \
             WHERE a.key = $1::text AND a.body = $5::text"
        );
        let delete_approval =
            format!("DELETE FROM {approvals} AS a WHERE a.key = $1::text AND a.body = $2::text");
        // Listing: a tenant's through the index by tenant and tool, or every tenant's; of one
        // tool unless it is null. State and limit are the caller's to apply.
        let approval_texts_of_tenant = format!(
            "SELECT a.key, a.body FROM {approvals} AS a \
             WHERE a.tenant = $1::text AND ($2::text IS NULL OR a.tool = $2::text)"
        );
        let approval_texts = format!(
            "SELECT a.key, a.body FROM {approvals} AS a \
             WHERE $1::text IS NULL OR a.tool = $1::text"
        );
        let runs = format!("\"{schema}\".{RUNS_TABLE}");
        let append_run_entry = format!(
            "INSERT INTO {runs} (tenant, run_id, expires_at, entry) \
             VALUES ($1::text, $2::text, {NOW} + $3::bigint, $4::text)"
        );
        let run_entries = format!(
            "SELECT r.entry FROM {runs} AS r WHERE r.tenant = $1::text AND r.run_id = $2::text \
             AND r.expires_at > {NOW} ORDER BY r.seq"
        );
        let purge_run_entries = format!(
            "DELETE FROM {runs} AS r WHERE r.expires_at <= {NOW} \
             AND ($1::text IS NULL OR r.tenant = $1::text)"
        );
        // Budgets: a compare-and-swap of one row's text, as the approvals' (a concurrent
        // writer waits for the other to commit, then checks its condition again on the row the
        // other left), where an expired text counts as none.
        let budgets = format!("\"{schema}\".{BUDGETS_TABLE}");
        let budget_text = format!(
            "SELECT b.body FROM {budgets} AS b WHERE b.scope = $1::bytea AND b.expires_at > {NOW}"
        );
        let insert_budget = format!(
            "INSERT INTO {budgets} AS b (scope, body, expires_at) \
             VALUES ($1::bytea, $2::text, {NOW} + $3::bigint) \
             ON CONFLICT (scope) DO UPDATE SET body = excluded.body, \
             expires_at = excluded.expires_at WHERE b.expires_at <= {NOW}"
        );
        let update_budget = format!(
            "UPDATE {budgets} AS b SET body = $2::text, expires_at = {NOW} + $3::bigint \
             WHERE b.scope = $1::bytea AND b.expires_at > {NOW} AND b.body = $4::text"
        );
        let purge_budgets = format!("DELETE FROM {budgets} AS b WHERE b.expires_at <= {NOW}");
        Statements {
            claim,
            complete,
            release,
            renew,
            journal,
            mark_unknown,
            get,
            list,
            list_tenant_open,
            list_tenant_completed,
            resolve,
            force_release,
            settle_complete,
            settle_release,
            purge,
            now: format!("SELECT {NOW}"),
            approval_text,
            insert_approval,
            update_approval,
            delete_approval,
            approval_texts_of_tenant,
            approval_texts,
            append_run_entry,
            run_entries,
            purge_run_entries,
            budget_text,
            insert_budget,
            update_budget,
            purge_budgets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_names_the_schema() {
        let sql = Statements::new("tenant_a");
        for s in [
            &sql.claim,
            &sql.complete,
            &sql.release,
            &sql.renew,
            &sql.journal,
            &sql.mark_unknown,
            &sql.get,
            &sql.list,
            &sql.list_tenant_open,
            &sql.list_tenant_completed,
            &sql.resolve,
            &sql.force_release,
            &sql.purge,
        ] {
            assert!(s.contains("\"tenant_a\".records"), "{s}");
        }
        for s in [
            &sql.approval_text,
            &sql.insert_approval,
            &sql.update_approval,
            &sql.delete_approval,
            &sql.approval_texts_of_tenant,
            &sql.approval_texts,
        ] {
            assert!(s.contains("\"tenant_a\".approvals"), "{s}");
        }
        for s in [
            &sql.budget_text,
            &sql.insert_budget,
            &sql.update_budget,
            &sql.purge_budgets,
        ] {
            assert!(s.contains("\"tenant_a\".budgets"), "{s}");
        }
    }
}

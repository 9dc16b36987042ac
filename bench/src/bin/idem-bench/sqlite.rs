//! Row 2: dispatches per second on SQLite (claim + complete), against raw rusqlite running the
//! statements `SqliteStore` runs, in the same transactions, with the same durability settings
//! (WAL, `synchronous = NORMAL`, busy timeout 5 s). One worker per process; `scripts/bench`
//! starts one or two processes on the same file.
//!
//! Checkpoints differ by design: raw rusqlite keeps SQLite's automatic checkpoint (inside the
//! commit that takes the WAL past 1000 pages), `SqliteStore` checkpoints every 256 of its
//! commits on tokio's blocking pool. Both copy the same WAL back with the same syncs.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::SqliteStore;
use idem_bench::{ARGUMENTS, call, dispatcher};
use rusqlite::{Connection, TransactionBehavior, params};

use crate::timed::{Window, report};

/// `sqlite idem|raw <db> <worker> <start_ms|now> <seconds>`
pub fn run(args: &[String]) -> Result<(), String> {
    let [contender, db, worker, start, seconds] = args else {
        return Err("usage: sqlite idem|raw <db> <worker> <start_ms|now> <seconds>".into());
    };
    let window = Window::parse(start, seconds)?;
    match contender.as_str() {
        "idem" => idem(db, worker, window),
        "raw" => raw(db, worker, window),
        other => Err(format!("unknown contender {other:?}: expected idem or raw")),
    }
}

fn idem(db: &str, worker: &str, window: Window) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let store = SqliteStore::open(db).map_err(|e| e.to_string())?;
    let d = dispatcher(Arc::new(store));
    let (ops, elapsed) = rt.block_on(async {
        let end = window.wait();
        let begin = Instant::now();
        let mut ops = 0u64;
        while Instant::now() < end {
            let call = call("noop_idempotent_write", &format!("call-{worker}-{ops}"));
            let run = idem::RunContext::new(idem_bench::TENANT);
            let out = d.dispatch(&call, &run).await.map_err(|e| e.to_string())?;
            black_box(out);
            ops += 1;
        }
        Ok::<_, String>((ops, begin.elapsed()))
    })?;
    report("sqlite", "idem", 1, ops, elapsed);
    Ok(())
}

// The statements `idem_core::store::sqlite` runs for a claim and a complete (copied: they are
// private to the store; keep them in step with it).
const SCHEMA: &str = "
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
    updated_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_records_state_expires ON idem_records (state, expires_at);
";
const SELECT_ONE: &str = "SELECT key, tool, fingerprint, fence, state, lease_until, expires_at, since, last_error, outcome, steps, arguments, created_at, updated_at FROM idem_records WHERE key = ?1";
const UPSERT: &str = "INSERT INTO idem_records (key, tool, fingerprint, fence, state, lease_until, expires_at, since, last_error, outcome, steps, arguments, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT (key) DO UPDATE SET tool = excluded.tool, fingerprint = excluded.fingerprint, fence = excluded.fence, state = excluded.state, lease_until = excluded.lease_until, expires_at = excluded.expires_at, since = excluded.since, last_error = excluded.last_error, outcome = excluded.outcome, steps = excluded.steps, arguments = excluded.arguments, created_at = excluded.created_at, updated_at = excluded.updated_at";
const DELETE_EXPIRED: &str = "DELETE FROM idem_records WHERE key IN (SELECT key FROM idem_records WHERE state = 'completed' AND expires_at <= ?1 LIMIT 2)";

fn raw(db: &str, worker: &str, window: Window) -> Result<(), String> {
    let sql = |e: rusqlite::Error| e.to_string();
    let mut conn = Connection::open(db).map_err(sql)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
    let _: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sql)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql)?;
    conn.execute_batch(SCHEMA).map_err(sql)?;
    // What idem stores for the same call: the canonical arguments and the outcome's JSON.
    let arguments: serde_json::Value =
        serde_json::from_str(ARGUMENTS).map_err(|e| e.to_string())?;
    let canonical = serde_json::to_string(&arguments).map_err(|e| e.to_string())?;
    let fingerprint = "5".repeat(64);
    let outcome = r#"{"success":"\"ok\""}"#;
    let end = window.wait();
    let begin = Instant::now();
    let mut ops = 0u64;
    while Instant::now() < end {
        let key = format!("{worker:0>8}{ops:056x}");
        let now = idem::Timestamp::now().as_millis() as i64;
        // Claim: read, insert in progress, evict up to two expired records.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        {
            let mut select = tx.prepare_cached(SELECT_ONE).map_err(sql)?;
            let mut rows = select.query([key.as_str()]).map_err(sql)?;
            black_box(rows.next().map_err(sql)?.is_some());
        }
        tx.prepare_cached(UPSERT)
            .map_err(sql)?
            .execute(params![
                key,
                "noop_idempotent_write",
                fingerprint,
                now,
                "in_progress",
                Some(now + 30_000),
                None::<i64>,
                None::<i64>,
                None::<String>,
                None::<String>,
                "[]",
                Some(canonical.as_str()),
                now,
                now
            ])
            .map_err(sql)?;
        tx.prepare_cached(DELETE_EXPIRED)
            .map_err(sql)?
            .execute([now])
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
        // Complete: read, write the outcome.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        {
            let mut select = tx.prepare_cached(SELECT_ONE).map_err(sql)?;
            let mut rows = select.query([key.as_str()]).map_err(sql)?;
            black_box(rows.next().map_err(sql)?.is_some());
        }
        tx.prepare_cached(UPSERT)
            .map_err(sql)?
            .execute(params![
                key,
                "noop_idempotent_write",
                fingerprint,
                now,
                "completed",
                None::<i64>,
                Some(now + 86_400_000),
                None::<i64>,
                None::<String>,
                Some(outcome),
                "[]",
                Some(canonical.as_str()),
                now,
                now
            ])
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
        ops += 1;
    }
    report("sqlite", "raw", 1, ops, begin.elapsed());
    Ok(())
}

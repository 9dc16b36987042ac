//! Row 2: dispatches per second on SQLite (claim + complete), against raw rusqlite running the
//! statements `SqliteStore` runs, in the same transactions, with the same durability settings
//! (WAL, busy timeout 5 s, and the same `synchronous`). One worker per process;
//! `scripts/bench` starts one or two processes on the same file.
//!
//! Both sides run at `synchronous = FULL`, the store's default (a commit survives a power
//! loss: one `fsync` per commit), unless `BENCH_SQLITE_SYNCHRONOUS=normal` puts both at
//! `NORMAL`, the store's opt-in (`SqliteStore::with_synchronous(Synchronous::Normal)`):
//!
//! ```text
//! BENCH_SQLITE_SYNCHRONOUS=normal scripts/bench sqlite
//! ```
//!
//! Checkpoints differ by design: raw rusqlite keeps SQLite's automatic checkpoint (inside the
//! commit that takes the WAL past 1000 pages), `SqliteStore` checkpoints at the same threshold
//! on tokio's blocking pool. Both copy the same WAL back with the same syncs.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::SqliteStore;
use idem::store::sqlite::Synchronous;
use idem_bench::{ARGUMENTS, TENANT, call, dispatcher};
use rusqlite::{Connection, ErrorCode, TransactionBehavior, params};

use crate::timed::Window;

/// `sqlite idem|raw <db> <worker> <start_ms|now> <seconds>`
pub fn run(args: &[String]) -> Result<(), String> {
    let [contender, db, worker, start, seconds] = args else {
        return Err("usage: sqlite idem|raw <db> <worker> <start_ms|now> <seconds>".into());
    };
    let window = Window::parse(start, seconds)?;
    let synchronous = synchronous()?;
    match contender.as_str() {
        "idem" => idem(db, worker, window, synchronous),
        "raw" => raw(db, worker, window, synchronous),
        other => Err(format!("unknown contender {other:?}: expected idem or raw")),
    }
}

/// `PRAGMA synchronous`'s value for a setting (SQLite reads back FULL as 2, NORMAL as 1).
fn level(synchronous: Synchronous) -> i64 {
    match synchronous {
        Synchronous::Full => 2,
        Synchronous::Normal => 1,
    }
}

/// One worker's line, as `timed::report` writes it, with the setting it ran at (checked on
/// the connection), which `scripts/bench` and `report.py` keep apart.
fn report(synchronous: Synchronous, contender: &str, ops: u64, elapsed: Duration) {
    let setting = match synchronous {
        Synchronous::Full => "full",
        Synchronous::Normal => "normal",
    };
    println!(
        "{{\"row\":\"sqlite\",\"contender\":\"{contender}\",\"concurrency\":1,\"synchronous\":\"{setting}\",\"ops\":{ops},\"secs\":{:.6},\"per_sec\":{:.1}}}",
        elapsed.as_secs_f64(),
        ops as f64 / elapsed.as_secs_f64()
    );
}

/// The setting both contenders run at: `BENCH_SQLITE_SYNCHRONOUS` (`full`, the default when
/// unset or empty, or `normal`).
fn synchronous() -> Result<Synchronous, String> {
    match std::env::var("BENCH_SQLITE_SYNCHRONOUS") {
        Err(std::env::VarError::NotPresent) => Ok(Synchronous::Full),
        Ok(v) if v.is_empty() || v.eq_ignore_ascii_case("full") => Ok(Synchronous::Full),
        Ok(v) if v.eq_ignore_ascii_case("normal") => Ok(Synchronous::Normal),
        Ok(other) => Err(format!(
            "BENCH_SQLITE_SYNCHRONOUS={other:?}: expected full or normal"
        )),
        Err(e) => Err(format!("BENCH_SQLITE_SYNCHRONOUS: {e}")),
    }
}

fn idem(db: &str, worker: &str, window: Window, synchronous: Synchronous) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let store = SqliteStore::open(db)
        .and_then(|s| s.with_synchronous(synchronous))
        .map_err(|e| e.to_string())?;
    // The store's Debug names the setting its connection runs at (its unit tests read the
    // connection's PRAGMA back): refuse to measure at any other.
    let wanted = format!("synchronous: {synchronous:?}");
    if !format!("{store:?}").contains(&wanted) {
        return Err(format!("the store does not report {wanted}: {store:?}"));
    }
    let d = dispatcher(Arc::new(store));
    let (ops, elapsed) = rt.block_on(async {
        let end = window.wait();
        let begin = Instant::now();
        let mut ops = 0u64;
        while Instant::now() < end {
            let call = call("noop_idempotent_write", &format!("call-{worker}-{ops}"));
            let run = idem::RunContext::new(TENANT);
            let out = d.dispatch(&call, &run).await.map_err(|e| e.to_string())?;
            black_box(out);
            ops += 1;
        }
        Ok::<_, String>((ops, begin.elapsed()))
    })?;
    report(synchronous, "idem", ops, elapsed);
    Ok(())
}

// The statements `idem_core::store::sqlite` runs for a claim and a complete, read from the
// store's own file: they are private to the store, and a copy here could drift from it.
#[path = "../../../../idem-core/src/store/sqlite/statements.rs"]
#[allow(dead_code)] // the file holds every statement of the store; the baseline runs four
mod statements;
use statements::{
    EVICT_ON_CLAIM as DELETE_EXPIRED, FENCE_FLOOR, FENCE_FLOOR_SCHEMA, SCHEMA, SELECT_ONE, UPSERT,
};

/// A key shaped like the record keys idem writes: 64 hex digits that look random, so that
/// each insert lands on an arbitrary leaf of the primary-key index, as a SHA-256 key does.
/// (Keys that grow in order would append to the index's last page and touch fewer pages per
/// commit than idem does.) A mix of the worker and the counter, not a hash: the baseline should
/// not pay for SHA-256.
fn record_key(worker: &str, ops: u64) -> String {
    let seed = worker.bytes().fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut state = seed ^ ops.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut word = || {
        // splitmix64's output step.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    format!(
        "{:016x}{:016x}{:016x}{:016x}",
        word(),
        word(),
        word(),
        word()
    )
}

/// Whether a row is stored under `key` (the read each transaction starts with).
fn exists(tx: &Connection, key: &str) -> rusqlite::Result<bool> {
    let mut select = tx.prepare_cached(SELECT_ONE)?;
    let mut rows = select.query([key])?;
    Ok(rows.next()?.is_some())
}

fn busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// `op` inside `BEGIN IMMEDIATE` ... `COMMIT`, tried again when SQLite still reports the file
/// busy after the busy timeout (which it does without waiting in a few cases, e.g. while
/// another connection recovers or restarts the WAL), as `SqliteStore` does: four attempts,
/// 50 ms more of pause before each.
fn transact(
    conn: &mut Connection,
    mut op: impl FnMut(&Connection) -> rusqlite::Result<()>,
) -> rusqlite::Result<()> {
    let mut tries = 1;
    loop {
        let attempt = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .and_then(|tx| {
                op(&tx)?;
                tx.commit()
            });
        match attempt {
            Err(e) if tries < 4 && busy(&e) => {
                std::thread::sleep(Duration::from_millis(50) * tries);
                tries += 1;
            }
            other => return other,
        }
    }
}

fn raw(db: &str, worker: &str, window: Window, synchronous: Synchronous) -> Result<(), String> {
    let sql = |step: &'static str| move |e: rusqlite::Error| format!("{step}: {e}");
    let mut conn = Connection::open(db).map_err(sql("open"))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(sql("busy timeout"))?;
    // Two processes set the file up at the same instant: the loser of the race for WAL mode
    // is told busy without waiting, so the set-up is tried again, as `SqliteStore` does.
    let mut tries = 1;
    let _: String = loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(e) if tries < 4 && busy(&e) => {
                std::thread::sleep(Duration::from_millis(50) * tries);
                tries += 1;
            }
            other => break other.map_err(sql("journal mode"))?,
        }
    };
    let pragma = match synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", pragma)
        .map_err(sql("synchronous"))?;
    let set: i64 = conn
        .query_row("PRAGMA synchronous", [], |row| row.get(0))
        .map_err(sql("synchronous"))?;
    if set != level(synchronous) {
        return Err(format!("raw: PRAGMA synchronous is {set}, not {pragma}"));
    }
    transact(&mut conn, |tx| {
        tx.execute_batch(SCHEMA)?;
        tx.execute_batch(FENCE_FLOOR_SCHEMA)
    })
    .map_err(sql("schema"))?;
    // What idem stores for the same call: the canonical arguments and the outcome's JSON.
    let arguments: serde_json::Value =
        serde_json::from_str(ARGUMENTS).map_err(|e| e.to_string())?;
    let canonical = serde_json::to_string(&arguments).map_err(|e| e.to_string())?;
    let fingerprint = "5".repeat(64);
    let outcome = r#"{"success":"\"ok\""}"#;
    // The policy the store keeps beside each record (the execution contract), as idem
    // writes it for this tool.
    let contract = idem::Registry::linked()
        .map_err(|e| e.to_string())?
        .get("noop_idempotent_write")
        .ok_or("the bench's tools are linked")?
        .contract(Duration::from_secs(86_400))
        .to_json();
    let end = window.wait();
    let begin = Instant::now();
    let mut ops = 0u64;
    while Instant::now() < end {
        let key = record_key(worker, ops);
        let now = idem::record::Timestamp::now().as_millis() as i64;
        // Claim: read, read the fence floor (the key has no record), insert in progress,
        // evict up to two expired records.
        transact(&mut conn, |tx| {
            black_box(exists(tx, &key)?);
            let floor: i64 = tx.prepare_cached(FENCE_FLOOR)?.query_row([], |row| row.get(0))?;
            black_box(floor);
            tx.prepare_cached(UPSERT)?.execute(params![
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
                now,
                TENANT,
                contract.as_str()
            ])?;
            tx.prepare_cached(DELETE_EXPIRED)?.execute([now])?;
            Ok(())
        })
        .map_err(sql("claim"))?;
        // Complete: read, write the outcome.
        transact(&mut conn, |tx| {
            black_box(exists(tx, &key)?);
            tx.prepare_cached(UPSERT)?.execute(params![
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
                now,
                TENANT,
                contract.as_str()
            ])?;
            Ok(())
        })
        .map_err(sql("complete"))?;
        ops += 1;
    }
    report(synchronous, "raw", ops, begin.elapsed());
    Ok(())
}

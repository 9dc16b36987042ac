//! Recovery without a caller, on the embedded SQLite store. A worker process starts two
//! calls — a refund (`idempotent_write`) and a receipt email (`non_idempotent_write`) — and is
//! killed with SIGKILL while both are running, before either is recorded. Nobody retries
//! them. A recovery pass in this process then settles each by its class: the refund is run
//! again from its stored arguments with the key its first attempt had (the payment provider
//! dedupes by it), the email is turned Unknown and left for an operator, since it has no
//! verify hook. The effects go to `effects.log` beside the database, as a provider's log.
//!
//! ```sh
//! cargo run --example fleet
//! ```

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::prelude::*;
use idem::{SqliteStore, dispatch::RecoveryAction, dispatch::RecoveryOptions};
use serde_json::json;

/// Bodies that have started in this process (the worker dies once both have).
static STARTED: AtomicUsize = AtomicUsize::new(0);

fn log_effect(line: &str) {
    let path = std::env::var("FLEET_EFFECTS").expect("FLEET_EFFECTS");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("effects.log");
    writeln!(file, "{line}").expect("write effects.log");
}

/// In the worker, once both bodies run: die as a crash does, with no destructor run.
async fn maybe_die() {
    STARTED.fetch_add(1, Ordering::SeqCst);
    if std::env::var_os("FLEET_WORKER").is_none() {
        return;
    }
    while STARTED.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: `kill` and `getpid` have no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Refund an order (the provider dedupes refunds by the idempotency key).
#[tool(class = "idempotent_write", lease_secs = 1)]
async fn refund(ctx: &ToolContext, order: String, cents: u64) -> Result<String, ToolError> {
    log_effect(&format!(
        "refund request  {order} {cents} key={}",
        ctx.idempotency_key()
    ));
    maybe_die().await;
    log_effect(&format!(
        "refund applied  {order} {cents} key={}",
        ctx.idempotency_key()
    ));
    Ok(format!("refunded {cents} on {order}"))
}

/// Email the customer a receipt.
#[tool(class = "non_idempotent_write", lease_secs = 1)]
async fn email_receipt(ctx: &ToolContext, order: String) -> Result<String, ToolError> {
    log_effect(&format!(
        "email sent      {order} key={}",
        ctx.idempotency_key()
    ));
    maybe_die().await;
    Ok(format!("receipt for {order} sent"))
}

fn dispatcher(db: &Path) -> Dispatcher {
    let store = Arc::new(SqliteStore::open(db).expect("open the SQLite store"));
    Dispatcher::new(Registry::linked().expect("the tools"), store).expect("a dispatcher")
}

fn calls() -> [ToolCall; 2] {
    [
        ToolCall::new("refund", json!({"order": "A-1001", "cents": 2500}))
            .with_key("refund-A-1001"),
        ToolCall::new("email_receipt", json!({"order": "A-1001"})).with_key("receipt-A-1001"),
    ]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = RunContext::new("shop-7");
    if let Some(db) = std::env::var_os("FLEET_WORKER") {
        // The worker: both calls at once; the process dies inside them.
        let d = dispatcher(Path::new(&db));
        let [a, b] = calls();
        let _ = tokio::join!(d.dispatch(&a, &run), d.dispatch(&b, &run));
        unreachable!("the worker was to die mid-call");
    }

    let dir = std::env::temp_dir().join(format!("idem-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db: PathBuf = dir.join("idem.db");
    let effects = dir.join("effects.log");
    // SAFETY: set before any other thread of this process exists.
    unsafe { std::env::set_var("FLEET_EFFECTS", &effects) };

    println!("1. a worker starts a refund and a receipt email, and is killed mid-call");
    let status = std::process::Command::new(std::env::current_exe()?)
        .env("FLEET_WORKER", &db)
        .env("FLEET_EFFECTS", &effects)
        .status()?;
    println!("   worker ended: {status}");

    println!("2. nobody retries; a recovery pass settles what the dead worker held");
    let d = dispatcher(&db);
    tokio::time::sleep(Duration::from_millis(1_200)).await; // its one-second lease runs out
    for pass in 1..=2 {
        for r in d.recover(&RecoveryOptions::default()).await?.records {
            let what = match &r.action {
                RecoveryAction::ReRan { key, outcome } => {
                    format!("run again with key {key}: {outcome:?}")
                }
                RecoveryAction::MarkedUnknown => "turned Unknown (never run again)".to_owned(),
                RecoveryAction::Reported(why) => format!("left for an operator: {why}"),
                other => format!("{other:?}"),
            };
            println!("   pass {pass}: {} ({}): {what}", r.tool, r.tenant);
        }
    }

    println!("3. the agent comes back and asks again");
    for call in calls() {
        match d.dispatch(&call, &run).await {
            Ok(done) => println!(
                "   {}: {} (deduplicated: {})",
                call.name, done.output, done.deduplicated
            ),
            Err(e) => println!("   {}: {e}", call.name),
        }
    }

    println!("4. what the providers saw ({}):", effects.display());
    for line in std::fs::read_to_string(&effects)?.lines() {
        println!("   {line}");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

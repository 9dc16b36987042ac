//! Worker processes of one run racing for the last unit of a budget, on SQLite, PostgreSQL
//! and Redis: six processes, each a dispatcher of its own, make three distinct refunds each
//! in the same run against a limit of five refunds per run. The provider's ledger (a file the
//! processes share) holds exactly five refunds, and every refused call names the limit.

use std::path::Path;
use std::time::Duration;

use idem::prelude::*;
use idem::tool::Limit;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::child::Child;
use crate::support::dispatcher::dispatcher;
use crate::support::ledger::{call_downstream, parse_ledger};
use crate::support::services::unique;
use crate::support::stores::open_store;

const CHILD_ENV: &str = "IDEM_LIMIT_RACE_CHILD";
const WORKERS: usize = 6;
const CALLS_EACH: usize = 3;
const LIMIT: u64 = 5;
/// Safety net against a hang (not a measurement).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    store: String,
    target: String,
    scope: String,
    tenant: String,
    worker: usize,
    ledger: String,
}

/// A refund, applied at the provider (the shared ledger) under the call's key.
fn refund(ledger: String) -> idem::ToolDef {
    idem::ToolDef::builder("raced_refund", ToolClass::NonIdempotentWrite)
        .description("Refund an order.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .limit(Limit::calls("refunds per run", LIMIT))
        .handler(move |ctx: ToolContext, args: Value| {
            let ledger = ledger.clone();
            async move {
                let label = format!("refund-{}", args["order"].as_str().unwrap_or("?"));
                call_downstream(
                    Path::new(&ledger),
                    &label,
                    ctx.downstream_key().as_str(),
                    || {},
                );
                Ok::<_, ToolError>(json!("refunded"))
            }
        })
        .build()
        .expect("the refund tool")
}

/// One worker process: its calls, each answer printed as a line the parent reads.
#[test]
fn limit_race_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: Spec = serde_json::from_str(&spec).expect("the child's spec");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = open_store(&spec.store, &spec.target, &spec.scope, 2).await;
        let registry = Registry::builder()
            .add(refund(spec.ledger.clone()))
            .build()
            .unwrap();
        let d = dispatcher(registry, store);
        let run = RunContext::new(spec.tenant.as_str()).with_run("run-raced", 1);
        for i in 0..CALLS_EACH {
            let order = format!("o-{}-{i}", spec.worker);
            let call = ToolCall::new("raced_refund", json!({"order": order}))
                .with_call_id(format!("call_{}_{i}", spec.worker));
            match d.dispatch(&call, &run).await {
                Ok(_) => println!("answer applied"),
                Err(e) => println!("answer {} {e}", e.code()),
            }
        }
    });
}

async fn worker_processes_apply_exactly_the_limit(store: &str, target: &str, scope: &str) {
    let tenant = unique("raced");
    let ledger = std::env::temp_dir().join(format!("{scope}.ledger"));
    let dir = std::env::temp_dir();
    let children: Vec<Child> = (0..WORKERS)
        .map(|worker| {
            let spec = Spec {
                store: store.to_owned(),
                target: target.to_owned(),
                scope: scope.to_owned(),
                tenant: tenant.clone(),
                worker,
                ledger: ledger.display().to_string(),
            };
            let name = format!("{scope}-{worker}");
            Child::spawn(
                "limit_processes::limit_race_child",
                CHILD_ENV,
                &spec,
                &dir,
                &name,
            )
            .expect("spawn a worker")
        })
        .collect();
    let mut answers = Vec::new();
    for child in children {
        let exited = child.wait(CHILD_DEADLINE).expect("a worker ends");
        assert!(exited.status.success(), "{}", exited.dump());
        answers.extend(
            exited
                .stdout
                .lines()
                // The first line follows the harness's "test ... " on the same line.
                .filter_map(|l| {
                    l.find("answer ")
                        .map(|at| l[at + "answer ".len()..].to_owned())
                }),
        );
    }
    assert_eq!(answers.len(), WORKERS * CALLS_EACH, "{answers:?}");
    let applied = answers.iter().filter(|a| *a == "applied").count();
    assert_eq!(applied as u64, LIMIT, "{answers:?}");
    for refused in answers.iter().filter(|a| *a != "applied") {
        assert!(
            refused.starts_with("not_authorized")
                && refused.contains("the limit `refunds per run` (5 call(s) per run) is used up"),
            "{refused}"
        );
    }
    let effects = parse_ledger(&std::fs::read_to_string(&ledger).unwrap_or_default());
    let refunds = effects.iter().filter(|e| e.kind == "applied").count();
    assert_eq!(refunds as u64, LIMIT, "{effects:?}");
    let _ = std::fs::remove_file(&ledger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_worker_processes_apply_exactly_the_limit() {
    let scope = unique("raced_sqlite");
    let path = std::env::temp_dir().join(format!("{scope}.sqlite"));
    let _scratch = crate::Scratch(path.clone());
    // The file exists with its tables before the workers open it.
    drop(idem::store::sqlite::SqliteStore::open(&path).unwrap());
    worker_processes_apply_exactly_the_limit("sqlite", &path.display().to_string(), &scope).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_worker_processes_apply_exactly_the_limit() {
    let test = "postgres_worker_processes_apply_exactly_the_limit";
    let Some(url) =
        crate::support::services::service_url(crate::support::services::POSTGRES_URL, test)
    else {
        return;
    };
    let schemas = crate::support::postgres_schemas::postgres_schemas(&url);
    let scope = schemas.fresh("raced_pg");
    // The schema exists with its tables before the workers connect.
    drop(open_store("postgres", &url, &scope, 1).await);
    worker_processes_apply_exactly_the_limit("postgres", &url, &scope).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_worker_processes_apply_exactly_the_limit() {
    let test = "redis_worker_processes_apply_exactly_the_limit";
    let Some(url) =
        crate::support::services::service_url(crate::support::services::REDIS_URL, test)
    else {
        return;
    };
    let scope = unique("raced_redis");
    worker_processes_apply_exactly_the_limit("redis", &url, &scope).await;
}
